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

// Row softmax over the last axis: y = exp(beta*(x - max)) / sum. One work-group per row.
__kernel void softmax_f32(__global float* y, int yo, __global const float* x, int xo, int cols, float beta) {
  __local float scratch[RED_WG];
  const int row = get_group_id(0);
  const int lid = get_local_id(0);
  const int lsz = get_local_size(0);
  __global const float* xr = x + xo + row * cols;
  __global float* yr = y + yo + row * cols;
  float mx = -INFINITY;
  for (int c = lid; c < cols; c += lsz) mx = fmax(mx, xr[c]);
  scratch[lid] = mx;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = fmax(scratch[lid], scratch[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  mx = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  float sum = 0.0f;
  for (int c = lid; c < cols; c += lsz) sum += exp(beta * (xr[c] - mx));
  scratch[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = 1.0f / scratch[0];
  for (int c = lid; c < cols; c += lsz) yr[c] = exp(beta * (xr[c] - mx)) * inv;
}
