// Reductions with one work-group per output and a shared-memory tree: GLSL port of
// backends/opencl/kernels/reduce.cl. x viewed as [outer, red, inner]; mode 0 = mean, 1 = sum, 2 = max.
// The work-group size is RED_WG (power of two) and must equal kReduceWg on the host (gpu/reduce_ops.cc):
// the shared tree below is sized by it at compile time.
#define RED_WG 64

//== kernel reduce_f32
// reduce_f32(y, yo, x, xo, int red, int inner, int mode)
layout(std430, binding = 0) writeonly buffer B0 { float y[]; };
layout(std430, binding = 1) readonly buffer B1 { float x[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int red;
layout(location = 3) uniform int inner;
layout(location = 4) uniform int mode;
shared float scratch[RED_WG];
void main() {
  int outi = sd_group_id(0);
  int lid = sd_local_id(0);
  int lsz = sd_local_size(0);
  int o = outi / inner, k = outi % inner;
  int base = xo + o * red * inner + k;
  float acc = mode == 2 ? SD_NEG_INF : 0.0;
  for (int r = lid; r < red; r += lsz) {
    float v = x[base + r * inner];
    acc = mode == 2 ? max(acc, v) : acc + v;
  }
  scratch[lid] = acc;
  SD_BARRIER();
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = mode == 2 ? max(scratch[lid], scratch[lid + s]) : scratch[lid] + scratch[lid + s];
    SD_BARRIER();
  }
  if (lid == 0) y[yo + outi] = mode == 0 ? scratch[0] / float(red) : scratch[0];
}

//== kernel softmax_f32
// softmax_f32(y, yo, x, xo, int cols, float beta): row softmax over the last axis,
// y = exp(beta * (x - max)) / sum. One work-group per row. The max and the sum reduce in separate
// shared arrays: smax[0] is read by every invocation and must never be written again (common.glsl,
// "shared broadcast slots"; sharing one array was issue #7 on NVIDIA).
layout(std430, binding = 0) writeonly buffer B0 { float y[]; };
layout(std430, binding = 1) readonly buffer B1 { float x[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int cols;
layout(location = 3) uniform float beta;
shared float smax[RED_WG];
shared float ssum[RED_WG];
void main() {
  int row = sd_group_id(0);
  int lid = sd_local_id(0);
  int lsz = sd_local_size(0);
  int xr = xo + row * cols;
  int yr = yo + row * cols;
  float mx = SD_NEG_INF;
  for (int c = lid; c < cols; c += lsz) mx = max(mx, x[xr + c]);
  smax[lid] = mx;
  SD_BARRIER();
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) smax[lid] = max(smax[lid], smax[lid + s]);
    SD_BARRIER();
  }
  mx = smax[0];
  float sum = 0.0;
  for (int c = lid; c < cols; c += lsz) sum += exp(beta * (x[xr + c] - mx));
  ssum[lid] = sum;
  SD_BARRIER();
  for (int s = lsz / 2; s > 0; s >>= 1) {
    if (lid < s) ssum[lid] += ssum[lid + s];
    SD_BARRIER();
  }
  float inv = 1.0 / ssum[0];
  for (int c = lid; c < cols; c += lsz) y[yr + c] = exp(beta * (x[xr + c] - mx)) * inv;
}
