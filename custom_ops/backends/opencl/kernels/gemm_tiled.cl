// Register-blocked tiled GEMM and implicit-GEMM convolution (OpenCL C 1.2).
//
// One work-group of 16 x TY work-items (NT = 16 * TY threads, TY = 16 or 8) computes
// a BM x BN tile of C; work-item (tx, ty) (a permutation of the local id, see
// GT_DECLS) owns a (BM/TY) x (BN/16) micro-tile held in registers as float4 rows.
// Its rows are the 4-row groups ty*4 + q*4*TY (q < BM/(4*TY)) and its columns the
// 4-column groups tx*4 + q*64, so
// one float4 local read feeds 4 FMAs per row, and the epilogue writes float4s.
// K advances in steps of GT_BK = 16: each step the work-group stages a BM x 16
// A tile and a 16 x BN B tile in local memory (rows padded by GT_PAD floats,
// which keeps float4 alignment and limits bank conflicts of the transposing
// stores to 2-way); the next step's global loads are issued into registers
// before the current step's FMAs (register double buffering), so global
// latency overlaps math. Loaders walk the operand's contiguous axis; when its
// rows are 16-byte aligned (offset and strides multiples of 4, checked in the
// kernel) each work-item loads 4 consecutive elements at once (float4, or 4
// halves with vloada_half4), otherwise one element per load.
//
// Instances (tile configs are #defines through the macros below, so one source
// serves PoCL and NVIDIA; gpu/matmul_ops.cc picks one per shape):
//   gemm_t64x64 / gemm_t128x64 / gemm_t128x128   strided GEMM (FC, BATCH_MATMUL, Winograd's batched GEMM)
//   gemm_t64x64n128 / gemm_t32x64n128 / gemm_t128x64n128 / gemm_t64x128n128 / gemm_t32x128n128
//                                                 the same with 128 threads (16 x 8): twice the micro-tile
//                                                 rows per work-item (8x4, 4x4, 16x4, 8x8, 4x8), more work-groups per SM
//   gemm_t16x64                                   the same GEMM for <= 16-row tiles (own loop, see below)
//   conv_t64x64 / conv_t128x64 / conv_t128x128 / conv_t64x64n128 / conv_t128x64n128 / conv_t64x128n128
//                                                 NHWC implicit-GEMM conv, needs Ci % 16 == 0
//   gemm_splitk_reduce                            sums split-K partials, adds bias, activation
//   each GEMM instance and the reduce also as NAME_gg (the gated-GELU epilogue below)
// Split-K: get_group_id(2) = batch * splits + split; a split covers K range
// [split * k_split, min(K, split * k_split + k_split)) (k_split % 16 == 0) and
// writes raw partial sums (times alpha) to its own slab at `scs` elements.
//
// Residual epilogue (every instance and gemm_splitk_reduce; trailing parameters R, ro, int rrows, int rsm):
// with rrows > 0, C[m, n] = act(...) + R[ro + (m / rrows) * rsm + n] (the host folds a following ADD into the
// op: rrows = 1, rsm = N for a same-shape R; rrows = rows per image for an [images, N] R; rsm = 0 for one [N]
// row). Split-K GEMMs pass rrows = 0 and the reduce adds it. rrows = 0: no residual.
//
// Gated-GELU epilogue: every GEMM instance and gemm_splitk_reduce has a twin NAME_gg whose act = SD_GELU_OP_ERF /
// _TANH / _QUICK (12 / 13 / 14, ops/gelu/opencl.cl) means the N columns are (value, gate) pairs -- column 2j the
// value, 2j + 1 the gate of output column j -- and C[m, j] (row stride scm = N / 2) = v * gelu(g) of the pair after
// alpha and bias: SdGelu(gated) folded into the FULLY_CONNECTED that feeds it (GpuOp::FuseGatedGelu). Needs
// N % 2 == 0. Separate instances, because the branch in a shared epilogue slowed every GEMM by 1-2% on the H200
// (BENCHMARKS session 8); with act < 12 a _gg twin computes what its plain instance does (split-K partials).
//
// B may be stored as half (b_half = 1, read with vload_half; no cl_khr_fp16
// needed): the B buffer is then a half array and its offset/strides are in halves.
// Arithmetic is always fp32.
#define GT_BK 16
#define GT_PAD 4

// ---- pieces shared by the GEMM and conv instances (BM, BN: literal tile sizes) ----

// NT: threads per work-group (256 or 128); the loaders below spread a tile over NT work-items.
#define GT_DECLS(BM, BN, NT)                                                              \
  __local float4 As4[GT_BK * ((BM) + GT_PAD) / 4];                                        \
  __local float4 Bs4[GT_BK * ((BN) + GT_PAD) / 4];                                        \
  __local float* As = (__local float*)As4;                                                \
  __local float* Bs = (__local float*)Bs4;                                                \
  const int lid = get_local_id(1) * 16 + get_local_id(0);                                 \
  /* micro-tile coordinates: each 32-wide warp covers 8 row groups x 4 column groups, so  \
     its A and B local reads touch 128 and 64 contiguous bytes (one wavefront each);      \
     ty < NT / 16, tx < 16 */                                                             \
  const int ty = ((lid >> 7) << 3) | ((lid >> 2) & 7), tx = (((lid >> 5) & 3) << 2) | (lid & 3); \
  const int n0 = get_group_id(0) * (BN), m0 = get_group_id(1) * (BM);                     \
  const int z = get_group_id(2), bz = z / splits, sz = z - bz * splits;                   \
  const int kbeg = sz * k_split, kend = min(K, kbeg + k_split);                           \
  float4 acc[16 * (BM) / (NT)][(BN) / 64];                                                \
  _Pragma("unroll")                                                                       \
  for (int i = 0; i < 16 * (BM) / (NT); ++i)                                              \
    _Pragma("unroll")                                                                     \
    for (int j = 0; j < (BN) / 64; ++j) acc[i][j] = (float4)(0.0f);                       \
  /* prefetch registers; the scalar loader modes address their components (GT_SET/GT_GET) */ \
  float4 ra4[4 * (BM) / (NT)], rb4[4 * (BN) / (NT)];

// Component c (a constant once loops unroll) of float4 v; no type punning through pointers.
#define GT_GET(v, c) ((c) == 0 ? (v).x : (c) == 1 ? (v).y : (c) == 2 ? (v).z : (v).w)
#define GT_SET(v, c, val) \
  if ((c) == 0) {         \
    (v).x = (val);        \
  } else if ((c) == 1) {  \
    (v).y = (val);        \
  } else if ((c) == 2) {  \
    (v).z = (val);        \
  } else {                \
    (v).w = (val);        \
  }

// Loader modes (uniform per launch): which tile axis consecutive work-items walk.
#define GT_KC 0      // along k, one element each
#define GT_MNC 1     // along m (A) / n (B), one element each
#define GT_NC GT_MNC
#define GT_KC_VEC 2  // A: 4 consecutive k per work-item (16-byte aligned rows)
#define GT_NC_VEC 2  // B: 4 consecutive n per work-item (16-byte aligned rows)

// B loader mode: GT_NC_VEC (n contiguous, rows 16-byte aligned: float4 / 4-half loads), GT_NC
// (n contiguous) or GT_KC (k contiguous); coalesced in every mode. `offsets`: B's offset and
// row/batch strides OR-ed together (all multiples of 4 <=> aligned rows).
#define GT_B_MODE(offsets) (sbn != 1 ? GT_KC : ((offsets) & 3) == 0 ? GT_NC_VEC : GT_NC)

#define GT_LOAD_F32(i) B[i]
#define GT_LOAD_F16(i) vload_half((i), (__global const half*)B)

// Global -> registers: B tile rows [kt, kt + 16) x columns [n0, n0 + BN). Half/float and the
// mode are uniform branches outside the loops, so each path keeps plain loads.
#define GT_FETCH_B_SCALAR(BN, NT, kt, LOAD)                                               \
  _Pragma("unroll")                                                                       \
  for (int p = 0; p < 16 * (BN) / (NT); ++p) {                                            \
    const int kk = b_mode == GT_NC ? lid / (BN) + p * ((NT) / (BN)) : (lid & 15);         \
    const int c = b_mode == GT_NC ? lid % (BN) : (lid >> 4) + p * ((NT) / 16);            \
    const int k = (kt) + kk, n = n0 + c;                                                  \
    GT_SET(rb4[p >> 2], p & 3, (k < kend && n < N) ? LOAD(bbase + k * sbk + n * sbn) : 0.0f) \
  }
#define GT_FETCH_B_VEC(BN, NT, kt)                                                        \
  _Pragma("unroll")                                                                       \
  for (int p = 0; p < 4 * (BN) / (NT); ++p) {                                             \
    const int kk = lid / ((BN) / 4) + p * (4 * (NT) / (BN)), c = (lid % ((BN) / 4)) * 4;  \
    const int k = (kt) + kk, n = n0 + c, i = bbase + k * sbk + n;                         \
    float4 v = (float4)(0.0f);                                                            \
    if (k < kend && n + 3 < N) {                                                          \
      v = b_half ? vloada_half4(i >> 2, (__global const half*)B) : *(__global const float4*)(B + i); \
    } else if (k < kend && n < N) {                                                       \
      v.x = b_half ? GT_LOAD_F16(i) : B[i];                                               \
      if (n + 1 < N) v.y = b_half ? GT_LOAD_F16(i + 1) : B[i + 1];                        \
      if (n + 2 < N) v.z = b_half ? GT_LOAD_F16(i + 2) : B[i + 2];                        \
    }                                                                                     \
    rb4[p] = v;                                                                           \
  }
#define GT_FETCH_B(BN, NT, kt)                 \
  if (b_mode == GT_NC_VEC) {                   \
    GT_FETCH_B_VEC(BN, NT, kt)                 \
  } else if (b_half) {                         \
    GT_FETCH_B_SCALAR(BN, NT, kt, GT_LOAD_F16) \
  } else {                                     \
    GT_FETCH_B_SCALAR(BN, NT, kt, GT_LOAD_F32) \
  }

// Registers -> local: As[kk][r] and Bs[kk][c] (k-major, float4-readable rows).
#define GT_STORE(BM, BN, NT, a_mode)                                                      \
  if ((a_mode) == GT_KC_VEC) {                                                            \
    _Pragma("unroll")                                                                     \
    for (int p = 0; p < 4 * (BM) / (NT); ++p) {                                           \
      const int r = (lid >> 2) + p * ((NT) / 4), kq = (lid & 3) * 4;                      \
      As[(kq + 0) * ((BM) + GT_PAD) + r] = ra4[p].x;                                      \
      As[(kq + 1) * ((BM) + GT_PAD) + r] = ra4[p].y;                                      \
      As[(kq + 2) * ((BM) + GT_PAD) + r] = ra4[p].z;                                      \
      As[(kq + 3) * ((BM) + GT_PAD) + r] = ra4[p].w;                                      \
    }                                                                                     \
  } else {                                                                                \
    _Pragma("unroll")                                                                     \
    for (int p = 0; p < 16 * (BM) / (NT); ++p) {                                          \
      const int kk = (a_mode) == GT_MNC ? lid / (BM) + p * ((NT) / (BM)) : (lid & 15);    \
      const int r = (a_mode) == GT_MNC ? lid % (BM) : (lid >> 4) + p * ((NT) / 16);       \
      As[kk * ((BM) + GT_PAD) + r] = GT_GET(ra4[p >> 2], p & 3);                          \
    }                                                                                     \
  }                                                                                       \
  if (b_mode == GT_NC_VEC) {                                                              \
    _Pragma("unroll")                                                                     \
    for (int p = 0; p < 4 * (BN) / (NT); ++p) {                                           \
      const int kk = lid / ((BN) / 4) + p * (4 * (NT) / (BN)), c = (lid % ((BN) / 4)) * 4; \
      Bs4[kk * (((BN) + GT_PAD) / 4) + c / 4] = rb4[p];                                   \
    }                                                                                     \
  } else {                                                                                \
    _Pragma("unroll")                                                                     \
    for (int p = 0; p < 16 * (BN) / (NT); ++p) {                                          \
      const int kk = b_mode == GT_NC ? lid / (BN) + p * ((NT) / (BN)) : (lid & 15);       \
      const int c = b_mode == GT_NC ? lid % (BN) : (lid >> 4) + p * ((NT) / 16);          \
      Bs[kk * ((BN) + GT_PAD) + c] = GT_GET(rb4[p >> 2], p & 3);                          \
    }                                                                                     \
  }

// 16 rank-1 updates of the micro-tile from the staged tiles.
#define GT_COMPUTE(BM, BN, NT)                                                            \
  _Pragma("unroll")                                                                       \
  for (int kk = 0; kk < GT_BK; ++kk) {                                                    \
    float4 av[4 * (BM) / (NT)], bv[(BN) / 64];                                            \
    _Pragma("unroll")                                                                     \
    for (int q = 0; q < 4 * (BM) / (NT); ++q)                                             \
      av[q] = As4[kk * (((BM) + GT_PAD) / 4) + q * ((NT) / 16) + ty];                     \
    _Pragma("unroll")                                                                          \
    for (int q = 0; q < (BN) / 64; ++q) bv[q] = Bs4[kk * (((BN) + GT_PAD) / 4) + q * 16 + tx]; \
    _Pragma("unroll")                                                                     \
    for (int q = 0; q < 4 * (BM) / (NT); ++q) {                                           \
      _Pragma("unroll")                                                                   \
      for (int j = 0; j < (BN) / 64; ++j) {                                               \
        acc[q * 4 + 0][j] = mad((float4)(av[q].x), bv[j], acc[q * 4 + 0][j]);             \
        acc[q * 4 + 1][j] = mad((float4)(av[q].y), bv[j], acc[q * 4 + 1][j]);             \
        acc[q * 4 + 2][j] = mad((float4)(av[q].z), bv[j], acc[q * 4 + 2][j]);             \
        acc[q * 4 + 3][j] = mad((float4)(av[q].w), bv[j], acc[q * 4 + 3][j]);             \
      }                                                                                   \
    }                                                                                     \
  }

// C[m, n] = act(alpha * acc + bias[n]) for the in-range part of the micro-tile.
// GATED (literal 0/1): the _gg instances' gated-GELU branch (act >= 12), compiled out of the others.
#define GT_EPILOGUE(BM, BN, NT, C, cbase, ldc, NCOLS, GATED) GT_EPILOGUE_LN(BM, BN, NT, C, cbase, ldc, NCOLS, GATED, 0)
#define GT_LN_COLSUM_0(n, NCOLS)
#define GT_LN_COLSUM_1(n, NCOLS)                                 \
  cj.x = lnc[lnco + bz * (NCOLS) + (n)];                         \
  if ((n) + 1 < (NCOLS)) cj.y = lnc[lnco + bz * (NCOLS) + (n) + 1]; \
  if ((n) + 2 < (NCOLS)) cj.z = lnc[lnco + bz * (NCOLS) + (n) + 2]; \
  if ((n) + 3 < (NCOLS)) cj.w = lnc[lnco + bz * (NCOLS) + (n) + 3];
#define GT_LN_BIAS_0(NCOLS) 0
#define GT_LN_BIAS_1(NCOLS) (bz * (NCOLS))
#define GT_LN_ACC_0(i, j) acc[i][j]
#define GT_LN_ACC_1(i, j) (ln_r[i] * (acc[i][j] - ln_d[i] * cj))
// LN (literal 0/1): the _ln twins' LayerNorm epilogue (GT_LN_STATS_1): acc holds sum_k (x - x0) W'; the
// normalised product is rstd * (acc - (mean - x0) * c[n]), c = the column sums of W' (lnc at lnco).
#define GT_EPILOGUE_LN(BM, BN, NT, C, cbase, ldc, NCOLS, GATED, LN)                       \
  _Pragma("unroll")                                                                       \
  for (int j = 0; j < (BN) / 64; ++j) {                                                   \
    const int n = n0 + j * 64 + tx * 4;                                                   \
    if (n >= (NCOLS)) continue;                                                           \
    float4 bj = (float4)(0.0f), cj = (float4)(0.0f);                                      \
    if (has_bias) {                                                                       \
      const int bo_ = biaso + GT_LN_BIAS_##LN(NCOLS);                                     \
      bj.x = bias[bo_ + n];                                                               \
      if (n + 1 < (NCOLS)) bj.y = bias[bo_ + n + 1];                                      \
      if (n + 2 < (NCOLS)) bj.z = bias[bo_ + n + 2];                                      \
      if (n + 3 < (NCOLS)) bj.w = bias[bo_ + n + 3];                                      \
    }                                                                                     \
    GT_LN_COLSUM_##LN(n, NCOLS)                                                           \
    _Pragma("unroll")                                                                     \
    for (int i = 0; i < 16 * (BM) / (NT); ++i) {                                          \
      const int m = m0 + (i >> 2) * ((NT) / 4) + ty * 4 + (i & 3);                        \
      if (m >= M) continue;                                                               \
      const float4 v = alpha * GT_LN_ACC_##LN(i, j) + bj;                                 \
      if ((GATED) && act >= SD_GELU_OP_ERF) { /* pairs (n, n+1), (n+2, n+3) -> columns n/2, n/2+1 */ \
        __global float* d2 = (C) + (cbase) + m * (ldc) + n / 2;                           \
        d2[0] = v.x * sd_gelu_mode(v.y, act);                                             \
        if (n + 3 < (NCOLS)) d2[1] = v.z * sd_gelu_mode(v.w, act);                        \
        continue;                                                                         \
      }                                                                                   \
      __global float* dst = (C) + (cbase) + m * (ldc) + n;                                \
      float4 w = (float4)(sd_act(v.x, act), sd_act(v.y, act), sd_act(v.z, act), sd_act(v.w, act)); \
      __global const float* res = R + ro + (rrows > 0 ? (m / rrows) * rsm + n : 0);      \
      if (n + 3 < (NCOLS)) {                                                              \
        if (rrows > 0) w += vload4(0, res);                                               \
        vstore4(w, 0, dst);                                                               \
      } else {                                                                            \
        dst[0] = w.x + (rrows > 0 ? res[0] : 0.0f);                                       \
        if (n + 1 < (NCOLS)) dst[1] = w.y + (rrows > 0 ? res[1] : 0.0f);                  \
        if (n + 2 < (NCOLS)) dst[2] = w.z + (rrows > 0 ? res[2] : 0.0f);                  \
      }                                                                                   \
    }                                                                                     \
  }

// The k-loop with register double buffering; GT_FETCH_A_<KIND>(BM, kt) fills ra for the
// tile at kt, ADVANCE (may be empty) runs before each prefetch.
#define GT_MAIN_LOOP(BM, BN, NT, a_mode, KIND, ADVANCE) GT_MAIN_LOOP_S(BM, BN, NT, a_mode, KIND, ADVANCE, )
// SHIFT (may be empty) runs on the landed A registers before each store (the LayerNorm twins' GT_LN_SHIFT_1).
#define GT_MAIN_LOOP_S(BM, BN, NT, a_mode, KIND, ADVANCE, SHIFT)                          \
  if (kbeg < kend) {                                                                      \
    GT_FETCH_A_##KIND(BM, NT, kbeg)                                                       \
    GT_FETCH_B(BN, NT, kbeg)                                                              \
    for (int kt = kbeg; kt < kend; kt += GT_BK) {                                         \
      SHIFT                                                                               \
      GT_STORE(BM, BN, NT, a_mode)                                                        \
      barrier(CLK_LOCAL_MEM_FENCE);                                                       \
      if (kt + GT_BK < kend) {                                                            \
        ADVANCE                                                                           \
        GT_FETCH_A_##KIND(BM, NT, kt + GT_BK)                                             \
        GT_FETCH_B(BN, NT, kt + GT_BK)                                                    \
      }                                                                                   \
      GT_COMPUTE(BM, BN, NT)                                                              \
      barrier(CLK_LOCAL_MEM_FENCE);                                                       \
    }                                                                                     \
  }

// ---- strided GEMM ------------------------------------------------------------------
// gemm_tBMxBN(C, co, int scb, int scs, int scm, A, ao, int sab, int sam, int sak,
//             B, bo, int sbb, int sbk, int sbn, int b_half, bias, biaso, int has_bias,
//             int M, int N, int K, float alpha, int act, int splits, int k_split)
// C[b, m, n] (at co + b*scb + split*scs + m*scm + n) = act(alpha * sum_k A[b, m, k] B[b, k, n] + bias[n]),
// A[b, m, k] = A[ao + b*sab + m*sam + k*sak], B likewise; global = (ceil(N/BN)*16, ceil(M/BM)*16,
// batch*splits), local = (16, 16, 1). Broadcast batches use stride 0.

#define GT_FETCH_A_STRIDED(BM, NT, kt)                                                    \
  if (a_mode == GT_KC_VEC) {                                                              \
    _Pragma("unroll")                                                                     \
    for (int p = 0; p < 4 * (BM) / (NT); ++p) {                                           \
      const int r = (lid >> 2) + p * ((NT) / 4), k = (kt) + (lid & 3) * 4, m = m0 + r;    \
      const int i = abase + m * sam + k;                                                  \
      float4 v = (float4)(0.0f);                                                          \
      if (m < M && k + 3 < kend) {                                                        \
        v = *(__global const float4*)(A + i);                                             \
      } else if (m < M && k < kend) {                                                     \
        v.x = A[i];                                                                       \
        if (k + 1 < kend) v.y = A[i + 1];                                                 \
        if (k + 2 < kend) v.z = A[i + 2];                                                 \
      }                                                                                   \
      ra4[p] = v;                                                                         \
    }                                                                                     \
  } else {                                                                                \
    _Pragma("unroll")                                                                     \
    for (int p = 0; p < 16 * (BM) / (NT); ++p) {                                          \
      const int kk = a_mode == GT_MNC ? lid / (BM) + p * ((NT) / (BM)) : (lid & 15);      \
      const int r = a_mode == GT_MNC ? lid % (BM) : (lid >> 4) + p * ((NT) / 16);         \
      const int k = (kt) + kk, m = m0 + r;                                                \
      GT_SET(ra4[p >> 2], p & 3, (k < kend && m < M) ? A[abase + m * sam + k * sak] : 0.0f) \
    }                                                                                     \
  }

// LayerNorm twins (NAME_ln, NAME_gg_ln; LN = 1 below): C = act(alpha * LN(A) W + bias) where LN(A) = (A - mean) * rstd
// per row over all K (mean, variance and eps of SdGroupNorm's LayerNorm view; the host folds its gamma into
// W' = diag(gamma) W and its beta into the bias). The GEMM runs on x - x0 (x0 = the row's first element: a shift
// within about one standard deviation of the mean, so neither the variance nor the epilogue cancels badly) and sums
// that shifted row and its squares as it stores each A tile; the epilogue applies rstd * (acc - (mean - x0) * c[n])
// with c = the column sums of W' (lnc). Needs a single K slice (splits = 1) and rows of A along k 16-byte aligned
// (the float4 loader). Batches are column blocks of one FC (GpuOp::SplitColumns: A shared): bias and lnc are read at
// bz * N + n. Extra trailing parameters: __global const float* lnc, int lnco, float ln_eps.
#define GT_LN_PARAMS_0
#define GT_LN_PARAMS_1 , __global const float *lnc, int lnco, float ln_eps
// The row shifts x0 and the shifted row sums of each A row this work-item loads (GT_KC_VEC's rows).
#define GT_LN_PROLOGUE_0(BM, NT)
#define GT_LN_PROLOGUE_1(BM, NT)                                                          \
  float ln_x0[4 * (BM) / (NT)], ln_s1[4 * (BM) / (NT)], ln_s2[4 * (BM) / (NT)];           \
  _Pragma("unroll")                                                                       \
  for (int p = 0; p < 4 * (BM) / (NT); ++p) {                                             \
    const int m = m0 + (lid >> 2) + p * ((NT) / 4);                                       \
    ln_x0[p] = m < M ? A[abase + m * sam] : 0.0f;                                         \
    ln_s1[p] = 0.0f;                                                                      \
    ln_s2[p] = 0.0f;                                                                      \
  }
// Before a step's A tile is stored (its loads have landed by then; shifting at load time would stall on them):
// the in-range elements become x - x0 and enter the row sums; padding stays 0.
#define GT_LN_SHIFT_0(BM, NT, kt)
#define GT_LN_SHIFT_1(BM, NT, kt)                                                         \
  _Pragma("unroll")                                                                       \
  for (int p = 0; p < 4 * (BM) / (NT); ++p) {                                             \
    const int k = (kt) + (lid & 3) * 4, m = m0 + (lid >> 2) + p * ((NT) / 4);             \
    const int valid = m < M ? min(4, kend - k) : 0;                                       \
    float4 v = ra4[p] - (float4)(ln_x0[p]);                                               \
    if (valid < 4) {                                                                      \
      v.x = valid > 0 ? v.x : 0.0f;                                                       \
      v.y = valid > 1 ? v.y : 0.0f;                                                       \
      v.z = valid > 2 ? v.z : 0.0f;                                                       \
      v.w = 0.0f;                                                                         \
    }                                                                                     \
    ln_s1[p] += (v.x + v.y) + (v.z + v.w);                                                \
    ln_s2[p] = fma(v.x, v.x, fma(v.y, v.y, fma(v.z, v.z, fma(v.w, v.w, ln_s2[p]))));      \
    ra4[p] = v;                                                                           \
  }
// After the main loop (whose last barrier freed As): the four k-lanes' sums of each row through As, then each
// work-item's epilogue rows' (mean - x0, rstd).
#define GT_LN_STATS_0(BM, NT)
#define GT_LN_STATS_1(BM, NT)                                                             \
  _Pragma("unroll")                                                                       \
  for (int p = 0; p < 4 * (BM) / (NT); ++p) {                                             \
    const int r = (lid >> 2) + p * ((NT) / 4);                                            \
    As[(r * 4 + (lid & 3)) * 2] = ln_s1[p];                                               \
    As[(r * 4 + (lid & 3)) * 2 + 1] = ln_s2[p];                                           \
  }                                                                                       \
  barrier(CLK_LOCAL_MEM_FENCE);                                                           \
  float ln_d[16 * (BM) / (NT)], ln_r[16 * (BM) / (NT)];                                   \
  _Pragma("unroll")                                                                       \
  for (int i = 0; i < 16 * (BM) / (NT); ++i) {                                            \
    const int r = (i >> 2) * ((NT) / 4) + ty * 4 + (i & 3);                               \
    const float s1 = (As[r * 8] + As[r * 8 + 2]) + (As[r * 8 + 4] + As[r * 8 + 6]);       \
    const float s2 = (As[r * 8 + 1] + As[r * 8 + 3]) + (As[r * 8 + 5] + As[r * 8 + 7]);   \
    const float d = s1 / (float)K;                                                        \
    ln_d[i] = d;                                                                          \
    ln_r[i] = rsqrt(fmax(s2 / (float)K - d * d, 0.0f) + ln_eps);                          \
  }

// GATED, LN: literal 0/1 (the _gg and _ln twins).
#define SD_GEMM_TILED_G(NAME, BM, BN, NT, GATED, LN)                                              \
  __kernel __attribute__((reqd_work_group_size(16, (NT) / 16, 1))) void NAME(                     \
      __global float* C, int co, int scb, int scs, int scm, __global const float* A, int ao, int sab, \
      int sam, int sak, __global const float* B, int bo, int sbb, int sbk, int sbn, int b_half,   \
      __global const float* bias, int biaso, int has_bias, int M, int N, int K, float alpha, int act, \
      int splits, int k_split, __global const float* R, int ro, int rrows, int rsm GT_LN_PARAMS_##LN) { \
    GT_DECLS(BM, BN, NT)                                                                          \
    const int abase = ao + bz * sab, bbase = bo + bz * sbb;                                       \
    const int b_mode = GT_B_MODE(bo | sbb | sbk);                                                 \
    /* A loader along m when m is the contiguous axis; float4 along k for aligned rows (always for LN) */ \
    const int a_mode = (LN) ? GT_KC_VEC                                                           \
                     : sak != 1 && sam == 1 ? GT_MNC : sak == 1 && ((ao | sab | sam) & 3) == 0 ? GT_KC_VEC : GT_KC; \
    GT_LN_PROLOGUE_##LN(BM, NT)                                                                   \
    GT_MAIN_LOOP_S(BM, BN, NT, a_mode, STRIDED, , GT_LN_SHIFT_##LN(BM, NT, kt))                  \
    GT_LN_STATS_##LN(BM, NT)                                                                      \
    GT_EPILOGUE_LN(BM, BN, NT, C, co + bz * scb + sz * scs, scm, N, GATED, LN)                   \
  }
#define SD_GEMM_TILED(NAME, BM, BN, NT)            \
  SD_GEMM_TILED_G(NAME, BM, BN, NT, 0, 0)          \
  SD_GEMM_TILED_G(NAME##_gg, BM, BN, NT, 1, 0)     \
  SD_GEMM_TILED_G(NAME##_ln, BM, BN, NT, 0, 1)     \
  SD_GEMM_TILED_G(NAME##_gg_ln, BM, BN, NT, 1, 1)

SD_GEMM_TILED(gemm_t64x64, 64, 64, 256)
SD_GEMM_TILED(gemm_t128x64, 128, 64, 256)
SD_GEMM_TILED(gemm_t128x128, 128, 128, 256)
SD_GEMM_TILED(gemm_t64x64n128, 64, 64, 128)
SD_GEMM_TILED(gemm_t32x64n128, 32, 64, 128)
SD_GEMM_TILED(gemm_t32x128n128, 32, 128, 128)
SD_GEMM_TILED(gemm_t128x64n128, 128, 64, 128)
SD_GEMM_TILED(gemm_t64x128n128, 64, 128, 128)

// ---- skinny GEMM: at most 16 rows per tile ------------------------------------------
// gemm_t16x64: the parameters, C/A/B/bias semantics, split-K contract and grid formula of gemm_tBMxBN
// with BM = 16, BN = 64 (global = (ceil(N/64)*16, ceil(M/16)*16, batch*splits), local = (16, 16, 1)).
// For the Winograd GEMMs of small maps (T = 16 tiles: SD's 8x8 map at F(2x2), 16x16 at F(4x4)) and FCs
// of a few rows, where a 64-row tile would compute >= 75% padding. Meant to be weight-bandwidth bound:
// the 256 work-items are 64 columns x 4 k-lanes; per 64-deep K step lane l owns the 16 consecutive k
// of [16l, 16l + 16), loads its column's 16 B elements into registers first (16 independent loads in
// flight, each warp reading whole 256-byte row segments; every B element is read once per row tile)
// and then, per row, takes 4 A values at a time from local memory as one float4 broadcast (one warp =
// one lane = one address): 4 FMAs per local read, the limit of a kernel with no register blocking
// along m. The 4 lanes are summed through local memory at the end.
// b_half bit 1 ("tile-major" B, this kernel only): B is stored [batch][ceil(N/64)][K][64], so each
// work-group streams one contiguous slab (sbb = the batch stride; sbk/sbn unused); 6-7% faster on the
// H200 than the row-major K x N layout (Winograd's U, BENCHMARKS session 6). Bit 0: half storage.
#define GS_BK 64
#define GS_KPL (GS_BK / 4)             // k per lane and step
#define GS_AST (GS_BK / 4 + 1)         // A row stride in float4s (padded)
// Row r, column c of the tile: the sum of the 4 k-lanes' partials in red [lane][row][column].
inline float gs_lane_sum(__local const float* red, int r, int c) {
  return red[r * 64 + c] + red[(16 + r) * 64 + c] + red[(32 + r) * 64 + c] + red[(48 + r) * 64 + c];
}

// The body, shared by gemm_t16x64 and its gated twin (`gated`: a literal, so each kernel keeps one epilogue);
// As4 [16 * GS_AST] and red [4 * 16 * 64] are the kernel's local arrays.
inline void gs_skinny(__local float4* As4, __local float* red, const int gated, __global float* C, int co, int scb,
                      int scs, int scm, __global const float* A, int ao, int sab, int sam, int sak,
                      __global const float* B, int bo, int sbb, int sbk, int sbn, int b_half,
                      __global const float* bias, int biaso, int has_bias, int M, int N, int K, float alpha, int act,
                      int splits, int k_split, __global const float* R, int ro, int rrows, int rsm) {
  __local float* As = (__local float*)As4;
  const int lid = get_local_id(1) * 16 + get_local_id(0);
  const int c = lid & 63, lane = lid >> 6;
  const int n0 = get_group_id(0) * 64, m0 = get_group_id(1) * 16;
  const int z = get_group_id(2), bz = z / splits, sz = z - bz * splits;
  const int kbeg = sz * k_split, kend = min(K, kbeg + k_split);
  const int abase = ao + bz * sab, bbase = bo + bz * sbb;
  const int n = n0 + c;
  const int b_tiles = b_half >> 1;
  b_half &= 1;
  const int slab = bbase + get_group_id(0) * K * 64 + c;  // tile-major: this column's k = 0 element
  float acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = 0.0f;
  for (int kt = kbeg; kt < kend; kt += GS_BK) {
    for (int e = lid; e < 16 * GS_BK; e += 256) {  // consecutive work-items along k: coalesced when sak == 1
      const int r = e / GS_BK, kk = e - r * GS_BK, m = m0 + r, k = kt + kk;
      As[r * 4 * GS_AST + kk] = (m < M && k < kend) ? A[abase + m * sam + k * sak] : 0.0f;
    }
    float bv[GS_KPL];
    for (int t = 0; t < GS_KPL; ++t) {
      const int k = kt + lane * GS_KPL + t, i = b_tiles ? slab + k * 64 : bbase + k * sbk + n * sbn;
      bv[t] = (k < kend && n < N) ? (b_half ? vload_half(i, (__global const half*)B) : B[i]) : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int q = 0; q < GS_KPL / 4; ++q) {
      for (int r = 0; r < 16; ++r) {
        const float4 a = As4[r * GS_AST + lane * (GS_KPL / 4) + q];
        acc[r] = mad(a.x, bv[4 * q], mad(a.y, bv[4 * q + 1], mad(a.z, bv[4 * q + 2], mad(a.w, bv[4 * q + 3], acc[r]))));
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int r = 0; r < 16; ++r) red[(lane * 16 + r) * 64 + c] = acc[r];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (n >= N) return;
  const float bn = has_bias ? bias[biaso + n] : 0.0f;
  if (gated && act >= SD_GELU_OP_ERF) {  // the even column's work-item finishes the (value, gate) pair
    if (c & 1) return;
    const float bg = has_bias ? bias[biaso + n + 1] : 0.0f;
    for (int q = 0; q < 4; ++q) {
      const int r = lane * 4 + q, m = m0 + r;
      if (m >= M) break;
      C[co + bz * scb + sz * scs + m * scm + n / 2] =
          (alpha * gs_lane_sum(red, r, c) + bn) * sd_gelu_mode(alpha * gs_lane_sum(red, r, c + 1) + bg, act);
    }
    return;
  }
  for (int q = 0; q < 4; ++q) {  // lane l finishes rows 4l .. 4l+3 of its column
    const int r = lane * 4 + q, m = m0 + r;
    if (m >= M) break;
    C[co + bz * scb + sz * scs + m * scm + n] =
        sd_act(alpha * gs_lane_sum(red, r, c) + bn, act) + (rrows > 0 ? R[ro + (m / rrows) * rsm + n] : 0.0f);
  }
}

#define SD_GEMM_SKINNY(NAME, GATED)                                                                           \
  __kernel __attribute__((reqd_work_group_size(16, 16, 1))) void NAME(                                        \
      __global float* C, int co, int scb, int scs, int scm, __global const float* A, int ao, int sab, int sam, \
      int sak, __global const float* B, int bo, int sbb, int sbk, int sbn, int b_half,                         \
      __global const float* bias, int biaso, int has_bias, int M, int N, int K, float alpha, int act,         \
      int splits, int k_split, __global const float* R, int ro, int rrows, int rsm) {                         \
    __local float4 As4[16 * GS_AST]; /* [row][k / 4] */                                                       \
    __local float red[4 * 16 * 64];  /* [lane][row][column] */                                                \
    gs_skinny(As4, red, GATED, C, co, scb, scs, scm, A, ao, sab, sam, sak, B, bo, sbb, sbk, sbn, b_half, bias, \
              biaso, has_bias, M, N, K, alpha, act, splits, k_split, R, ro, rrows, rsm);                      \
  }
SD_GEMM_SKINNY(gemm_t16x64, 0)
SD_GEMM_SKINNY(gemm_t16x64_gg, 1)

// The skinny kernels' end: the KL lanes' partials meet in local memory (red[lane][row][column group]), then NT
// work-items finish TM x CW outputs (alpha, bias, activation, residual).
inline void gv_finish(__local float4* lds, const float4* acc, const int CW, const int KL, const int RS, const int TM,
                      int lid, int c, int rh, int lane, int n0, int m0, int bz, int sz, __global float* C, int co,
                      int scb, int scs, int scm, __global const float* bias, int biaso, int has_bias, int M, int N,
                      float alpha, int act, __global const float* R, int ro, int rrows, int rsm) {
  const int NCG = CW / 4, NT = NCG * RS * KL, RT = TM / RS;
  barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
  for (int i = 0; i < RT; ++i) lds[(lane * TM + rh * RT + i) * NCG + c] = acc[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int o = lid; o < TM * NCG; o += NT) {
    const int r = o / NCG, cg = o - r * NCG, m = m0 + r, nn = n0 + 4 * cg;
    if (m >= M || nn >= N) continue;
    float4 v = lds[r * NCG + cg];
    for (int l = 1; l < KL; ++l) v += lds[(l * TM + r) * NCG + cg];
    float4 bv = (float4)(0.0f);
    if (has_bias) {
      bv.x = bias[biaso + nn];
      if (nn + 1 < N) bv.y = bias[biaso + nn + 1];
      if (nn + 2 < N) bv.z = bias[biaso + nn + 2];
      if (nn + 3 < N) bv.w = bias[biaso + nn + 3];
    }
    v = alpha * v + bv;
    float4 w = (float4)(sd_act(v.x, act), sd_act(v.y, act), sd_act(v.z, act), sd_act(v.w, act));
    __global float* dst = C + co + bz * scb + sz * scs + m * scm + nn;
    __global const float* res = R + ro + (rrows > 0 ? (m / rrows) * rsm + nn : 0);
    if (nn + 3 < N) {
      if (rrows > 0) w += vload4(0, res);
      vstore4(w, 0, dst);
    } else {
      dst[0] = w.x + (rrows > 0 ? res[0] : 0.0f);
      if (nn + 1 < N) dst[1] = w.y + (rrows > 0 ? res[1] : 0.0f);
      if (nn + 2 < N) dst[2] = w.z + (rrows > 0 ? res[2] : 0.0f);
    }
  }
}

// The skinny kernels' A staging: A[m0 .. m0+TM-1][kc .. kc+KC) into local memory as [k][TM rows] (zero past M and
// kend); work-item e of NT reads 4 consecutive k of row e % TM.
inline void gv_stage_a(__local float4* lds, const int TM, const int KC, const int NT, int lid, int kc, int kend,
                       int m0, int M, __global const float* A, int abase, int sam, int sak, int a_vec) {
  for (int e = lid; e < TM / 4 * KC; e += NT) {
    const int r = e % TM, k = kc + 4 * (e / TM), m = m0 + r;
    float4 v = (float4)(0.0f);
    if (m < M) {
      const int i = abase + m * sam + k * sak;
      if (a_vec && k + 3 < kend) {
        v = vload4(0, A + i);
      } else {
        if (k < kend) v.x = A[i];
        if (k + 1 < kend) v.y = A[i + sak];
        if (k + 2 < kend) v.z = A[i + 2 * sak];
        if (k + 3 < kend) v.w = A[i + 3 * sak];
      }
    }
    __local float* dst = (__local float*)lds + (k - kc) * TM + r;
    dst[0] = v.x;
    dst[TM] = v.y;
    dst[2 * TM] = v.z;
    dst[3 * TM] = v.w;
  }
}

// ---- skinny GEMM, float4 columns: the Winograd GEMM of small maps ---------------------------------------------
// gemm_s16x<CW>: gemm_t16x64's parameters and semantics for a tile-major B (b_half bit 1 must be set, bit 0 =
// half storage; no gated twin), TM = 16 rows per tile (the library's), CW = 64 or 128 columns per work-group.
// Global = (ceil(N/CW)*16, ceil(M/TM)*NT/16, batch*splits), local = (16, NT/16), NT = CW/4 * RS * KL.
// Why another skinny kernel: gemm_t16x64 does 4 FMAs per local float4 read (16 rows x 1 column per work-item),
// and on the H200 a broadcast local float4 read issues at ~0.4 per SM and clock (scripts/h200/lds_lab.py), which
// caps that kernel's FMA side at ~40% of the FP32 peak -- and its loads do not overlap it (BENCHMARKS session 9).
// Here work-item (lane, c) owns 16 rows x 4 consecutive columns (64 accumulators): per k one float4 B read from
// global memory (tile-major slabs: a k-row of a 64-column slab is 256 contiguous bytes) and 4 broadcast local
// float4 reads of A[k][0..15] feed 64 FMAs (16 per local read, ~70% of peak by the same measurement). The KL
// k-lanes split each staged KC-deep A chunk into KC/KL consecutive k (with CW = 128 a warp is one lane, so each
// local read is a single-address broadcast); each work-item keeps PF B rows in flight in registers, across chunk
// boundaries, so global latency overlaps the FMAs without a barrier in the inner loop. The lanes' partial sums
// meet once in local memory at the end. RS > 1 (lab only) shares a column's TM rows among RS work-items; TM = 32
// (lab only, with RS = 2) reads U once for 32 rows (cfg batch 2), measured slower than two 16-row tiles and than
// gemm_t32x64n128 on the H200 (0.197-0.39 vs 0.180 / 0.152 ms at b2 16x16 F4 1280 -> 1280; BENCHMARKS session 11).
// Trade-offs: 128 registers at PF = 4 (SASS, BENCHMARKS session 10; PF = 8 takes 187 and runs slower); A is
// staged per chunk (two barriers per KC k); K is rounded up to whole KC chunks of masked (zero) work, 20% at
// K = 640; U is still read at only ~2.4 TB/s of ~4 (H200). Not for want of bytes in flight: a cp.async ring with
// 3.5x as many (scripts/h200/skinny_ring.cl, BENCHMARKS session 16) ran no faster, and without its FMAs took 94% of
// the whole kernel's time, so the load path (16 bytes per work-item per k-row, barrier-synchronised A chunks) is
// the bound.
#define GV_PFMAX 8  // >= PF
inline void gv_skinny(__local float4* lds, const int CW, const int KL, const int KC, const int PF, const int RS,
                      const int TM,
                      __global float* C, int co, int scb, int scs, int scm, __global const float* A, int ao, int sab,
                      int sam, int sak,
                      __global const float* B, int bo, int sbb, int b_half, __global const float* bias, int biaso,
                      int has_bias, int M, int N, int K, float alpha, int act, int splits, int k_split,
                      __global const float* R, int ro, int rrows, int rsm) {
  const int NCG = CW / 4, NT = NCG * RS * KL, KPL = KC / KL, RT = TM / RS;  // RT <= 16 rows per work-item
  const int lid = get_local_id(1) * 16 + get_local_id(0);
  const int c = lid % NCG, rh = (lid / NCG) % RS, lane = lid / (NCG * RS);
  const int n0 = get_group_id(0) * CW, m0 = get_group_id(1) * TM;
  const int z = get_group_id(2), bz = z / splits, sz = z - bz * splits;
  const int kbeg = sz * k_split, kend = min(K, kbeg + k_split);
  const int abase = ao + bz * sab;
  const int n = n0 + 4 * c;
  const int half_b = b_half & 1;
  // tile-major B: [batch][ceil(N/64)][K][64]; this work-item's 4 columns of row k at bp + k * 64
  const int bp = bo + bz * sbb + (n >> 6) * K * 64 + (n & 63);
  const int a_vec = sak == 1 && ((ao | sab | sam) & 3) == 0;
  float4 acc[16];
#pragma unroll
  for (int r = 0; r < 16; ++r) acc[r] = (float4)(0.0f);
  const int nchunks = (kend - kbeg + KC - 1) / KC;
  // the j-th k of this lane: chunk j / KPL, k = kbeg + chunk * KC + lane * KPL + j % KPL
#define GV_K(j) (kbeg + ((j) / KPL) * KC + lane * KPL + (j) % KPL)
// Columns n >= N load nothing: in the last 128-column group of an N that is not a multiple of 128 they can lie in
// a 64-column slab past the last one U has (N = 136: slabs 0..2, columns 192.. would read slab 3, past the buffer
// for the last batch; PoCL faulted there).
#define GV_LOAD_B(k) \
  ((k) < kend && n < N                                                                                           \
       ? (half_b ? vload_half4(0, (__global const half*)B + bp + (k) * 64) : vload4(0, B + bp + (k) * 64))     \
       : (float4)(0.0f))
  float4 bq[GV_PFMAX];
#pragma unroll
  for (int j = 0; j < PF; ++j) bq[j] = GV_LOAD_B(GV_K(j));
  for (int ch = 0; ch < nchunks; ++ch) {
    const int kc = kbeg + ch * KC;
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous chunk is consumed
    gv_stage_a(lds, TM, KC, NT, lid, kc, kend, m0, M, A, abase, sam, sak, a_vec);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int jj = 0; jj < KPL; jj += PF) {
      const int j = ch * KPL + jj;
      float4 bn[GV_PFMAX];
#pragma unroll
      for (int p = 0; p < PF; ++p) bn[p] = GV_LOAD_B(GV_K(j + PF + p));  // masked past kend
#pragma unroll
      for (int p = 0; p < PF; ++p) {
        __local const float4* ak = lds + (lane * KPL + jj + p) * (TM / 4);
        const float4 b = bq[p];
#pragma unroll
        for (int q = 0; q < RT / 4; ++q) {
          const float4 a = ak[rh * (RT / 4) + q];
          acc[4 * q + 0] = mad((float4)(a.x), b, acc[4 * q + 0]);
          acc[4 * q + 1] = mad((float4)(a.y), b, acc[4 * q + 1]);
          acc[4 * q + 2] = mad((float4)(a.z), b, acc[4 * q + 2]);
          acc[4 * q + 3] = mad((float4)(a.w), b, acc[4 * q + 3]);
        }
      }
#pragma unroll
      for (int p = 0; p < PF; ++p) bq[p] = bn[p];
    }
  }
#undef GV_K
#undef GV_LOAD_B
  gv_finish(lds, acc, CW, KL, RS, TM, lid, c, rh, lane, n0, m0, bz, sz, C, co, scb, scs, scm, bias, biaso, has_bias,
            M, N, alpha, act, R, ro, rrows, rsm);
}

// Local memory: max(A chunk KC * TM floats, partials KL * TM * CW floats), in float4.
#define GV_LDS4(CW, KL, KC, TM) ((KC) * (TM) > (KL) * (TM) * (CW) ? (KC) * (TM) / 4 : (KL) * (TM) * (CW) / 4)
#define SD_GEMM_SKINNY4(NAME, CW, KL, KC, PF, RS, TM)                                                               \
  __kernel __attribute__((reqd_work_group_size(16, (CW) / 4 * (KL) * (RS) / 16, 1))) void NAME(                     \
      __global float* C, int co, int scb, int scs, int scm, __global const float* A, int ao, int sab, int sam, \
      int sak, __global const float* B, int bo, int sbb, int sbk, int sbn, int b_half,                         \
      __global const float* bias, int biaso, int has_bias, int M, int N, int K, float alpha, int act,         \
      int splits, int k_split, __global const float* R, int ro, int rrows, int rsm) {                         \
    __local float4 lds[GV_LDS4(CW, KL, KC, TM)];                                                              \
    gv_skinny(lds, CW, KL, KC, PF, RS, TM, C, co, scb, scs, scm, A, ao, sab, sam, sak, B, bo, sbb, b_half, bias,      \
              biaso, has_bias, M, N, K, alpha, act, splits, k_split, R, ro, rrows, rsm);                      \
  }
SD_GEMM_SKINNY4(gemm_s16x128, 128, 4, 128, 4, 1, 16)

// ---- implicit-GEMM convolution -----------------------------------------------------
// conv_tBMxBN(Y, yo, int scs, X, xo, W, wo, int sbk, int sbn, int b_half, bias, biaso, int has_bias,
//             int H, int Wd, int Ci, int OH, int OW, int Co, int KH, int KW, int sh, int sw,
//             int dh, int dw, int ph, int pw, int M, int act, int splits, int k_split)
// NHWC x, weights as a K x Co matrix with k = (ky, kx, ci): W[wo + k*sbk + co*sbn] (OHWI as stored:
// sbk = 1, sbn = K; pre-packed K-major: sbk = Co, sbn = 1). Rows m = (image, oy, ox). Needs
// Ci % 16 == 0 so a K step has one (ky, kx): the A loader adds one precomputed per-row pixel offset
// (kept in local memory) to a per-step offset, with a bounds test for the padding. Global =
// (ceil(Co/BN)*16, ceil(M/BM)*16, splits), local = (16, 16, 1).

#define GT_FETCH_A_CONV(BM, NT, kt)                                                       \
  if (a_mode == GT_KC_VEC) {                                                              \
    _Pragma("unroll")                                                                     \
    for (int p = 0; p < 4 * (BM) / (NT); ++p) {                                           \
      const int4 ri = rows[(lid >> 2) + p * ((NT) / 4)];                                  \
      const int iy = ri.y + ky * dh, ix = ri.z + kx * dw;                                 \
      ra4[p] = (ri.w && iy >= 0 && iy < H && ix >= 0 && ix < Wd)                          \
                   ? *(__global const float4*)(X + ri.x + (ky * dh * Wd + kx * dw) * Ci + ci0 + (lid & 3) * 4) \
                   : (float4)(0.0f);                                                      \
    }                                                                                     \
  } else {                                                                                \
    _Pragma("unroll")                                                                     \
    for (int p = 0; p < 16 * (BM) / (NT); ++p) {                                          \
      const int4 ri = rows[(lid >> 4) + p * ((NT) / 16)];                                 \
      const int iy = ri.y + ky * dh, ix = ri.z + kx * dw;                                 \
      GT_SET(ra4[p >> 2], p & 3, (ri.w && iy >= 0 && iy < H && ix >= 0 && ix < Wd)       \
                                     ? X[ri.x + (ky * dh * Wd + kx * dw) * Ci + ci0 + (lid & 15)] \
                                     : 0.0f)                                              \
    }                                                                                     \
  }

#define GT_CONV_ADVANCE    \
  ci0 += GT_BK;            \
  if (ci0 == Ci) {         \
    ci0 = 0;               \
    if (++kx == KW) {      \
      kx = 0;              \
      ++ky;                \
    }                      \
  }

// rows[r] = (offset of output row m0 + r's tap-(0, 0) pixel (iy0, ix0), iy0, ix0, row valid) of an implicit-GEMM
// conv tile of BM rows, filled by the work-group's NT work-items, then a barrier (conv_t*, and gemm_tc.cl's conv_x*)
inline void sd_conv_rows(__local int4* rows, int BM, int NT, int lid, int m0, int M, int xo, int H, int Wd, int Ci,
                         int OH, int OW, int sh, int sw, int ph, int pw) {
  for (int r = lid; r < BM; r += NT) {
    const int m = m0 + r;
    const int ox = m % OW, q = m / OW, oy = q % OH, img = q / OH;
    const int iy0 = oy * sh - ph, ix0 = ox * sw - pw;
    rows[r] = (int4)(xo + ((img * H + iy0) * Wd + ix0) * Ci, iy0, ix0, m < M ? 1 : 0);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

#define SD_CONV_TILED(NAME, BM, BN, NT)                                                           \
  __kernel __attribute__((reqd_work_group_size(16, (NT) / 16, 1))) void NAME(                     \
      __global float* Y, int yo, int scs, __global const float* X, int xo, __global const float* B, int bo, \
      int sbk, int sbn, int b_half, __global const float* bias, int biaso, int has_bias, int H, int Wd, \
      int Ci, int OH, int OW, int Co, int KH, int KW, int sh, int sw, int dh, int dw, int ph, int pw, \
      int M, int act, int splits, int k_split, __global const float* R, int ro, int rrows, int rsm) { \
    const int N = Co, K = KH * KW * Ci;                                                           \
    const float alpha = 1.0f;                                                                     \
    GT_DECLS(BM, BN, NT)                                                                          \
    const int bbase = bo;                                                                         \
    const int b_mode = GT_B_MODE(bo | sbk);                                                       \
    __local int4 rows[BM];                                                                        \
    sd_conv_rows(rows, BM, NT, lid, m0, M, xo, H, Wd, Ci, OH, OW, sh, sw, ph, pw);                \
    int ky = kbeg / (KW * Ci), kx = (kbeg / Ci) % KW, ci0 = kbeg % Ci;                            \
    const int a_mode = (xo & 3) == 0 ? GT_KC_VEC : GT_KC; /* pixel rows are 16-float multiples */ \
    GT_MAIN_LOOP(BM, BN, NT, a_mode, CONV, GT_CONV_ADVANCE)                                       \
    GT_EPILOGUE(BM, BN, NT, Y, yo + sz * scs, Co, Co, 0)                                          \
  }

SD_CONV_TILED(conv_t64x64, 64, 64, 256)
SD_CONV_TILED(conv_t128x64, 128, 64, 256)
SD_CONV_TILED(conv_t128x128, 128, 128, 256)
SD_CONV_TILED(conv_t64x64n128, 64, 64, 128)
SD_CONV_TILED(conv_t128x64n128, 128, 64, 128)
SD_CONV_TILED(conv_t64x128n128, 64, 128, 128)

// gemm_splitk_reduce(C, co, int scb, int scm, P, po, int splits, bias, biaso, int has_bias, int M, int N, int act,
//                    R, ro, int rrows, int rsm)
// C[b, m, n] = act(sum_s P[((b*splits + s)*M + m)*N + n] + bias[n]) (+ the residual); global = (N, M, batch),
// local (16, 16, 1).
inline void splitk_reduce(const int gated, __global float* C, int co, int scb, int scm, __global const float* P,
                          int po, int splits, __global const float* bias, int biaso, int has_bias, int M, int N,
                          int act, __global const float* R, int ro, int rrows, int rsm) {
  const int n = get_global_id(0), m = get_global_id(1), b = get_global_id(2);
  if (n >= N || m >= M) return;
  const int plane = M * N;
  int i = po + b * splits * plane + m * N + n;
  float v = has_bias ? bias[biaso + n] : 0.0f;
  if (gated && act >= SD_GELU_OP_ERF) {  // the even column's work-item finishes the (value, gate) pair
    if (n & 1) return;
    float g = has_bias ? bias[biaso + n + 1] : 0.0f;
    for (int s = 0; s < splits; ++s, i += plane) {
      v += P[i];
      g += P[i + 1];
    }
    C[co + b * scb + m * scm + n / 2] = v * sd_gelu_mode(g, act);
    return;
  }
  for (int s = 0; s < splits; ++s, i += plane) v += P[i];
  C[co + b * scb + m * scm + n] = sd_act(v, act) + (rrows > 0 ? R[ro + (m / rrows) * rsm + n] : 0.0f);
}
#define SD_SPLITK_REDUCE(NAME, GATED)                                                                         \
  __kernel void NAME(__global float* C, int co, int scb, int scm, __global const float* P, int po, int splits,    \
                     __global const float* bias, int biaso, int has_bias, int M, int N, int act,                 \
                     __global const float* R, int ro, int rrows, int rsm) {                                       \
    splitk_reduce(GATED, C, co, scb, scm, P, po, splits, bias, biaso, has_bias, M, N, act, R, ro, rrows, rsm);   \
  }
SD_SPLITK_REDUCE(gemm_splitk_reduce, 0)
SD_SPLITK_REDUCE(gemm_splitk_reduce_gg, 1)
