// SdConv2DWinograd's filter transform on the device: the op uploads the model's 3x3 filter as stored (9 floats per
// (ci, co)) and this kernel writes U = G g G^T (a^2 floats: 4x the bytes for F4, 7.1x for F6), instead of the host
// computing U and uploading all of it (gpu/weight_prep.h).
//   winograd_filter_fM(U, uo, F, fo, int Ci, int Co, int ld)
//     U[uo + (i*a + j) * plane + idx(ci, co)] = (G f G^T)[i][j] for f[r][s] = F[fo + ((co*3 + r)*3 + s)*Ci + ci]
//     (OHWI). ld == 0: row-major, idx = ci*Co + co, plane = Ci*Co. ld > 0 (Co rounded up to 64): tile-major,
//     idx = ((co/64)*Ci + ci)*64 + co%64, plane = Ci*ld, and the padding columns co in [Co, ld) are written 0.
//     global = (ld > 0 ? ld : Co, Ci), local = (64, 1, 1).
// Computed in double where the device has it, with contraction off (in this function only) and the host's operation order (TransformFilter
// in gpu/winograd_ops.cc), so U is bit for bit what the host computes; in float elsewhere (a few ulps).
// G's entries are exact rationals (numerator, denominator) of ops/conv2d_winograd/matrices.inc
// (tests/converter/test_winograd_op.py compares them with the derivation).
#if defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double wf_real;
#else
typedef float wf_real;
#endif

// (numerator, denominator) per entry of G (a x 3, row-major).
__constant int wino_f2_g[24] = {
    1, 1, 0, 1, 0, 1,
    1, 2, 1, 2, 1, 2,
    -1, 2, 1, 2, -1, 2,
    0, 1, 0, 1, -1, 1};
__constant int wino_f4_g[36] = {
    1, 4, 0, 1, 0, 1,
    1, 6, 1, 6, 1, 6,
    -1, 6, 1, 6, -1, 6,
    -1, 24, -1, 12, -1, 6,
    1, 24, -1, 12, 1, 6,
    0, 1, 0, 1, 1, 1};
__constant int wino_f6_g[48] = {
    1, 4, 0, 1, 0, 1,
    -1, 18, -1, 18, -1, 18,
    1, 18, -1, 18, 1, 18,
    1, 360, 1, 180, 1, 90,
    -1, 360, 1, 180, -1, 90,
    16, 45, 8, 45, 4, 45,
    -16, 45, 8, 45, -4, 45,
    0, 1, 0, 1, -1, 4};

// Called with literal A so every loop has a constant trip count.
inline void wino_filter(__global float* U, int uo, __global const float* F, int fo, int Ci, int Co, int ld, int A,
                        __constant int* gq) {
#pragma OPENCL FP_CONTRACT OFF
  const int co = get_global_id(0), ci = get_global_id(1);
  const int cols = ld > 0 ? ld : Co;
  if (co >= cols || ci >= Ci) return;
  const int plane = Ci * cols;
  const int idx = ld > 0 ? ((co / 64) * Ci + ci) * 64 + co % 64 : ci * Co + co;
  if (co >= Co) {  // tile-major padding column
    for (int k = 0; k < A * A; ++k) U[uo + k * plane + idx] = 0.0f;
    return;
  }
  wf_real g[24];
#pragma unroll
  for (int k = 0; k < 3 * A; ++k) g[k] = (wf_real)gq[2 * k] / (wf_real)gq[2 * k + 1];
  wf_real f[9];
#pragma unroll
  for (int rs = 0; rs < 9; ++rs) f[rs] = (wf_real)F[fo + (co * 9 + rs) * Ci + ci];
#pragma unroll
  for (int i = 0; i < A; ++i) {
    wf_real gf[3];
#pragma unroll
    for (int s = 0; s < 3; ++s) gf[s] = g[i * 3] * f[s] + g[i * 3 + 1] * f[3 + s] + g[i * 3 + 2] * f[6 + s];
#pragma unroll
    for (int j = 0; j < A; ++j) {
      const wf_real v = gf[0] * g[j * 3] + gf[1] * g[j * 3 + 1] + gf[2] * g[j * 3 + 2];
      U[uo + (i * A + j) * plane + idx] = (float)v;
    }
  }
}

__kernel void winograd_filter_f2(__global float* U, int uo, __global const float* F, int fo, int Ci, int Co, int ld) {
  wino_filter(U, uo, F, fo, Ci, Co, ld, 4, wino_f2_g);
}
__kernel void winograd_filter_f4(__global float* U, int uo, __global const float* F, int fo, int Ci, int Co, int ld) {
  wino_filter(U, uo, F, fo, Ci, Co, ld, 6, wino_f4_g);
}
__kernel void winograd_filter_f6(__global float* U, int uo, __global const float* F, int fo, int Ci, int Co, int ld) {
  wino_filter(U, uo, F, fo, Ci, Co, ld, 8, wino_f6_g);
}
