// SdGroupNorm (+ optional SiLU) in ONE kernel on GL: GLSL port of ops/group_norm/opencl.cl. One
// work-group per (batch, group); x viewed as [N, A, C, B] (channels on axis 2 of the view), group g owns
// channels [g*cpg, (g+1)*cpg). Two-pass statistics (mean, then centred sum of squares) through shared
// memory, then the normalise + affine + activation write.
// The work-group size is GN_WG and must equal kGroupNormWg on the host (gpu/sd_ops.cc).
#define GN_WG 64

//== kernel group_norm_f32
// group_norm_f32(y, yo, x, xo, gamma, go, beta, bo, int A, int C, int B, int G, float eps, int silu)
layout(std430, binding = 0) writeonly buffer B0 { float y[]; };
layout(std430, binding = 1) readonly buffer B1 { float x[]; };
layout(std430, binding = 2) readonly buffer B2 { float gamma[]; };
layout(std430, binding = 3) readonly buffer B3 { float beta[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int go;
layout(location = 3) uniform int bo;
layout(location = 4) uniform int A;
layout(location = 5) uniform int C;
layout(location = 6) uniform int B;
layout(location = 7) uniform int G;
layout(location = 8) uniform float eps;
layout(location = 9) uniform int silu;
shared float ssum[GN_WG];  // one array per reduction: common.glsl, "shared broadcast slots"
shared float ssq[GN_WG];
void main() {
  int ng = sd_group_id(0);
  int n = ng / G, g = ng % G;
  int cpg = C / G;
  int lid = sd_local_id(0), lsz = sd_local_size(0);
  int count = A * cpg * B;
  // element e of the group -> (a, c_in_group, b)
  float sum = 0.0;
  for (int e = lid; e < count; e += lsz) {
    int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    sum += x[xo + ((n * A + a) * C + g * cpg + cg) * B + b];
  }
  ssum[lid] = sum;
  SD_BARRIER();
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) ssum[lid] += ssum[lid + s];
    SD_BARRIER();
  }
  float mean = ssum[0] / float(count);
  float sq = 0.0;
  for (int e = lid; e < count; e += lsz) {
    int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    float d = x[xo + ((n * A + a) * C + g * cpg + cg) * B + b] - mean;
    sq += d * d;
  }
  ssq[lid] = sq;
  SD_BARRIER();
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) ssq[lid] += ssq[lid + s];
    SD_BARRIER();
  }
  float inv = inversesqrt(ssq[0] / float(count) + eps);
  for (int e = lid; e < count; e += lsz) {
    int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    int c = g * cpg + cg;
    int idx = ((n * A + a) * C + c) * B + b;
    float v = (x[xo + idx] - mean) * inv * gamma[go + c] + beta[bo + c];
    if (silu != 0) v = v / (1.0 + exp(-v));
    y[yo + idx] = v;
  }
}
