// SdConv2DWinograd's filter transform on GL: GLSL port of ops/conv2d_winograd/opencl_filter.cl (same kernels and
// parameters; see there and gpu/weight_prep.h). The op uploads the model's 3x3 filter as stored and this kernel writes
// U = G g G^T, in float (GLSL ES has no double: a few ulps from the host's float64 transform).
//   winograd_filter_fM(U, uo, F, fo, int Ci, int Co, int ld)    global = (ld > 0 ? ld : Co, Ci), local = (64, 1, 1)
// G as (numerator, denominator) pairs of ops/conv2d_winograd/matrices.inc (tests compare them with the derivation).

const int wino_f2_g[24] = int[24](
    1, 1, 0, 1, 0, 1,
    1, 2, 1, 2, 1, 2,
    -1, 2, 1, 2, -1, 2,
    0, 1, 0, 1, -1, 1);
const int wino_f4_g[36] = int[36](
    1, 4, 0, 1, 0, 1,
    1, 6, 1, 6, 1, 6,
    -1, 6, 1, 6, -1, 6,
    -1, 24, -1, 12, -1, 6,
    1, 24, -1, 12, 1, 6,
    0, 1, 0, 1, 1, 1);
const int wino_f6_g[48] = int[48](
    1, 4, 0, 1, 0, 1,
    -1, 18, -1, 18, -1, 18,
    1, 18, -1, 18, 1, 18,
    1, 360, 1, 180, 1, 90,
    -1, 360, 1, 180, -1, 90,
    16, 45, 8, 45, 4, 45,
    -16, 45, 8, 45, -4, 45,
    0, 1, 0, 1, -1, 4);

//== fragment wino_filter
// winograd_filter_fM(U, uo, F, fo, int Ci, int Co, int ld)
layout(std430, binding = 0) writeonly buffer B0 { float U[]; };
layout(std430, binding = 1) readonly buffer B1 { float F[]; };
layout(location = 0) uniform int uo;
layout(location = 1) uniform int fo;
layout(location = 2) uniform int Ci;
layout(location = 3) uniform int Co;
layout(location = 4) uniform int ld;
void main() {
  int co = sd_global_id(0), ci = sd_global_id(1);
  int cols = ld > 0 ? ld : Co;
  if (co >= cols || ci >= Ci) return;
  int plane = Ci * cols;
  int idx = ld > 0 ? ((co / 64) * Ci + ci) * 64 + co % 64 : ci * Co + co;
  if (co >= Co) {  // tile-major padding column
    for (int k = 0; k < A * A; ++k) U[uo + k * plane + idx] = 0.0;
    return;
  }
  float g[3 * A];
  for (int k = 0; k < 3 * A; ++k) g[k] = float(GQ[2 * k]) / float(GQ[2 * k + 1]);
  float f[9];
  for (int rs = 0; rs < 9; ++rs) f[rs] = F[fo + (co * 9 + rs) * Ci + ci];
  for (int i = 0; i < A; ++i) {
    float gf[3];
    for (int s = 0; s < 3; ++s) gf[s] = g[i * 3] * f[s] + g[i * 3 + 1] * f[3 + s] + g[i * 3 + 2] * f[6 + s];
    for (int j = 0; j < A; ++j) {
      U[uo + (i * A + j) * plane + idx] = gf[0] * g[j * 3] + gf[1] * g[j * 3 + 1] + gf[2] * g[j * 3 + 2];
    }
  }
}

//== kernel winograd_filter_f2
#define A 4
#define GQ wino_f2_g
//== include wino_filter

//== kernel winograd_filter_f4
#define A 6
#define GQ wino_f4_g
//== include wino_filter

//== kernel winograd_filter_f6
#define A 8
#define GQ wino_f6_g
//== include wino_filter
