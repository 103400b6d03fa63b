// Tiled GEMM / implicit-GEMM convolution with TS x TS local-memory tiles.
// One work-item per output element, work-group TS x TS; global = (N, M, batch).
#define TS 16

// C[b, m, n] = act(alpha * sum_k A[b, m, k] * B[b, k, n] + bias[n]); every operand is
// addressed through explicit strides, so transposed operands (FULLY_CONNECTED
// weights, BATCH_MATMUL adj_x/adj_y) and broadcast batches (stride 0) need no copies.
__kernel void gemm_f32(__global float* C, int co, int scb, int scm, __global const float* A, int ao, int sab, int sam,
                       int sak, __global const float* B, int bo, int sbb, int sbk, int sbn, __global const float* bias,
                       int biaso, int has_bias, int M, int N, int K, float alpha, int act) {
  __local float As[TS][TS + 1];
  __local float Bs[TS][TS + 1];
  const int tn = get_local_id(0), tm = get_local_id(1);
  const int n = get_group_id(0) * TS + tn;
  const int m = get_group_id(1) * TS + tm;
  const int b = get_global_id(2);
  const int abase = ao + b * sab, bbase = bo + b * sbb;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TS) {
    const int ak = k0 + tn;
    As[tm][tn] = (m < M && ak < K) ? A[abase + m * sam + ak * sak] : 0.0f;
    const int bk = k0 + tm;
    Bs[tm][tn] = (bk < K && n < N) ? B[bbase + bk * sbk + n * sbn] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < TS; ++kk) acc += As[tm][kk] * Bs[kk][tn];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (m < M && n < N) {
    const float v = alpha * acc + (has_bias ? bias[biaso + n] : 0.0f);
    C[co + b * scb + m * scm + n] = sd_act(v, act);
  }
}

// CONV_2D, NHWC input, OHWI filter, as an implicit GEMM: rows m = (image, oy, ox),
// columns n = output channel, k = (ky, kx, ci); the im2col matrix is never stored.
__kernel void conv2d_igemm(__global float* Y, int yo, __global const float* X, int xo, __global const float* W, int wo,
                           __global const float* bias, int biaso, int has_bias, int H, int Wd, int Ci, int OH, int OW,
                           int Co, int KH, int KW, int sh, int sw, int dh, int dw, int ph, int pw, int M, int act) {
  __local float As[TS][TS + 1];
  __local float Bs[TS][TS + 1];
  const int tn = get_local_id(0), tm = get_local_id(1);
  const int n = get_group_id(0) * TS + tn;
  const int m = get_group_id(1) * TS + tm;
  const int K = KH * KW * Ci;
  const int ox = m % OW, oy = (m / OW) % OH, img = m / (OW * OH);
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += TS) {
    const int ak = k0 + tn;
    float a = 0.0f;
    if (m < M && ak < K) {
      const int ci = ak % Ci, kx = (ak / Ci) % KW, ky = ak / (Ci * KW);
      const int iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
      if (iy >= 0 && iy < H && ix >= 0 && ix < Wd) a = X[xo + ((img * H + iy) * Wd + ix) * Ci + ci];
    }
    As[tm][tn] = a;
    const int bk = k0 + tm;
    Bs[tm][tn] = (bk < K && n < Co) ? W[wo + n * K + bk] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < TS; ++kk) acc += As[tm][kk] * Bs[kk][tn];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (m < M && n < Co) Y[yo + m * Co + n] = sd_act(acc + (has_bias ? bias[biaso + n] : 0.0f), act);
}
