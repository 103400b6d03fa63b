// SdAttention's NVIDIA-only kernels (OpenCL on NVIDIA: the host builds with -DSDGPU_NV_PTX=1 there, and with
// -DSDGPU_NV_SM90=1 on sm_90 and newer; elsewhere this file compiles to nothing). They follow the portable kernels
// (ops/attention/gpu.kern: ATT_LOG2E, ATR_INSTANTIATE) and the inline-PTX primitives
// (backends/opencl/nvidia/nv_ptx.cl) in the program. The host offers their tilings to the planner through
// gpu::Device::VendorAttentionTilings (backends/opencl/nvidia/attention_tilings.cc).
#if defined(SDGPU_NV_PTX) && SDGPU_NV_PTX

// h160x (NVIDIA only: the shfl.sync exchange, ATR_XS): h160w's geometry (32-query blocks, 256 work-items) with 4 rows
// per work-item and the head dim split over 8 lanes (20 floats of Q and O per row), exchanged by shfl.sync. H200,
// flash, 8 heads, 256 x 256 d160 (BENCHMARKS.md, attn_lab.py --xs): b2 0.0565 ms vs h160w 0.0649 (0.0692 with the
// local-memory exchange); at b1 0.0527 vs h160 0.0446, so the host keeps h160 there. Without ATR_XS its exchange
// buffer would take local memory past 48 KB, hence not in the portable file.
ATR_INSTANTIATE(h160x, 160, 4, 8, 4, 4, 1, 0.0f, 0, 8)

// ===========================================================================
// Tensor-core flash attention, 3xTF32 (NVIDIA only: inline PTX mma.sync, built where SDGPU_NV_PTX is; the host picks it
// only with the delegate option tensor_cores=3xtf32, flash, no causal mask): attn_flash_m40 (head dim 40) and
// attn_flash_m80 (head dim 80), the parameter list and grid of attn_flash_<t> (BQ = 16 MT NW, NT = 32 NW; host:
// attention_tilings.cc "m40", "m80").
// Every product is 3xTF32: x = big + small with big = x truncated to its top 11 significant bits (a TF32 value: one
// AND) and small = x - big (exact), and a*b = big*big + big*small + small*big with fp32 accumulation, the term
// small*small (<= 2^-20 |a b|) dropped and small read by the tensor core at TF32 precision. SD1.5's 64x64
// self-attention on the H200 (BENCHMARKS.md, mma_attn_lab.py): max error 3e-5 of the output's range vs
// 1.6e-6 for the fp32 kernel r40, 1.5x faster. Rounding big to nearest instead (+0x1000 before the mask) left the
// error where it was (3.3e-5) and cost 5%; splitting K and V once when staged (big and small planes in local memory)
// cost 15% (twice the local reads). Head dim 80 (SD1.5's 32x32 level, mma_attn_lab.py --d80 on an H100, BENCHMARKS.md):
// alone 1.29x the fp32 h80 at b1 and 1.66x r80 at b2, error ~1e-5; in the UNet only b2 gained, so the
// host keeps h80 for one-wave grids.
// Layout: NW warps per work-group, each owning MT m-tiles of 16 query rows (one head of one batch item). Q,
// pre-scaled by scale * log2(e), lives in registers as mma A fragments (big and small). Per block of BK keys, K
// and V are staged in local memory (row strides chosen so that a warp's B-fragment reads hit 32 distinct banks);
// S = Q K^T lands in C fragments (thread (g, t) = (lane / 4, lane % 4): rows g and g + 8, key columns 2t, 2t + 1 of
// each 8-key n-tile); the online softmax runs on them (row max and sum over the quad by shfl.bfly); each n-tile of
// P becomes the A fragment of the P V step through 8 shfl.idx; O accumulates in C fragments (D / 8 n-tiles of 8 dims).
// Trade-offs: a fixed D per instantiation; registers bound MT (D 40, MT 2: 80 for Q, 40 for O, 64 for S; D 80 keeps
// MT 1: MT 2 measured 2x slower there, spilling); opt-in only, because it is an emulation of fp32 arithmetic (the
// default, tensor_cores=auto, takes the FP64 form below on sm_90 and the exact fp32 kernels elsewhere).

// (n, h, q0) of this work-group (the portable kernels' ATT_BLOCK_COORDS as a function).
NV_INLINE void att_block_coords(int Sq, int H, const int BQ, int* n, int* h, int* q0) {
  const int nqb = (Sq + BQ - 1) / BQ;
  const int g = get_group_id(0);
  *q0 = (g % nqb) * BQ;
  *h = (g / nqb) % H;
  *n = g / (nqb * H);
}

NV_INLINE float atm_idx(float v, int src) {
  float r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(src));
  return r;
}

// acc += A B, A = (ah, al) big / small fragments, B = (bh0, bh1) / (bl0, bl1); the small terms first
NV_INLINE void atm_mma3(float* acc, const uint* ah, const uint* al, uint bh0, uint bh1, uint bl0, uint bl1) {
  nv_mma_tf32(acc, al[0], al[1], al[2], al[3], bh0, bh1);
  nv_mma_tf32(acc, ah[0], ah[1], ah[2], ah[3], bl0, bl1);
  nv_mma_tf32(acc, ah[0], ah[1], ah[2], ah[3], bh0, bh1);
}

NV_INLINE void atm_split(float x, uint* big, uint* small) {
  *big = nv_tf32_big(x);
  *small = nv_tf32_small(x, *big);
}

// The two arithmetics of SD_ATTN_MMA (MATH): TF = 3xTF32 (big / small TF32 fragments, fp32 accumulators), DP = FP64
// (double fragments, fp64 accumulators; sm_90, nv_mma_f64). Q fragments, their values, O's accumulator type, the
// scores of one staged key block (S = Q K^T into fp32 s[MT][BK / 8][4]), P's A fragments and one P V step.
#define ATM_Q_DECL_TF(MT, D) uint qh[(MT)][((D) / 8)][4], ql[(MT)][((D) / 8)][4];
#define ATM_Q_DECL_DP(MT, D) double qf[(MT)][((D) / 8)][4];
#define ATM_Q_SET_TF(i, kk, c, x) atm_split((x), &qh[i][kk][c], &ql[i][kk][c]);
#define ATM_Q_SET_DP(i, kk, c, x) qf[i][kk][c] = (x);
#define ATM_ACC_T_TF float
#define ATM_ACC_T_DP double
#define ATM_P_DECL_TF(MT) uint ph[(MT)][4], pl[(MT)][4];
#define ATM_P_DECL_DP(MT) double pf[(MT)][4];
#define ATM_P_SET_TF(i, c, x) atm_split((x), &ph[i][c], &pl[i][c]);
#define ATM_P_SET_DP(i, c, x) pf[i][c] = (x);
#define ATM_SCORES_TF(MT, D, BK, KP)                                                                                   \
  float s[(MT)][((BK) / 8)][4];                                                                                        \
  _Pragma("unroll") for (int i = 0; i < (MT); ++i)                                                                     \
    _Pragma("unroll") for (int j = 0; j < ((BK) / 8); ++j) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;   \
  _Pragma("unroll") for (int j = 0; j < ((BK) / 8); ++j) {                                                             \
    _Pragma("unroll") for (int kk = 0; kk < ((D) / 8); ++kk) {                                                         \
      uint bh0, bh1, bl0, bl1;                                                                                         \
      atm_split(Ks[(8 * j + g) * (KP) + 8 * kk + t], &bh0, &bl0);                                                      \
      atm_split(Ks[(8 * j + g) * (KP) + 8 * kk + t + 4], &bh1, &bl1);                                                  \
      _Pragma("unroll") for (int i = 0; i < (MT); ++i) atm_mma3(s[i][j], qh[i][kk], ql[i][kk], bh0, bh1, bl0, bl1);    \
    }                                                                                                                  \
  }
/* each 8-key n-tile summed in doubles, kept as fp32 for the softmax */
#define ATM_SCORES_DP(MT, D, BK, KP)                                                                                   \
  float s[(MT)][((BK) / 8)][4];                                                                                        \
  _Pragma("unroll") for (int j = 0; j < ((BK) / 8); ++j) {                                                             \
    double sd[(MT)][4];                                                                                                \
    _Pragma("unroll") for (int i = 0; i < (MT); ++i) sd[i][0] = sd[i][1] = sd[i][2] = sd[i][3] = 0.0;                 \
    _Pragma("unroll") for (int kk = 0; kk < ((D) / 8); ++kk) {                                                         \
      const double b0 = Ks[(8 * j + g) * (KP) + 8 * kk + t], b1 = Ks[(8 * j + g) * (KP) + 8 * kk + t + 4];            \
      _Pragma("unroll") for (int i = 0; i < (MT); ++i)                                                                 \
        nv_mma_f64(sd[i], qf[i][kk][0], qf[i][kk][1], qf[i][kk][2], qf[i][kk][3], b0, b1);                             \
    }                                                                                                                  \
    _Pragma("unroll") for (int i = 0; i < (MT); ++i)                                                                   \
      _Pragma("unroll") for (int c = 0; c < 4; ++c) s[i][j][c] = (float)sd[i][c];                                      \
  }
#define ATM_PV_TF(MT, VP, j, d)                                                                                        \
  uint bh0, bh1, bl0, bl1;                                                                                             \
  atm_split(Vs[(8 * (j) + t) * (VP) + 8 * (d) + g], &bh0, &bl0);                                                       \
  atm_split(Vs[(8 * (j) + t + 4) * (VP) + 8 * (d) + g], &bh1, &bl1);                                                   \
  _Pragma("unroll") for (int i = 0; i < (MT); ++i) atm_mma3(o[i][d], ph[i], pl[i], bh0, bh1, bl0, bl1);
#define ATM_PV_DP(MT, VP, j, d)                                                                                        \
  const double b0 = Vs[(8 * (j) + t) * (VP) + 8 * (d) + g], b1 = Vs[(8 * (j) + t + 4) * (VP) + 8 * (d) + g];           \
  _Pragma("unroll") for (int i = 0; i < (MT); ++i) nv_mma_f64(o[i][d], pf[i][0], pf[i][1], pf[i][2], pf[i][3], b0, b1);

// NAME: head dim D, MT m-tiles of 16 rows per warp, NW warps, BK keys per staged block, K / V row strides KP / VP
// (chosen so that a warp's fragment reads hit 32 distinct banks: (g * KP + t) and (t * VP + g) distinct mod 32),
// MATH: TF or DP (above).
#define SD_ATTN_MMA(NAME, D, MT, NW, BK, KP, VP, MATH)                                                                         \
__kernel __attribute__((reqd_work_group_size((32 * (NW)), 1, 1))) void NAME(                                                   \
    __global float* O, int oo, __global const float* Q, int qo, __global const float* K, int ko,                               \
    __global const float* V, int vo, int Sq, int Sk, int H, int Dr, float scale, int causal) {                                 \
  __local float Ks[(BK) * (KP)];                                                                                               \
  __local float Vs[(BK) * (VP)];                                                                                               \
  const int lid = get_local_id(0), warp = lid >> 5, lane = lid & 31, g = lane >> 2, t = lane & 3;                              \
  int n, h, q0;                                                                                                                \
  att_block_coords(Sq, H, (16 * (MT) * (NW)), &n, &h, &q0);                                                                    \
  const int HD = H * (D), col0 = h * (D);                                                                                      \
  const float sl2 = scale * ATT_LOG2E;                                                                                         \
  const int r0 = q0 + warp * 16 * (MT);                                                                                        \
                                                                                                                               \
  ATM_Q_DECL_##MATH(MT, D)                                                                                                     \
_Pragma("unroll")                                                                                                              \
  for (int i = 0; i < (MT); ++i) {                                                                                             \
    /* rows past Sq compute a copy of the last one, never stored */                                                            \
    __global const float* qa = Q + qo + (n * Sq + min(r0 + i * 16 + g, Sq - 1)) * HD + col0;                                   \
    __global const float* qc = Q + qo + (n * Sq + min(r0 + i * 16 + g + 8, Sq - 1)) * HD + col0;                               \
_Pragma("unroll")                                                                                                              \
    for (int kk = 0; kk < ((D) / 8); ++kk) {                                                                                   \
      ATM_Q_SET_##MATH(i, kk, 0, qa[8 * kk + t] * sl2)                                                                         \
      ATM_Q_SET_##MATH(i, kk, 1, qc[8 * kk + t] * sl2)                                                                         \
      ATM_Q_SET_##MATH(i, kk, 2, qa[8 * kk + t + 4] * sl2)                                                                     \
      ATM_Q_SET_##MATH(i, kk, 3, qc[8 * kk + t + 4] * sl2)                                                                     \
    }                                                                                                                          \
  }                                                                                                                            \
  ATM_ACC_T_##MATH o[(MT)][((D) / 8)][4];                                                                                      \
  float m[(MT)][2], l[(MT)][2];                                                                                                \
_Pragma("unroll")                                                                                                              \
  for (int i = 0; i < (MT); ++i) {                                                                                             \
    m[i][0] = m[i][1] = -INFINITY;                                                                                             \
    l[i][0] = l[i][1] = 0.0f;                                                                                                  \
_Pragma("unroll")                                                                                                              \
    for (int d = 0; d < ((D) / 8); ++d) o[i][d][0] = o[i][d][1] = o[i][d][2] = o[i][d][3] = 0.0f;                              \
  }                                                                                                                            \
  const int src0 = (lane & ~3) | (t >> 1), src1 = src0 + 2;                                                                    \
  const bool odd = (t & 1) != 0;                                                                                               \
                                                                                                                               \
  for (int kb = 0; kb < Sk; kb += (BK)) {                                                                                      \
    barrier(CLK_LOCAL_MEM_FENCE);  /* the previous block's fragments have been read */                                         \
    for (int e = lid; e < (BK) * ((D) / 4); e += (32 * (NW))) {                                                                \
      const int r = e / ((D) / 4), c4 = e - r * ((D) / 4);                                                                     \
      const bool in = kb + r < Sk;                                                                                             \
      const int src = (n * Sk + (in ? kb + r : 0)) * HD + col0 + c4 * 4;                                                       \
      vstore4(in ? vload4(0, K + ko + src) : (float4)(0.0f), 0, Ks + r * (KP) + c4 * 4);                                       \
      vstore4(in ? vload4(0, V + vo + src) : (float4)(0.0f), 0, Vs + r * (VP) + c4 * 4);                                       \
    }                                                                                                                          \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                                              \
                                                                                                                               \
    ATM_SCORES_##MATH(MT, D, BK, KP)                                                                                           \
    if (kb + (BK) > Sk) {  /* the last, partial block: keys past Sk drop out of the softmax */                                 \
_Pragma("unroll")                                                                                                              \
      for (int j = 0; j < ((BK) / 8); ++j) {                                                                                   \
        const int key = kb + 8 * j + 2 * t;                                                                                    \
_Pragma("unroll")                                                                                                              \
        for (int i = 0; i < (MT); ++i) {                                                                                       \
          if (key >= Sk) s[i][j][0] = s[i][j][2] = -INFINITY;                                                                  \
          if (key + 1 >= Sk) s[i][j][1] = s[i][j][3] = -INFINITY;                                                              \
        }                                                                                                                      \
      }                                                                                                                        \
    }                                                                                                                          \
                                                                                                                               \
    /* online softmax (log2 units) on rows g (elements 0, 1) and g + 8 (elements 2, 3) */                                      \
_Pragma("unroll")                                                                                                              \
    for (int i = 0; i < (MT); ++i) {                                                                                           \
      float mx0 = m[i][0], mx1 = m[i][1];                                                                                      \
_Pragma("unroll")                                                                                                              \
      for (int j = 0; j < ((BK) / 8); ++j) {                                                                                   \
        mx0 = fmax(mx0, fmax(s[i][j][0], s[i][j][1]));                                                                         \
        mx1 = fmax(mx1, fmax(s[i][j][2], s[i][j][3]));                                                                         \
      }                                                                                                                        \
      mx0 = fmax(mx0, nv_shfl_xor(mx0, 1));                                                                                   \
      mx0 = fmax(mx0, nv_shfl_xor(mx0, 2));                                                                                   \
      mx1 = fmax(mx1, nv_shfl_xor(mx1, 1));                                                                                   \
      mx1 = fmax(mx1, nv_shfl_xor(mx1, 2));  /* finite: every block has a key */                                              \
      const float c0 = exp2(m[i][0] - mx0), c1 = exp2(m[i][1] - mx1);  /* 0 on the first block (m = -inf) */                   \
      m[i][0] = mx0;                                                                                                           \
      m[i][1] = mx1;                                                                                                           \
      float sum0 = 0.0f, sum1 = 0.0f;                                                                                          \
_Pragma("unroll")                                                                                                              \
      for (int j = 0; j < ((BK) / 8); ++j) {                                                                                   \
        s[i][j][0] = exp2(s[i][j][0] - mx0);                                                                                   \
        s[i][j][1] = exp2(s[i][j][1] - mx0);                                                                                   \
        s[i][j][2] = exp2(s[i][j][2] - mx1);                                                                                   \
        s[i][j][3] = exp2(s[i][j][3] - mx1);                                                                                   \
        sum0 += s[i][j][0] + s[i][j][1];                                                                                       \
        sum1 += s[i][j][2] + s[i][j][3];                                                                                       \
      }                                                                                                                        \
      l[i][0] = l[i][0] * c0 + sum0;  /* this thread's key columns; the quad is summed once at the end */                      \
      l[i][1] = l[i][1] * c1 + sum1;                                                                                           \
_Pragma("unroll")                                                                                                              \
      for (int d = 0; d < ((D) / 8); ++d) {                                                                                    \
        o[i][d][0] *= c0;                                                                                                      \
        o[i][d][1] *= c0;                                                                                                      \
        o[i][d][2] *= c1;                                                                                                      \
        o[i][d][3] *= c1;                                                                                                      \
      }                                                                                                                        \
    }                                                                                                                          \
                                                                                                                               \
    /* O += P V: n-tile j of P (8 keys) as the A fragment of one k-step */                                                     \
_Pragma("unroll")                                                                                                              \
    for (int j = 0; j < ((BK) / 8); ++j) {                                                                                     \
      ATM_P_DECL_##MATH(MT)                                                                                                    \
_Pragma("unroll")                                                                                                              \
      for (int i = 0; i < (MT); ++i) {  /* A fragment: P[g][t], P[g + 8][t], P[g][t + 4], P[g + 8][t + 4] */                   \
        const float x0 = atm_idx(s[i][j][0], src0), x1 = atm_idx(s[i][j][1], src0);                                            \
        const float z0 = atm_idx(s[i][j][2], src0), z1 = atm_idx(s[i][j][3], src0);                                            \
        const float y0 = atm_idx(s[i][j][0], src1), y1 = atm_idx(s[i][j][1], src1);                                            \
        const float w0 = atm_idx(s[i][j][2], src1), w1 = atm_idx(s[i][j][3], src1);                                            \
        ATM_P_SET_##MATH(i, 0, odd ? x1 : x0)                                                                                  \
        ATM_P_SET_##MATH(i, 1, odd ? z1 : z0)                                                                                  \
        ATM_P_SET_##MATH(i, 2, odd ? y1 : y0)                                                                                  \
        ATM_P_SET_##MATH(i, 3, odd ? w1 : w0)                                                                                  \
      }                                                                                                                        \
_Pragma("unroll")                                                                                                              \
      for (int d = 0; d < ((D) / 8); ++d) {                                                                                    \
        ATM_PV_##MATH(MT, VP, j, d)                                                                                            \
      }                                                                                                                        \
    }                                                                                                                          \
  }                                                                                                                            \
                                                                                                                               \
_Pragma("unroll")                                                                                                              \
  for (int i = 0; i < (MT); ++i) {                                                                                             \
    float l0 = l[i][0], l1 = l[i][1];                                                                                          \
    l0 += nv_shfl_xor(l0, 1);                                                                                                 \
    l0 += nv_shfl_xor(l0, 2);                                                                                                 \
    l1 += nv_shfl_xor(l1, 1);                                                                                                 \
    l1 += nv_shfl_xor(l1, 2);                                                                                                 \
    const float f0 = 1.0f / l0, f1 = 1.0f / l1;                                                                                \
    const int ra = r0 + i * 16 + g, rc = ra + 8;                                                                               \
_Pragma("unroll")                                                                                                              \
    for (int d = 0; d < ((D) / 8); ++d) {                                                                                      \
      if (ra < Sq) vstore2((float2)((float)o[i][d][0] * f0, (float)o[i][d][1] * f0), 0, O + oo + (n * Sq + ra) * HD + col0 + 8 * d + 2 * t); \
      if (rc < Sq) vstore2((float2)((float)o[i][d][2] * f1, (float)o[i][d][3] * f1), 0, O + oo + (n * Sq + rc) * HD + col0 + 8 * d + 2 * t); \
    }                                                                                                                          \
  }                                                                                                                            \
}

SD_ATTN_MMA(attn_flash_m40, 40, 2, 4, 64, 44, 40, TF)  // 64x64 self-attention: BQ 128, NT 128
SD_ATTN_MMA(attn_flash_m80, 80, 1, 4, 64, 84, 88, TF)  // 32x32 self-attention: BQ 64, NT 128
// FP64 tensor-core flash attention (sm_90 only: built where SDGPU_NV_SM90 is; the host picks it with the delegate
// option tensor_cores=fp64 or auto, the default; flash, no causal mask): attn_flash_f40 / attn_flash_f80, SD_ATTN_MMA
// with MATH DP: mma.sync m16n8k8 .f64 for S = Q K^T and O += P V: Q (scaled in fp32 as the fp32 kernels do), K, V and
// P convert to double exactly, so every product is exact; S is summed in doubles per 8-key n-tile and rounded to fp32
// once for the fp32 online softmax; O accumulates in doubles and is rounded once at the end. The error is therefore
// at or below the fp32 kernels' (H200, dmma_lab.py --attn: 2.2e-7 of the output's range at 4096 x 4096 x 40 vs 1.6e-6
// for r40, 1.1e-7 at 1024 x 1024 x 80 vs 9e-7 for h80). Speed there: b1 / b2 at head dim 40 0.538 / 1.088 ms vs r40
// 0.661 / 1.308 (MT 2, 4 warps); head dim 80 b2 0.144 vs r80 0.222 (MT 1, 8 warps; at b1 h80 stays, 0.119 vs 0.140).
// Registers bound the shape: Q and O fragments are doubles (MT 2 at D 40: 80 + 80 registers, S 64).
#if defined(SDGPU_NV_SM90) && SDGPU_NV_SM90
SD_ATTN_MMA(attn_flash_f40, 40, 2, 4, 64, 44, 40, DP)  // 64x64 self-attention: BQ 128, NT 128
SD_ATTN_MMA(attn_flash_f80, 80, 1, 8, 64, 84, 88, DP)  // 32x32 self-attention: BQ 128, NT 256
#endif  // SDGPU_NV_SM90
#endif  // SDGPU_NV_PTX
