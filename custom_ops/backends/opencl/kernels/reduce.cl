// Reductions with one work-group per output and a local-memory tree.
// x viewed as [outer, red, inner]; mode 0 = mean, 1 = sum, 2 = max.
// The work-group size is RED_WG (power of two) and must equal kReduceWg on the host
// (gpu/reduce_ops.cc): the local tree below is sized by it at compile time.
#define RED_WG 64

__kernel void reduce_f32(__global float* y, int yo, __global const float* x, int xo, int red, int inner, int mode) {
  __local float scratch[RED_WG];
  const int out = get_group_id(0);
  const int lid = get_local_id(0);
  const int lsz = get_local_size(0);
  const int o = out / inner, k = out % inner;
  const int base = xo + o * red * inner + k;
  float acc = mode == 2 ? -INFINITY : 0.0f;
  for (int r = lid; r < red; r += lsz) {
    const float v = x[base + r * inner];
    acc = mode == 2 ? fmax(acc, v) : acc + v;
  }
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = mode == 2 ? fmax(scratch[lid], scratch[lid + s]) : scratch[lid] + scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) y[yo + out] = mode == 0 ? scratch[0] / (float)red : scratch[0];
}

// Two-stage reduction for few outputs over long rows (inner == 1; e.g. the unfused VAE GroupNorm's MEAN over
// 1M elements into 32 outputs, which one work-group per output would leave on 32 work-groups):
//   reduce_partial: one work-group per (row, chunk of `chunk` elements) -> part[row*nchunks + k], partial sums
//                   pre-scaled by `scale` (1/red for MEAN, so no chunk sum grows large) or the partial max;
//   then reduce_f32 over part viewed as [rows, nchunks, 1] with mode 1 (sum) or 2 (max).
// reduce_partial(y, yo, x, xo, int red, int chunk, int nchunks, int mode, float scale)
__kernel void reduce_partial(__global float* y, int yo, __global const float* x, int xo, int red, int chunk,
                             int nchunks, int mode, float scale) {
  __local float scratch[RED_WG];
  const int k = get_group_id(0);
  const int row = k / nchunks, c = k % nchunks;
  const int lid = get_local_id(0);
  const int r0 = c * chunk, r1 = min(red, r0 + chunk);
  __global const float* xr = x + xo + row * red;
  float acc = mode == 2 ? -INFINITY : 0.0f;
  for (int r = r0 + lid; r < r1; r += RED_WG) acc = mode == 2 ? fmax(acc, xr[r]) : acc + xr[r];
  scratch[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = RED_WG / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = mode == 2 ? fmax(scratch[lid], scratch[lid + s]) : scratch[lid] + scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) y[yo + k] = mode == 2 ? scratch[0] : scratch[0] * scale;
}

// Row softmax over the last axis: y = exp(beta*(x - max)) / sum. One work-group per row. Each work-item keeps
// an online (max, sum) over its columns (one read of x), the pairs are merged in the local tree, then one
// more read writes the output (the textbook kernel reads x three times).
__kernel void softmax_f32(__global float* y, int yo, __global const float* x, int xo, int cols, float beta) {
  __local float sm[RED_WG];
  __local float ss[RED_WG];
  const int row = get_group_id(0);
  const int lid = get_local_id(0);
  const int lsz = get_local_size(0);
  __global const float* xr = x + xo + row * cols;
  __global float* yr = y + yo + row * cols;
  float m = -INFINITY, s = 0.0f;
  for (int c = lid; c < cols; c += lsz) {
    const float v = beta * xr[c];
    if (v > m) {  // (from m = -inf: s = 0 * 0 + 1)
      s = s * exp(m - v) + 1.0f;
      m = v;
    } else if (v != -INFINITY) {  // masked (-inf) entries add nothing; exp(-inf - -inf) would be NaN
      s += exp(v - m);
    }
  }
  sm[lid] = m;
  ss[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int st = lsz / 2; st > 0; st >>= 1) {
    if (lid < st) {
      const float m1 = sm[lid], m2 = sm[lid + st];
      const float mx = fmax(m1, m2);
      if (mx != -INFINITY) {
        ss[lid] = ss[lid] * exp(m1 - mx) + ss[lid + st] * exp(m2 - mx);
        sm[lid] = mx;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float mx = sm[0];
  const float inv = 1.0f / ss[0];
  for (int c = lid; c < cols; c += lsz) yr[c] = exp(beta * xr[c] - mx) * inv;
}
