// Tiled GEMM / implicit-GEMM convolution with TS x TS shared-memory tiles: GLSL port of
// backends/opencl/kernels/gemm.cl. One invocation per output element, work-group TS x TS (the host's
// kTile, gpu/matmul_ops.h); global = (N, M, batch).
#define TS 16

//== kernel gemm_f32
// gemm_f32(C, co, int scb, int scm, A, ao, int sab, int sam, int sak, B, bo, int sbb, int sbk, int sbn,
//          bias, biaso, int has_bias, int M, int N, int K, float alpha, int act):
// C[b, m, n] = act(alpha * sum_k A[b, m, k] * B[b, k, n] + bias[n]); operands addressed through explicit
// strides (transposed operands and broadcast batches need no copies).
layout(std430, binding = 0) writeonly buffer B0 { float C[]; };
layout(std430, binding = 1) readonly buffer B1 { float A[]; };
layout(std430, binding = 2) readonly buffer B2 { float B[]; };
layout(std430, binding = 3) readonly buffer B3 { float bias[]; };
layout(location = 0) uniform int co;
layout(location = 1) uniform int scb;
layout(location = 2) uniform int scm;
layout(location = 3) uniform int ao;
layout(location = 4) uniform int sab;
layout(location = 5) uniform int sam;
layout(location = 6) uniform int sak;
layout(location = 7) uniform int bo;
layout(location = 8) uniform int sbb;
layout(location = 9) uniform int sbk;
layout(location = 10) uniform int sbn;
layout(location = 11) uniform int biaso;
layout(location = 12) uniform int has_bias;
layout(location = 13) uniform int M;
layout(location = 14) uniform int N;
layout(location = 15) uniform int K;
layout(location = 16) uniform float alpha;
layout(location = 17) uniform int act;
shared float As[TS][TS + 1];
shared float Bs[TS][TS + 1];
void main() {
  int tn = sd_local_id(0), tm = sd_local_id(1);
  int n = sd_group_id(0) * TS + tn;
  int m = sd_group_id(1) * TS + tm;
  int b = sd_global_id(2);
  int abase = ao + b * sab, bbase = bo + b * sbb;
  float acc = 0.0;
  for (int k0 = 0; k0 < K; k0 += TS) {
    int ak = k0 + tn;
    As[tm][tn] = (m < M && ak < K) ? A[abase + m * sam + ak * sak] : 0.0;
    int bk = k0 + tm;
    Bs[tm][tn] = (bk < K && n < N) ? B[bbase + bk * sbk + n * sbn] : 0.0;
    SD_BARRIER();
    for (int kk = 0; kk < TS; ++kk) acc += As[tm][kk] * Bs[kk][tn];
    SD_BARRIER();
  }
  if (m < M && n < N) {
    float v = alpha * acc + (has_bias != 0 ? bias[biaso + n] : 0.0);
    C[co + b * scb + m * scm + n] = sd_act(v, act);
  }
}

//== kernel conv2d_igemm
// conv2d_igemm(Y, yo, X, xo, W, wo, bias, biaso, int has_bias, int H, int Wd, int Ci, int OH, int OW, int Co,
//              int KH, int KW, int sh, int sw, int dh, int dw, int ph, int pw, int M, int act):
// CONV_2D, NHWC input, OHWI filter, as an implicit GEMM: rows m = (image, oy, ox), columns n = output
// channel, k = (ky, kx, ci); the im2col matrix is never stored.
layout(std430, binding = 0) writeonly buffer B0 { float Y[]; };
layout(std430, binding = 1) readonly buffer B1 { float X[]; };
layout(std430, binding = 2) readonly buffer B2 { float W[]; };
layout(std430, binding = 3) readonly buffer B3 { float bias[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int wo;
layout(location = 3) uniform int biaso;
layout(location = 4) uniform int has_bias;
layout(location = 5) uniform int H;
layout(location = 6) uniform int Wd;
layout(location = 7) uniform int Ci;
layout(location = 8) uniform int OH;
layout(location = 9) uniform int OW;
layout(location = 10) uniform int Co;
layout(location = 11) uniform int KH;
layout(location = 12) uniform int KW;
layout(location = 13) uniform int sh;
layout(location = 14) uniform int sw;
layout(location = 15) uniform int dh;
layout(location = 16) uniform int dw;
layout(location = 17) uniform int ph;
layout(location = 18) uniform int pw;
layout(location = 19) uniform int M;
layout(location = 20) uniform int act;
shared float As[TS][TS + 1];
shared float Bs[TS][TS + 1];
void main() {
  int tn = sd_local_id(0), tm = sd_local_id(1);
  int n = sd_group_id(0) * TS + tn;
  int m = sd_group_id(1) * TS + tm;
  int K = KH * KW * Ci;
  int ox = m % OW, oy = (m / OW) % OH, img = m / (OW * OH);
  float acc = 0.0;
  for (int k0 = 0; k0 < K; k0 += TS) {
    int ak = k0 + tn;
    float av = 0.0;
    if (m < M && ak < K) {
      int ci = ak % Ci, kx = (ak / Ci) % KW, ky = ak / (Ci * KW);
      int iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
      if (iy >= 0 && iy < H && ix >= 0 && ix < Wd) av = X[xo + ((img * H + iy) * Wd + ix) * Ci + ci];
    }
    As[tm][tn] = av;
    int bk = k0 + tm;
    Bs[tm][tn] = (bk < K && n < Co) ? W[wo + n * K + bk] : 0.0;
    SD_BARRIER();
    for (int kk = 0; kk < TS; ++kk) acc += As[tm][kk] * Bs[kk][tn];
    SD_BARRIER();
  }
  if (m < M && n < Co) Y[yo + m * Co + n] = sd_act(acc + (has_bias != 0 ? bias[biaso + n] : 0.0), act);
}
