// SdGroupNorm (+ optional SiLU) in ONE kernel: one work-group per (batch, group).
// x viewed as [N, A, C, B] (channels on axis 2 of the view), group g owns
// channels [g*cpg, (g+1)*cpg). Two-pass statistics (mean, then centred sum of
// squares) through local memory, then the normalise+affine+activation write.
// The work-group size is GN_WG and must equal kGroupNormWg on the host (gpu/sd_ops.cc).
#define GN_WG 64
__kernel void group_norm_f32(__global float* y, int yo, __global const float* x, int xo, __global const float* gamma,
                             int go, __global const float* beta, int bo, int A, int C, int B, int G, float eps,
                             int silu) {
  __local float scratch[GN_WG];
  const int ng = get_group_id(0);
  const int n = ng / G, g = ng % G;
  const int cpg = C / G;
  const int lid = get_local_id(0), lsz = get_local_size(0);
  const int count = A * cpg * B;
  // element e of the group -> (a, c_in_group, b)
  float sum = 0.0f;
  for (int e = lid; e < count; e += lsz) {
    const int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    sum += x[xo + ((n * A + a) * C + g * cpg + cg) * B + b];
  }
  scratch[lid] = sum;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float mean = scratch[0] / (float)count;
  barrier(CLK_LOCAL_MEM_FENCE);
  float sq = 0.0f;
  for (int e = lid; e < count; e += lsz) {
    const int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    const float d = x[xo + ((n * A + a) * C + g * cpg + cg) * B + b] - mean;
    sq += d * d;
  }
  scratch[lid] = sq;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv = rsqrt(scratch[0] / (float)count + eps);
  for (int e = lid; e < count; e += lsz) {
    const int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    const int c = g * cpg + cg;
    const int idx = ((n * A + a) * C + c) * B + b;
    float v = (x[xo + idx] - mean) * inv * gamma[go + c] + beta[bo + c];
    if (silu) v = v / (1.0f + exp(-v));
    y[yo + idx] = v;
  }
}
