// Lab variants of the Winograd transforms (wino_lab.py): A work-items per (channel, tile) instead of one.
// Same parameters and results as ops/conv2d_winograd/gpu.kern's winograd_input_fM[_gn|_gnsilu] and
// winograd_output_fM[_sum]; appended to the library source, so the matrices and sd_act come from there.
// Work-group (CW channels, A columns, 1 tile); global = (ceil(C/CW)*CW, A, T).
// Input: work-item (c, l) loads column l of the tile (A pixels), applies the norm, forms BT d[:, l] (column l of
// BT d) into local memory; after one barrier work-item (c, i) forms row i of (BT d) BT^T and stores its A values.
// Output: work-item (c, l) loads column l of M (A values, summing split-K partials), forms AT M[:, l]; after the
// barrier work-items i < m form row i of (AT M) AT^T, add bias / activation / residual and store m pixels.
// lt[(i * A + l) * CW + c] = (mat . col)[i] for i < R: column l of the first (row) pass, for the exchange.
inline void ws_column(const int R, const int A, const int CW, __constant const float* mat, const float* col,
                      __local float* lt, int l, int c) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < A; ++k) s = mad(mat[i * A + k], col[k], s);
    lt[(i * A + l) * CW + c] = s;
  }
}

inline void ws_input(const int MT, const int A, const int CW, __constant const float* bt, __local float* lt,
                     __global float* V, int vo, __global const float* X, int xo, int H, int W, int Ci, int tiles_h,
                     int tiles_w, int T, int pad, __global const float* NT, int nto, const int NORM) {
  const int ci = get_global_id(0), c = get_local_id(0), l = get_local_id(1), t = get_global_id(2);
  const bool live = ci < Ci;
  const int tx = t % tiles_w, r = t / tiles_w, ty = r % tiles_h, img = r / tiles_h;
  const int y0 = ty * MT - pad, xx = tx * MT - pad + l;
  float d[8];
#pragma unroll
  for (int k = 0; k < A; ++k) {
    const int yy = y0 + k;
    d[k] = live && wino_inside(yy, xx, H, W) ? X[xo + ((img * H + yy) * W + xx) * Ci + ci] : 0.0f;
  }
  if (NORM && live) {
    const float sc = NT[nto + 2 * (img * Ci + ci)], sh = NT[nto + 2 * (img * Ci + ci) + 1];
#pragma unroll
    for (int k = 0; k < A; ++k) {
      float v = mad(d[k], sc, sh);
      if (NORM == 2) v *= native_recip(1.0f + native_exp(-v));
      d[k] = wino_inside(y0 + k, xx, H, W) ? v : 0.0f;
    }
  }
  ws_column(A, A, CW, bt, d, lt, l, c);  // (BT d)[i][l]
  barrier(CLK_LOCAL_MEM_FENCE);
  if (!live) return;
  const int i = l;
  float row[8];
#pragma unroll
  for (int q = 0; q < A; ++q) row[q] = lt[(i * A + q) * CW + c];
  const int plane = T * Ci;
#pragma unroll
  for (int j = 0; j < A; ++j) {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < A; ++q) s = mad(row[q], bt[j * A + q], s);
    V[vo + (i * A + j) * plane + t * Ci + ci] = s;
  }
}

inline void ws_output(const int MT, const int A, const int CW, __constant const float* at, __local float* lt,
                      __global float* Y, int yo, __global const float* Mb, int mo, __global const float* bias,
                      int biaso, int Ho, int Wo, int Co, int tiles_h, int tiles_w, int T, int act,
                      __global const float* R, int ro, int rrows, int rsm, int splits, const int SUM) {
  const int co = get_global_id(0), c = get_local_id(0), l = get_local_id(1), t = get_global_id(2);
  const bool live = co < Co;
  const int tx = t % tiles_w, r = t / tiles_w, ty = r % tiles_h, img = r / tiles_h;
  const int plane = T * Co;
  const int nsplit = SUM ? splits : 1;
  float mm[8];
#pragma unroll
  for (int k = 0; k < A; ++k) {
    const int at0 = mo + (k * A + l) * nsplit * plane + t * Co + co;
    float v = live ? Mb[at0] : 0.0f;
    if (SUM && live) {
#pragma unroll
      for (int sp = 1; sp < 4; ++sp) v += sp < nsplit ? Mb[at0 + sp * plane] : 0.0f;
      for (int sp = 4; sp < nsplit; ++sp) v += Mb[at0 + sp * plane];
    }
    mm[k] = v;
  }
  ws_column(MT, A, CW, at, mm, lt, l, c);  // (AT M)[i][l]
  barrier(CLK_LOCAL_MEM_FENCE);
  if (!live || l >= MT) return;
  const int i = l;
  float row[8];
#pragma unroll
  for (int q = 0; q < A; ++q) row[q] = lt[(i * A + q) * CW + c];
  const float b = bias[biaso + co];
  float rv[6];
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    const int pix = wino_out_pixel(img, ty * MT + i, tx * MT + j, Ho, Wo);
    rv[j] = rrows > 0 && pix >= 0 ? R[ro + (pix / rrows) * rsm + co] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < MT; ++j) {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < A; ++q) s = mad(row[q], at[j * A + q], s);
    const int pix = wino_out_pixel(img, ty * MT + i, tx * MT + j, Ho, Wo);
    if (pix >= 0) Y[yo + pix * Co + co] = sd_act(s + b, act) + rv[j];
  }
}

#define WS_INPUT_KERNEL(NAME, MT, A, CW, BT, NORM)                                                            \
  __kernel __attribute__((reqd_work_group_size(CW, A, 1))) void NAME(                                         \
      __global float* V, int vo, __global const float* X, int xo, int H, int W, int Ci, int tiles_h,          \
      int tiles_w, int T, int pad, __global const float* NT, int nto) {                                       \
    __local float lt[A * A * CW];                                                                             \
    ws_input(MT, A, CW, BT, lt, V, vo, X, xo, H, W, Ci, tiles_h, tiles_w, T, pad, NT, nto, NORM);             \
  }
#define WS_OUTPUT_KERNEL(NAME, MT, A, CW, AT, SUM)                                                            \
  __kernel __attribute__((reqd_work_group_size(CW, A, 1))) void NAME(                                         \
      __global float* Y, int yo, __global const float* Mb, int mo, __global const float* bias, int biaso,     \
      int Ho, int Wo, int Co, int tiles_h, int tiles_w, int T, int act, __global const float* R, int ro,      \
      int rrows, int rsm, int splits) {                                                                       \
    __local float lt[MT * A * CW];                                                                            \
    ws_output(MT, A, CW, AT, lt, Y, yo, Mb, mo, bias, biaso, Ho, Wo, Co, tiles_h, tiles_w, T, act, R, ro,     \
              rrows, rsm, splits, SUM);                                                                       \
  }

WS_INPUT_KERNEL(ws_input_f2_gnsilu, 2, 4, 64, wino_f2_bt, 2)
WS_INPUT_KERNEL(ws_input_f4_gnsilu, 4, 6, 32, wino_f4_bt, 2)
WS_INPUT_KERNEL(ws_input_f6_gnsilu, 6, 8, 32, wino_f6_bt, 2)
WS_OUTPUT_KERNEL(ws_output_f2, 2, 4, 64, wino_f2_at, 0)
WS_OUTPUT_KERNEL(ws_output_f4, 4, 6, 32, wino_f4_at, 0)
WS_OUTPUT_KERNEL(ws_output_f6, 6, 8, 32, wino_f6_at, 0)
