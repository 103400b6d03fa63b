// SdConv2DWinograd on the GPU: F(m x m, 3 x 3), m in {2, 4, 6}, alpha = m + 2, as three
// launches over whole tensors (same layout as the CPU reference, ops/conv2d_winograd/cpu.h):
//   winograd_input_fM   V[a*a][T][Ci] = BT d BT^T for each alpha x alpha input tile d (zero outside x)
//   gemm_t*             M[k] = V[k] (T x Ci) . U[k] (Ci x Co), k < a*a (batched tiled GEMM, gemm_tiled.cl)
//   winograd_output_fM  y = act(AT M AT^T + bias), cropped to Ho x Wo
// U = G g G^T is computed on the host at prepare (float64) and uploaded once.
// T = N * tiles_h * tiles_w; tile t = (image, ty, tx) row-major. One work-item per
// (channel, tile): global = (Ci or Co, T), local = (64, 1, 1); channels are the
// fastest axis, so every global access is coalesced.
//
// The matrices are exact in float (integers and powers of two; the generated
// ops/conv2d_winograd/matrices.inc is the source of truth, tests compare both).

// Row-major BT (a x a) and AT (m x a) per tile size.
__constant float wino_f2_bt[16] = {
    1, 0, -1, 0,
    0, 1, 1, 0,
    0, 1, -1, 0,
    0, 1, 0, -1};
__constant float wino_f2_at[8] = {
    1, 1, 1, 0,
    0, 1, -1, 1};
__constant float wino_f4_bt[36] = {
    4, 0, -5, 0, 1, 0,
    0, 4, 4, -1, -1, 0,
    0, 4, -4, -1, 1, 0,
    0, 2, 1, -2, -1, 0,
    0, 2, -1, -2, 1, 0,
    0, 4, 0, -5, 0, 1};
__constant float wino_f4_at[24] = {
    1, 1, 1, 1, 1, 0,
    0, 1, -1, 2, -2, 0,
    0, 1, 1, 4, 4, 0,
    0, 1, -1, 8, -8, 1};
__constant float wino_f6_bt[64] = {
    4, 0, -21, 0, 21, 0, -4, 0,
    0, 4, 4, -17, -17, 4, 4, 0,
    0, 4, -4, -17, 17, 4, -4, 0,
    0, 2, 1, -10, -5, 8, 4, 0,
    0, 2, -1, -10, 5, 8, -4, 0,
    0, 4, 8, -5, -10, 1, 2, 0,
    0, 4, -8, -5, 10, 1, -2, 0,
    0, 4, 0, -21, 0, 21, 0, -4};
__constant float wino_f6_at[48] = {
    1, 1, 1, 1, 1, 1, 1, 0,
    0, 1, -1, 2, -2, 0.5f, -0.5f, 0,
    0, 1, 1, 4, 4, 0.25f, 0.25f, 0,
    0, 1, -1, 8, -8, 0.125f, -0.125f, 0,
    0, 1, 1, 16, 16, 0.0625f, 0.0625f, 0,
    0, 1, -1, 32, -32, 0.03125f, -0.03125f, 1};

// Called with literal MT / A so that, once inlined, every loop has a constant trip
// count: the pragmas unroll them and the 8 x 8 arrays become registers (the unused
// part of the arrays for A < 8 is never touched and is removed).
// NORM (a literal per kernel: the input-norm prologue, gpu/ops.h GpuOp::FuseInputNorm): 0 reads x as is; 1 reads
// x * scale + shift, 2 that then SiLU, with (scale, shift) = NT[nto + 2*(img*Ci + ci) ..] (group_norm_*_affine's
// table), so a GroupNorm(+SiLU) feeding the conv costs no pass of its own. Padding stays zero: only pixels inside
// x are normed. All a*a loads are issued first and the norm applied in a second pass over d: a runtime branch per
// load measured 2x slower, and the norm inside the load loop (branch-free selects) 1.5-2.4x slower than this
// (H200, BENCHMARKS session 11), although the second pass repeats the bounds test.
// Input pixel (yy, xx) lies inside the H x W image (else the tile reads padding: zero).
inline bool wino_inside(int yy, int xx, int H, int W) { return yy >= 0 && yy < H && xx >= 0 && xx < W; }

inline void wino_input(const int MT, const int A, __constant const float* bt, __global float* V, int vo,
                       __global const float* X, int xo, int H, int W, int Ci, int tiles_h, int tiles_w, int T,
                       int pad, __global const float* NT, int nto, const int NORM) {
  const int ci = get_global_id(0), t = get_global_id(1);
  if (ci >= Ci || t >= T) return;
  const int tx = t % tiles_w, r = t / tiles_w, ty = r % tiles_h, img = r / tiles_h;
  const int y0 = ty * MT - pad, x0 = tx * MT - pad;
  float d[8][8], tmp[8][8];
#pragma unroll
  for (int k = 0; k < A; ++k) {
    const int yy = y0 + k;
#pragma unroll
    for (int l = 0; l < A; ++l) {
      const int xx = x0 + l;
      d[k][l] = wino_inside(yy, xx, H, W) ? X[xo + ((img * H + yy) * W + xx) * Ci + ci] : 0.0f;
    }
  }
  if (NORM) {
    const float sc = NT[nto + 2 * (img * Ci + ci)], sh = NT[nto + 2 * (img * Ci + ci) + 1];
#pragma unroll
    for (int k = 0; k < A; ++k) {
      const int yy = y0 + k;
#pragma unroll
      for (int l = 0; l < A; ++l) {
        const int xx = x0 + l;
        float v = mad(d[k][l], sc, sh);
        // SiLU with the fast exp / reciprocal (a few ulp; each x is normed up to (a/m)^2 times, by every tile
        // that overlaps it, so the full-precision pair cost ~25% of the transform on the H200)
        if (NORM == 2) v *= native_recip(1.0f + native_exp(-v));
        d[k][l] = wino_inside(yy, xx, H, W) ? v : 0.0f;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < A; ++i) {
#pragma unroll
    for (int l = 0; l < A; ++l) {
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < A; ++k) s = mad(bt[i * A + k], d[k][l], s);
      tmp[i][l] = s;
    }
  }
  const int plane = T * Ci;
#pragma unroll
  for (int i = 0; i < A; ++i) {
#pragma unroll
    for (int j = 0; j < A; ++j) {
      float s = 0.0f;
#pragma unroll
      for (int l = 0; l < A; ++l) s = mad(tmp[i][l], bt[j * A + l], s);
      V[vo + (i * A + j) * plane + t * Ci + ci] = s;
    }
  }
}

// Output pixel (oy, ox) of image img as its NHWC row (img * Ho + oy) * Wo + ox, or -1 when the tile's crop drops it.
inline int wino_out_pixel(int img, int oy, int ox, int Ho, int Wo) {
  return oy < Ho && ox < Wo ? (img * Ho + oy) * Wo + ox : -1;
}

// SUM (a literal per kernel): Mb holds the GEMM's split-K partials [a*a][splits][T][Co] and this sums them (no
// reduce launch); else Mb is M and splits is ignored.
inline void wino_output(const int MT, const int A, __constant const float* at, __global float* Y, int yo,
                        __global const float* Mb, int mo, __global const float* bias, int biaso, int Ho, int Wo,
                        int Co, int tiles_h, int tiles_w, int T, int act, __global const float* R, int ro,
                        int rrows, int rsm, int splits, const int SUM, __global float* part, int po, int G,
                        const int STATS) {
  const int co = get_global_id(0), t = get_global_id(1);
  if (co >= Co || t >= T) return;
  const int tx = t % tiles_w, r = t / tiles_w, ty = r % tiles_h, img = r / tiles_h;
  const int plane = T * Co;
  const int nsplit = SUM ? splits : 1;
  float mm[8][8], tmp[8][8];
#pragma unroll
  for (int k = 0; k < A; ++k) {
#pragma unroll
    for (int l = 0; l < A; ++l) {
      const int at0 = mo + (k * A + l) * nsplit * plane + t * Co + co;
      float v = Mb[at0];
      if (SUM) {
        // splits 1..3 unrolled with guarded loads, so the a*a loads of up to 4 splits are in flight together (a
        // runtime loop over the splits waited for one split's loads before the next: the F6 sum over 2 splits took
        // 2.1x the unsplit transform on the H200); the sum order is unchanged
#pragma unroll
        for (int sp = 1; sp < 4; ++sp) v += sp < nsplit ? Mb[at0 + sp * plane] : 0.0f;
        for (int sp = 4; sp < nsplit; ++sp) v += Mb[at0 + sp * plane];
      }
      mm[k][l] = v;
    }
  }
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int l = 0; l < A; ++l) {
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < A; ++k) s = mad(at[i * A + k], mm[k][l], s);
      tmp[i][l] = s;
    }
  }
  const float b = bias[biaso + co];
  // The residual's m*m values are loaded before any store: interleaved with the stores (R and Y may alias as far as
  // the compiler knows) each load's latency was exposed in turn, and the output transform with a full-shape
  // residual took 2.1-2.6x the time of one without (H200, BENCHMARKS session 11).
  // R's row of output pixel `row` is row / rrows (the residual epilogue's GEMM rows). The host folds only rrows = 1
  // (a full-shape R) or a multiple of an image's Ho*Wo rows (one R row per image, SD's time embedding, or one for
  // all; WinogradOp::FuseResidual), and the tile's pixels share one image, so the index is a base plus the pixel's
  // offset times rpix (rsm or 0): no integer division per pixel, which took a quarter of the residual-carrying F6
  // transform's time on the H200 (F6 with residual and statistics: b1 15.9 -> 12.0 us, b2 28.1 -> 20.5; F4 b2
  // 10.2 -> 8.8; BENCHMARKS session 19). One loop for every case: three specialised ones slowed the residual-free
  // transform by 13-19% (registers). Indexing through wino_out_pixel's image row instead (base + row x rpix) measured
  // 0.2-0.4% slower at b2 in three of three rounds, b1 mixed (BENCHMARKS session 19, call 5): kept as is.
  float rv[6][6];
  if (rrows > 0) {
    const int hw = Ho * Wo, rpix = rrows == 1 ? rsm : 0;
    const int rbase = ro + (rrows == 1 ? img * hw : img * hw / rrows) * rsm + co;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        const int oy = ty * MT + i, ox = tx * MT + j;  // wino_out_pixel's test; the row relative to the image
        rv[i][j] = oy < Ho && ox < Wo ? R[rbase + (oy * Wo + ox) * rpix] : 0.0f;
      }
    }
  }
  // STATS: sums of d = y - y0 and d^2 over the written values, shifted by the tile's first output y0 (always written:
  // a tile starts inside the image), accumulated as the values are produced. The two-pass form before (mean, then
  // centred M2) kept the m*m outputs in registers for its second pass; one pass is 7-12% faster for F6 on the H200
  // (b1 18.3 -> 16.1 us, b2 30.4 -> 28.1; BENCHMARKS session 19). The shift keeps the one-pass M2 well conditioned
  // (the values of one tile and channel are of one scale).
  float y0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < MT; ++i) {
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      float s = 0.0f;
#pragma unroll
      for (int l = 0; l < A; ++l) s = mad(tmp[i][l], at[j * A + l], s);
      const int row = wino_out_pixel(img, ty * MT + i, tx * MT + j, Ho, Wo);
      const float y = sd_act(s + b, act) + (rrows > 0 ? rv[i][j] : 0.0f);
      if (row >= 0) Y[yo + row * Co + co] = y;
      if (STATS) {
        if (i == 0 && j == 0) y0 = y;
        const float d = row >= 0 ? y - y0 : 0.0f;
        s1 += d;
        s2 = mad(d, d, s2);
      }
    }
  }
  if (STATS) {
    // GroupNorm statistics epilogue: this work-item's chunk partial (count, mean, centred M2) of the values it wrote,
    // in group_norm_partial's layout, chunk = (tile within the image, channel within the group).
    const float cnt = (float)(min(MT, Ho - ty * MT) * min(MT, Wo - tx * MT));  // >= 1 (see above)
    const float ds = s1 / cnt;
    const int cpg = Co / G, g = co / cpg, tpi = tiles_h * tiles_w;
    const int idx = 3 * ((img * G + g) * (tpi * cpg) + (t - img * tpi) * cpg + (co - g * cpg));
    part[po + idx] = cnt;
    part[po + idx + 1] = y0 + ds;
    part[po + idx + 2] = fmax(mad(-s1, ds, s2), 0.0f);
  }
}

// winograd_input_fM[_gn | _gnsilu](V, vo, X, xo, int H, int W, int Ci, int tiles_h, int tiles_w, int T, int pad, NT,
//                                  nto): NORM 0 (NT unused) / 1 / 2 of wino_input
#define WINO_INPUT_KERNEL(NAME, MT, A, BT, NORM)                                                                 \
  __kernel void NAME(__global float* V, int vo, __global const float* X, int xo, int H, int W, int Ci,          \
                     int tiles_h, int tiles_w, int T, int pad, __global const float* NT, int nto) {              \
    wino_input(MT, A, BT, V, vo, X, xo, H, W, Ci, tiles_h, tiles_w, T, pad, NT, nto, NORM);                      \
  }
// winograd_output_fM(Y, yo, M, mo, bias, biaso, int Ho, int Wo, int Co, int tiles_h, int tiles_w, int T, int act,
//                    R, ro, int rrows, int rsm, int splits): the residual epilogue of gemm_tiled.cl, rows = output
//                    pixels; winograd_output_fM_sum sums `splits` split-K partials (SUM of wino_output)
#define WINO_OUTPUT_KERNEL(NAME, MT, A, AT, SUM)                                                                 \
  __kernel void NAME(__global float* Y, int yo, __global const float* Mb, int mo, __global const float* bias,   \
                     int biaso, int Ho, int Wo, int Co, int tiles_h, int tiles_w, int T, int act,                \
                     __global const float* R, int ro, int rrows, int rsm, int splits) {                          \
    wino_output(MT, A, AT, Y, yo, Mb, mo, bias, biaso, Ho, Wo, Co, tiles_h, tiles_w, T, act, R, ro, rrows, rsm,  \
                splits, SUM, Y, 0, 1, 0);                                                                        \
  }
// winograd_output_fM[_sum]_st(... the above ..., part, int po, int G): the GroupNorm statistics epilogue (STATS of
// wino_output, GpuOp::EmitGroupStats): also writes each work-item's (count, mean, M2) chunk partial of an
// SdGroupNorm with G groups over y to part, whose group_norm_finalize[_affine] then needs no statistics pass.
#define WINO_OUTPUT_ST_KERNEL(NAME, MT, A, AT, SUM)                                                              \
  __kernel void NAME(__global float* Y, int yo, __global const float* Mb, int mo, __global const float* bias,   \
                     int biaso, int Ho, int Wo, int Co, int tiles_h, int tiles_w, int T, int act,                \
                     __global const float* R, int ro, int rrows, int rsm, int splits, __global float* part,      \
                     int po, int G) {                                                                            \
    wino_output(MT, A, AT, Y, yo, Mb, mo, bias, biaso, Ho, Wo, Co, tiles_h, tiles_w, T, act, R, ro, rrows, rsm,  \
                splits, SUM, part, po, G, 1);                                                                    \
  }

WINO_INPUT_KERNEL(winograd_input_f2, 2, 4, wino_f2_bt, 0)
WINO_INPUT_KERNEL(winograd_input_f4, 4, 6, wino_f4_bt, 0)
WINO_INPUT_KERNEL(winograd_input_f6, 6, 8, wino_f6_bt, 0)
WINO_INPUT_KERNEL(winograd_input_f2_gn, 2, 4, wino_f2_bt, 1)
WINO_INPUT_KERNEL(winograd_input_f4_gn, 4, 6, wino_f4_bt, 1)
WINO_INPUT_KERNEL(winograd_input_f6_gn, 6, 8, wino_f6_bt, 1)
WINO_INPUT_KERNEL(winograd_input_f2_gnsilu, 2, 4, wino_f2_bt, 2)
WINO_INPUT_KERNEL(winograd_input_f4_gnsilu, 4, 6, wino_f4_bt, 2)
WINO_INPUT_KERNEL(winograd_input_f6_gnsilu, 6, 8, wino_f6_bt, 2)
WINO_OUTPUT_KERNEL(winograd_output_f2, 2, 4, wino_f2_at, 0)
WINO_OUTPUT_KERNEL(winograd_output_f4, 4, 6, wino_f4_at, 0)
WINO_OUTPUT_KERNEL(winograd_output_f6, 6, 8, wino_f6_at, 0)
WINO_OUTPUT_KERNEL(winograd_output_f2_sum, 2, 4, wino_f2_at, 1)
WINO_OUTPUT_KERNEL(winograd_output_f4_sum, 4, 6, wino_f4_at, 1)
WINO_OUTPUT_KERNEL(winograd_output_f6_sum, 6, 8, wino_f6_at, 1)
WINO_OUTPUT_ST_KERNEL(winograd_output_f2_st, 2, 4, wino_f2_at, 0)
WINO_OUTPUT_ST_KERNEL(winograd_output_f4_st, 4, 6, wino_f4_at, 0)
WINO_OUTPUT_ST_KERNEL(winograd_output_f6_st, 6, 8, wino_f6_at, 0)
WINO_OUTPUT_ST_KERNEL(winograd_output_f2_sum_st, 2, 4, wino_f2_at, 1)
WINO_OUTPUT_ST_KERNEL(winograd_output_f4_sum_st, 4, 6, wino_f4_at, 1)
WINO_OUTPUT_ST_KERNEL(winograd_output_f6_sum_st, 6, 8, wino_f6_at, 1)
