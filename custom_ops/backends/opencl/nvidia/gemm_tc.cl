// Tensor-core GEMM, 3xTF32 or FP64 (NVIDIA only: inline PTX mma.sync m16n8k8 TF32 and cp.async, sm_80+; built where
// SDGPU_NV_PTX is; gpu/tile_planner.cc offers its configs only with the delegate option tensor_cores=3xtf32 / fp64 (or
// auto, the default, for FP64 on sm_90), or forces one under gemm_tiles "BMxBNtc").
//
// gemm_xBMxBN[_gg][_ln]: the parameter list, grid, split-K, residual, gated-GELU and LayerNorm contracts of
// gemm_tBMxBN (gpu/kernels/gemm_tiled.kern), for operands with A's k axis contiguous (sak = 1) and B's n axis (sbn = 1, "KN") or
// k axis (sbk = 1, "NK": K^T of attention scores) contiguous, fp32 B storage, row-major B layout (no tile-major U);
// conv_xBMxBN: conv_tBMxBN's (NHWC implicit GEMM, Ci % 16 == 0: one K step = 16 channels of one filter tap).
// Products: every fp32 operand x = big + small, big = x with its 13 low mantissa bits cleared (a TF32 value: one
// AND), small = x - big (exact); a*b = small*big + big*small + big*big on the tensor cores with fp32 accumulation
// (small*small, <= 2^-20 |ab|, dropped; small read at TF32 precision). On the H200 the error was 1e-6 to 2e-5 of the
// output's range (longest K worst) where the fp32 kernels give 1e-7 to 2e-6 (tc_gemm_check.py, BENCHMARKS.md).
// Data path (mma_lab.py --async, where it ran 1.4-1.7x faster than the best fp32 tile at SD1.5's FC shapes):
// 4 warps of WM x WN warp tiles; K in steps of 16 copied global -> local by cp.async into STAGES ring slots (no
// register staging), one barrier per step, STAGES - 1 steps in flight during the MMAs. Local layouts: A [BM][20],
// B KN [16][BN + 8] or NK [BN][20]: a warp's fragment reads hit 32 distinct banks, rows are 16-byte multiples.
// Copies are 16 bytes where the operand's offset and row stride are multiples of 4 floats, 4 bytes otherwise (a
// runtime, work-group-uniform choice); out-of-range elements are zero-filled (cp.async src-size 0).
// LayerNorm twins (_ln): each lane shifts its A fragment values by its rows' first element x0 and sums (x - x0) and
// (x - x0)^2 (redundantly in the warps of one row band; the quad's lanes are summed by shfl.bfly at the end), then
// normalises as gemm_tiled.kern's twins do: rstd * (acc - (mean - x0) * c[n]).
// FP64 (gemm_d64x64[_gg][_ln], conv_d64x64; sm_90 only, built where SDGPU_NV_SM90 is; tensor_cores=fp64 or auto):
// the same data path with each fragment value converted to double (exact) and mma.sync m16n8k8 .f64, fp64
// accumulators rounded to fp32 once in the epilogue: every product exact, so the results are at least as accurate as
// the fp32 kernels' (H200, dmma_lab.py at SD1.5's FC shapes: error 3e-8 to 5e-8 of the output's range vs 6e-7 to 2e-6,
// 1.25-1.45x faster than the best fp32 tile; the FP64 tensor cores' peak equals the fp32 FMA peak, 67 TFLOP/s, and
// the gain is the data path's). One config: the 64x64 tile (32x32 warp tiles; wider warp tiles hold 128 fp64
// accumulator registers and measured slower).
// Trade-offs: NVIDIA Ampere or newer only (FP64: Hopper or newer); 3 + 1 configs x (4 GEMM twins + 1 conv) = 20
// kernels of compile time on NVIDIA; 3xTF32 is opt-in (an emulation of fp32 arithmetic), FP64 the default on sm_90
// (tensor_cores=auto: at least as accurate as the fp32 kernels, which run everywhere else).
#if defined(SDGPU_NV_PTX) && SDGPU_NV_PTX
#define GX_BK 16
#define GX_AP (GX_BK + 4)

// Four consecutive floats src[0..n) (n <= 4 valid, the rest zero-filled) to dst: one 16-byte copy when aligned
// (vec), else four 4-byte copies. src must point into the buffer even when n <= 0 (it is then not read).
inline void gx_copy4(__local float* dst, __global const float* src, int n, int vec) {
  const uint d = (uint)(size_t)dst;
  n = clamp(n, 0, 4);
  if (vec) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(4 * n) : "memory");
  } else {
    for (int q = 0; q < 4; ++q) {
      asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d + 4 * q), "l"(q < n ? src + q : src),
                   "r"(q < n ? 4 : 0)
                   : "memory");
    }
  }
}
inline void gx_commit(void) { asm volatile("cp.async.commit_group;" ::: "memory"); }

// One K step's copies (k0) of a GEMM's A into the slot at As ([BM][GX_AP]).
inline void gx_issue_a(__local float* As, const int BM, const int NT, int lid, int m0, int k0, int kend,
                       __global const float* A, int abase, int sam, int avec, int M) {
  for (int e = lid; e < BM * GX_BK / 4; e += NT) {
    const int r = e / (GX_BK / 4), c = (e % (GX_BK / 4)) * 4, m = m0 + r, k = k0 + c;
    const int n = m < M ? kend - k : 0;
    gx_copy4(As + r * GX_AP + c, n > 0 ? A + abase + m * sam + k : A + abase, n, avec);
  }
}
// The same for an implicit-GEMM convolution's A (NHWC input X, Ci % 16 == 0, so one K step is 16 channels of one
// filter tap): rows[r] = (offset of output row m0 + r's tap (0, 0) pixel, iy0, ix0, row valid), as in conv_tBMxBN.
inline void gx_issue_conv_a(__local float* As, const int BM, const int NT, int lid, int k0, __local const int4* rows,
                            __global const float* X, int xvec, int H, int Wd, int Ci, int KW, int dh, int dw) {
  const int ky = k0 / (KW * Ci), kx = (k0 / Ci) % KW, ci0 = k0 % Ci;
  const int tap = (ky * dh * Wd + kx * dw) * Ci + ci0;
  for (int e = lid; e < BM * GX_BK / 4; e += NT) {
    const int r = e / (GX_BK / 4), c = (e % (GX_BK / 4)) * 4;
    const int4 ri = rows[r];
    const int iy = ri.y + ky * dh, ix = ri.z + kx * dw;
    const int ok = ri.w && iy >= 0 && iy < H && ix >= 0 && ix < Wd;
    gx_copy4(As + r * GX_AP + c, ok ? X + ri.x + tap + c : X, ok ? 4 : 0, xvec);
  }
}
// One K step's copies of B into the slot at Bs (KN: [GX_BK][BN + 8], NK: [BN][GX_AP]).
inline void gx_issue_b(__local float* Bs, const int BN, const int NT, int lid, int n0, int k0, int kend,
                       __global const float* B, int bbase, int sbk, int sbn, int nk_layout, int bvec, int N) {
  if (nk_layout) {  // B[k][n] at n * sbn + k: rows of k per column n
    for (int e = lid; e < BN * GX_BK / 4; e += NT) {
      const int r = e / (GX_BK / 4), c = (e % (GX_BK / 4)) * 4, nn = n0 + r, k = k0 + c;
      const int n = nn < N ? kend - k : 0;
      gx_copy4(Bs + r * GX_AP + c, n > 0 ? B + bbase + nn * sbn + k : B + bbase, n, bvec);
    }
  } else {
    for (int e = lid; e < BN * GX_BK / 4; e += NT) {
      const int r = e / (BN / 4), c = (e % (BN / 4)) * 4, k = k0 + r, nn = n0 + c;
      const int n = k < kend ? N - nn : 0;
      gx_copy4(Bs + r * (BN + 8) + c, n > 0 ? B + bbase + k * sbk + nn : B + bbase, n, bvec);
    }
  }
}

#define GX_LN_PARAMS_0
#define GX_LN_PARAMS_1 , int lnco, float ln_eps

// LN: x0 of the lane's fragment rows (wm0 + i * 16 + g + 8 h) and their running sums
#define GX_LN_PROLOGUE_0(FM)
#define GX_LN_PROLOGUE_1(FM)                                                   \
  float ln_x0[FM][2], ln_s1[FM][2], ln_s2[FM][2];                              \
  _Pragma("unroll") for (int i = 0; i < (FM); ++i)                             \
    _Pragma("unroll") for (int h = 0; h < 2; ++h) {                            \
      const int m = m0 + wm0 + i * 16 + g + 8 * h;                             \
      ln_x0[i][h] = m < M ? A[abase + m * sam] : 0.0f;                         \
      ln_s1[i][h] = 0.0f;                                                      \
      ln_s2[i][h] = 0.0f;                                                      \
    }
// a0..a3 of m-tile i at local k (kl): in-range values become x - x0 and enter the sums; padding stays 0
#define GX_LN_SHIFT_0(i, kl)
#define GX_LN_SHIFT_1(i, kl)                                                   \
  {                                                                            \
    const int k_lo = k0 + (kl) + t, k_hi = k_lo + 4;                           \
    a0 = k_lo < kend ? a0 - ln_x0[i][0] : 0.0f;                                \
    a1 = k_lo < kend ? a1 - ln_x0[i][1] : 0.0f;                                \
    a2 = k_hi < kend ? a2 - ln_x0[i][0] : 0.0f;                                \
    a3 = k_hi < kend ? a3 - ln_x0[i][1] : 0.0f;                                \
    ln_s1[i][0] += a0 + a2;                                                    \
    ln_s1[i][1] += a1 + a3;                                                    \
    ln_s2[i][0] = fma(a0, a0, fma(a2, a2, ln_s2[i][0]));                       \
    ln_s2[i][1] = fma(a1, a1, fma(a3, a3, ln_s2[i][1]));                       \
  }
// after the loop: the quad's sums, then (mean - x0, rstd) per fragment row
#define GX_LN_STATS_0(FM)
#define GX_LN_STATS_1(FM)                                                      \
  float ln_d[FM][2], ln_r[FM][2];                                              \
  _Pragma("unroll") for (int i = 0; i < (FM); ++i)                             \
    _Pragma("unroll") for (int h = 0; h < 2; ++h) {                            \
      float s1 = ln_s1[i][h], s2 = ln_s2[i][h];                                \
      s1 += nv_shfl_xor(s1, 1);                                                     \
      s2 += nv_shfl_xor(s2, 1);                                                     \
      s1 += nv_shfl_xor(s1, 2);                                                     \
      s2 += nv_shfl_xor(s2, 2);                                                     \
      const float d = s1 / (float)K;                                           \
      ln_d[i][h] = d;                                                          \
      ln_r[i][h] = rsqrt(fmax(s2 / (float)K - d * d, 0.0f) + ln_eps);          \
    }
#define GX_LN_ACC_0(v, i, h, cs) (v)
#define GX_LN_ACC_1(v, i, h, cs) (ln_r[i][h] * ((v) - ln_d[i][h] * (cs)))
#define GX_LN_COLSUM_0(n) 0.0f
#define GX_LN_COLSUM_1(n) bias[biaso + lnco + bz * N + (n)]
#define GX_LN_BIAS_0 0
#define GX_LN_BIAS_1 (bz * N)

// m-tile i's A fragment a0..a3 at k step kk (LN: shifted by the rows' x0, entering the LayerNorm sums)
#define GX_A_FRAG(i, LN)                                                                                           \
  const int r = wm0 + (i) * 16 + g;                                                                                \
  float a0 = As[r * GX_AP + kk + t], a1 = As[(r + 8) * GX_AP + kk + t];                                            \
  float a2 = As[r * GX_AP + kk + t + 4], a3 = As[(r + 8) * GX_AP + kk + t + 4];                                    \
  GX_LN_SHIFT_##LN(i, kk)
// The products of one 8-deep k step (kk) from the slot's As / Bs into acc: MATH TF = 3xTF32, DP = FP64.
#define GX_ACC_T_TF float
#define GX_ACC_T_DP double
#define GX_KSTEP_TF(LN)                                                                                            \
  uint bb[FN][2], bs[FN][2];                                                                                       \
  _Pragma("unroll") for (int j = 0; j < FN; ++j) {                                                                 \
    const float b0 = Bs[kk * bks + j * 8 * bns], b1 = Bs[(kk + 4) * bks + j * 8 * bns];                            \
    bb[j][0] = nv_tf32_big(b0);                                                                                    \
    bb[j][1] = nv_tf32_big(b1);                                                                                    \
    bs[j][0] = nv_tf32_small(b0, bb[j][0]);                                                                        \
    bs[j][1] = nv_tf32_small(b1, bb[j][1]);                                                                        \
  }                                                                                                                \
  _Pragma("unroll") for (int i = 0; i < FM; ++i) {                                                                 \
    GX_A_FRAG(i, LN)                                                                                               \
    const uint h0 = nv_tf32_big(a0), h1 = nv_tf32_big(a1), h2 = nv_tf32_big(a2), h3 = nv_tf32_big(a3);             \
    const uint l0 = nv_tf32_small(a0, h0), l1 = nv_tf32_small(a1, h1), l2 = nv_tf32_small(a2, h2),                 \
               l3 = nv_tf32_small(a3, h3);                                                                         \
    _Pragma("unroll") for (int j = 0; j < FN; ++j) {                                                               \
      nv_mma_tf32(acc[i][j], l0, l1, l2, l3, bb[j][0], bb[j][1]);                                                  \
      nv_mma_tf32(acc[i][j], h0, h1, h2, h3, bs[j][0], bs[j][1]);                                                  \
      nv_mma_tf32(acc[i][j], h0, h1, h2, h3, bb[j][0], bb[j][1]);                                                  \
    }                                                                                                              \
  }
#define GX_KSTEP_DP(LN)                                                                                            \
  double bd[FN][2];                                                                                                \
  _Pragma("unroll") for (int j = 0; j < FN; ++j) {                                                                 \
    bd[j][0] = (double)Bs[kk * bks + j * 8 * bns];                                                                 \
    bd[j][1] = (double)Bs[(kk + 4) * bks + j * 8 * bns];                                                           \
  }                                                                                                                \
  _Pragma("unroll") for (int i = 0; i < FM; ++i) {                                                                 \
    GX_A_FRAG(i, LN)                                                                                               \
    const double d0 = a0, d1 = a1, d2 = a2, d3 = a3;                                                               \
    _Pragma("unroll") for (int j = 0; j < FN; ++j) nv_mma_f64(acc[i][j], d0, d1, d2, d3, bd[j][0], bd[j][1]);      \
  }

// The shared body: declarations, the K loop (ISSUE(slot's As, slot's Bs, k0) queues one step's copies), the
// epilogue (C rows at cbase + m * scm; bz: the batch index; GATED, LN: literal 0/1; MATH: TF or DP).
#define GX_DECLS(BM, BN, WM, WN, STAGES, MATH)                                                                           \
  enum { NT = 32 * ((BM) / (WM)) * ((BN) / (WN)), FM = (WM) / 16, FN = (WN) / 8 };                                \
  enum { A_SLOT = (BM) * GX_AP, B_SLOT = (BN) * GX_AP > GX_BK * ((BN) + 8) ? (BN) * GX_AP : GX_BK * ((BN) + 8) };   \
  __local float lds[(STAGES) * (A_SLOT + B_SLOT)] __attribute__((aligned(16)));                                    \
  const int lid = get_local_id(1) * 16 + get_local_id(0), warp = lid >> 5, lane = lid & 31;                        \
  const int g = lane >> 2, t = lane & 3;                                                                           \
  const int wm0 = (warp / ((BN) / (WN))) * (WM), wn0 = (warp % ((BN) / (WN))) * (WN);                              \
  const int n0 = get_group_id(0) * (BN), m0 = get_group_id(1) * (BM);                                              \
  GX_ACC_T_##MATH acc[FM][FN][4];                                                                                  \
  _Pragma("unroll") for (int i = 0; i < FM; ++i)                                                                   \
    _Pragma("unroll") for (int j = 0; j < FN; ++j)                                                                 \
      _Pragma("unroll") for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;

#define GX_LOOP(STAGES, ISSUE, LN, MATH)                                                                                 \
  const int nk = (kend - kbeg + GX_BK - 1) / GX_BK;                                                                \
  /* fragment read strides in Bs: per k (bks) and per n (bns) */                                                   \
  const int bks = nk_layout ? 1 : (BN_) + 8, bns = nk_layout ? GX_AP : 1;                                          \
  for (int s = 0; s < (STAGES) - 1; ++s) {                                                                         \
    if (s < nk) {                                                                                                  \
      __local float* As_ = lds + s * (A_SLOT + B_SLOT);                                                            \
      ISSUE(As_, As_ + A_SLOT, kbeg + s * GX_BK)                                                                   \
    }                                                                                                              \
    gx_commit();                                                                                                   \
  }                                                                                                                \
  for (int kt = 0; kt < nk; ++kt) {                                                                                \
    GX_WAIT(STAGES)                                                                                                \
    barrier(CLK_LOCAL_MEM_FENCE); /* step kt landed everywhere; slot (kt - 1) % STAGES is free again */            \
    const int nx = kt + (STAGES) - 1;                                                                              \
    if (nx < nk) {                                                                                                 \
      __local float* As_ = lds + (nx % (STAGES)) * (A_SLOT + B_SLOT);                                              \
      ISSUE(As_, As_ + A_SLOT, kbeg + nx * GX_BK)                                                                  \
    }                                                                                                              \
    gx_commit();                                                                                                   \
    const int k0 = kbeg + kt * GX_BK;                                                                              \
    __local const float* As = lds + (kt % (STAGES)) * (A_SLOT + B_SLOT);                                           \
    __local const float* Bs = As + A_SLOT + (wn0 + g) * bns + t * bks;                                             \
    _Pragma("unroll") for (int kk = 0; kk < GX_BK; kk += 8) { GX_KSTEP_##MATH(LN) }                               \
  }                                                                                                                \
  asm volatile("cp.async.wait_group 0;" ::: "memory");

#define GX_EPILOGUE(C, cbase, scm, GATED, LN)                                                                      \
  _Pragma("unroll") for (int j = 0; j < FN; ++j) {                                                                 \
    const int n = n0 + wn0 + j * 8 + 2 * t;                                                                        \
    if (n >= N) continue;                                                                                          \
    const int n1 = n + 1 < N;                                                                                      \
    const int bo_ = biaso + GX_LN_BIAS_##LN;                                                                       \
    const float bias0 = has_bias ? bias[bo_ + n] : 0.0f, bias1 = has_bias && n1 ? bias[bo_ + n + 1] : 0.0f;        \
    const float cs0 = GX_LN_COLSUM_##LN(n), cs1 = n1 ? GX_LN_COLSUM_##LN(n + 1) : 0.0f;                            \
    _Pragma("unroll") for (int i = 0; i < FM; ++i)                                                                 \
      _Pragma("unroll") for (int h = 0; h < 2; ++h) {                                                              \
        const int m = m0 + wm0 + i * 16 + g + 8 * h;                                                               \
        if (m >= M) continue;                                                                                      \
        const float v0 = alpha * GX_LN_ACC_##LN((float)acc[i][j][2 * h], i, h, cs0) + bias0;                              \
        const float v1 = alpha * GX_LN_ACC_##LN((float)acc[i][j][2 * h + 1], i, h, cs1) + bias1;                          \
        if ((GATED) && act >= SD_GELU_OP_ERF) { /* the (value, gate) pair (n, n + 1) -> column n / 2 */            \
          (C)[(cbase) + m * (scm) + n / 2] = v0 * sd_gelu_mode(v1, act);                                           \
          continue;                                                                                                \
        }                                                                                                          \
        __global float* dst = (C) + (cbase) + m * (scm) + n;                                                       \
        __global const float* res = R + ro + (rrows > 0 ? (m / rrows) * rsm + n : 0);                              \
        dst[0] = sd_act(v0, act) + (rrows > 0 ? res[0] : 0.0f);                                                    \
        if (n1) dst[1] = sd_act(v1, act) + (rrows > 0 ? res[1] : 0.0f);                                            \
      }                                                                                                            \
  }

#define GX_GEMM_ISSUE(As_, Bs_, k0_)                                                                               \
  gx_issue_a(As_, BM_, NT, lid, m0, k0_, kend, A, abase, sam, avec, M);                                            \
  gx_issue_b(Bs_, BN_, NT, lid, n0, k0_, kend, B, bbase, sbk, sbn, nk_layout, bvec, N);

// GATED, LN: literal 0/1 (the _gg and _ln twins).
#define SD_GEMM_TC_G(NAME, BM, BN, WM, WN, STAGES, GATED, LN, MATH)                                                       \
  __kernel __attribute__((reqd_work_group_size(16, 32 * ((BM) / (WM)) * ((BN) / (WN)) / 16, 1))) void NAME(        \
      __global float* C, int co, int scb, int scs, int scm, __global const float* A, int ao, int sab, int sam,     \
      int sak, __global const float* B, int bo, int sbb, int sbk, int sbn, int b_half, __global const float* bias, \
      int biaso, int has_bias, int M, int N, int K, float alpha, int act, int splits, int k_split,                 \
      __global const float* R, int ro, int rrows, int rsm GX_LN_PARAMS_##LN) {                                     \
    enum { BM_ = (BM), BN_ = (BN) };                                                                               \
    GX_DECLS(BM, BN, WM, WN, STAGES, MATH)                                                                         \
    const int z = get_group_id(2), bz = z / splits, sz = z - bz * splits;                                          \
    const int kbeg = sz * k_split, kend = min(K, kbeg + k_split);                                                  \
    const int abase = ao + bz * sab, bbase = bo + bz * sbb;                                                        \
    const int nk_layout = sbn != 1;                                                                                \
    const int avec = ((abase | sam) & 3) == 0, bvec = ((bbase | (nk_layout ? sbn : sbk)) & 3) == 0;                \
    GX_LN_PROLOGUE_##LN(FM)                                                                                        \
    GX_LOOP(STAGES, GX_GEMM_ISSUE, LN, MATH)                                                                           \
    GX_LN_STATS_##LN(FM)                                                                                           \
    GX_EPILOGUE(C, co + bz * scb + sz * scs, scm, GATED, LN)                                                       \
  }
#define SD_GEMM_TC(NAME, BM, BN, WM, WN, STAGES, MATH)        \
  SD_GEMM_TC_G(NAME, BM, BN, WM, WN, STAGES, 0, 0, MATH)      \
  SD_GEMM_TC_G(NAME##_gg, BM, BN, WM, WN, STAGES, 1, 0, MATH) \
  SD_GEMM_TC_G(NAME##_ln, BM, BN, WM, WN, STAGES, 0, 1, MATH) \
  SD_GEMM_TC_G(NAME##_gg_ln, BM, BN, WM, WN, STAGES, 1, 1, MATH)

#define GX_CONV_ISSUE(As_, Bs_, k0_)                                                                               \
  gx_issue_conv_a(As_, BM_, NT, lid, k0_, rows, X, xvec, H, Wd, Ci, KW, dh, dw);                                   \
  gx_issue_b(Bs_, BN_, NT, lid, n0, k0_, kend, B, bo, sbk, sbn, nk_layout, bvec, N);

// conv_xBMxBN: conv_tBMxBN's parameters, grid and contracts (NHWC implicit GEMM, Ci % 16 == 0, split-K, residual).
#define SD_CONV_TC(NAME, BM, BN, WM, WN, STAGES, MATH)                                                                    \
  __kernel __attribute__((reqd_work_group_size(16, 32 * ((BM) / (WM)) * ((BN) / (WN)) / 16, 1))) void NAME(        \
      __global float* Y, int yo, int scs, __global const float* X, int xo, __global const float* B, int bo,        \
      int sbk, int sbn, int b_half, __global const float* bias, int biaso, int has_bias, int H, int Wd, int Ci,    \
      int OH, int OW, int Co, int KH, int KW, int sh, int sw, int dh, int dw, int ph, int pw, int M, int act,      \
      int splits, int k_split, __global const float* R, int ro, int rrows, int rsm) {                              \
    enum { BM_ = (BM), BN_ = (BN) };                                                                               \
    const int N = Co, K = KH * KW * Ci;                                                                            \
    const float alpha = 1.0f;                                                                                      \
    GX_DECLS(BM, BN, WM, WN, STAGES, MATH)                                                                         \
    const int sz = get_group_id(2);                                                                                \
    const int kbeg = sz * k_split, kend = min(K, kbeg + k_split);                                                  \
    const int nk_layout = sbn != 1;                                                                                \
    const int xvec = (xo & 3) == 0, bvec = ((bo | (nk_layout ? sbn : sbk)) & 3) == 0;                              \
    __local int4 rows[BM];                                                                                         \
    sd_conv_rows(rows, BM, NT, lid, m0, M, xo, H, Wd, Ci, OH, OW, sh, sw, ph, pw);                                 \
    GX_LOOP(STAGES, GX_CONV_ISSUE, 0, MATH)                                                                            \
    GX_EPILOGUE(Y, yo + sz * scs, Co, 0, 0)                                                                        \
  }

// cp.async.wait_group takes an immediate: at most STAGES - 2 groups may stay pending
#define GX_WAIT(STAGES) GX_WAIT_##STAGES
#define GX_WAIT_2 asm volatile("cp.async.wait_group 0;" ::: "memory");
#define GX_WAIT_3 asm volatile("cp.async.wait_group 1;" ::: "memory");
#define GX_WAIT_4 asm volatile("cp.async.wait_group 2;" ::: "memory");

// mma_lab.py --async's winners (4 warps each): 128x128 for wide FCs (N >= 960 at 4096 rows), 64x64 with a 4-deep
// ring for narrow or short ones, 128x64 between
SD_GEMM_TC(gemm_x128x128, 128, 128, 64, 64, 2, TF)
SD_GEMM_TC(gemm_x128x64, 128, 64, 64, 32, 3, TF)
SD_GEMM_TC(gemm_x64x64, 64, 64, 32, 32, 4, TF)
SD_CONV_TC(conv_x128x128, 128, 128, 64, 64, 2, TF)
SD_CONV_TC(conv_x128x64, 128, 64, 64, 32, 3, TF)
SD_CONV_TC(conv_x64x64, 64, 64, 32, 32, 4, TF)
// FP64 (dmma_lab.py: the 64x64 tile with a 4-deep ring won at every SD1.5 FC shape)
#if defined(SDGPU_NV_SM90) && SDGPU_NV_SM90
SD_GEMM_TC(gemm_d64x64, 64, 64, 32, 32, 4, DP)
SD_CONV_TC(conv_d64x64, 64, 64, 32, 32, 4, DP)
#endif
#endif  // SDGPU_NV_PTX
