// Lab: flash attention on tensor cores through inline PTX mma.sync m16n8k8 TF32 (NVIDIA OpenCL only;
// mma_attn_lab.py), head dim D = 40 (SD1.5's 64x64 self-attention) or 80 (-DD=80, the 32x32 level; --d80). SPLIT = 3: every product is 3xTF32 (x = big +
// small, big = x with its 13 low mantissa bits cleared; big*big + big*small + small*big, fp32 accumulation: the
// fp32-accurate emulation mma_lab.py measured at 1.2e-7 on one tile); SPLIT = 1: one TF32 product (~1e-4, speed
// reference only).
//
// Work-group: NW warps, each owning MT m-tiles of 16 query rows (BQ = 16 * MT * NW rows per work-group, one head of
// one batch). Q (pre-scaled by scale * log2 e) lives in registers as A fragments (big and small). Per block of BKK
// keys, K and V are staged in local memory (row strides KP / VP: conflict-free fragment reads); S = Q K^T comes out
// in C fragments (thread: rows g and g + 8, key columns 2t, 2t + 1 of each 8-key n-tile), the online softmax runs on
// them (row max / sum over the 4 threads of a quad by shfl.bfly), and each n-tile of P becomes the A fragment of the
// P V step by 8 shfl.idx (P[g][t], P[g][t + 4], rows g and g + 8). O accumulates in C fragments (D / 8 n-tiles of 8
// dims). Limits of this lab: Sq % BQ == 0, Sk % BKK == 0, no mask.
#ifndef MT
#define MT 2
#endif
#ifndef NW
#define NW 4
#endif
#ifndef BKK
#define BKK 64
#endif
#ifndef SPLIT
#define SPLIT 3
#endif
#ifndef ROUND
#define ROUND 0  // 1: big = x rounded to 11 significant bits (+0x1000 before the mask) instead of truncated
#endif
#ifndef PRESPLIT
#define PRESPLIT 0  // 1: K and V split once when staged (local memory holds big and small planes), not per fragment read
#endif
#ifndef D
#define D 40
#endif
#define DK (D / 8)
#define NT (32 * NW)
#define BQ (16 * MT * NW)
#define NJ (BKK / 8)
#if D == 80
#define KP 84  // (g * 84 + t) % 32 distinct over a warp's B-fragment reads of K
#define VP 88  // (t * 88 + g) % 32 likewise for V
#else
#define KP 44  // (g * 44 + t) % 32 distinct over a warp's B-fragment reads of K
#define VP 40  // (t * 40 + g) % 32 likewise for V
#endif

inline uint ma_big(float x) { return (as_uint(x) + (ROUND ? 0x1000u : 0u)) & 0xffffe000u; }
inline uint ma_small(float x) { return as_uint(x - as_float(ma_big(x))); }

inline float ma_idx(float v, int src) {
  float r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(src));
  return r;
}

inline float ma_xor(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}

inline void ma_mma(float* d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc += A B with A = (ah, al) big/small fragments, B = (bh0, bh1) / (bl0, bl1)
inline void ma_mma3(float* acc, const uint* ah, const uint* al, uint bh0, uint bh1, uint bl0, uint bl1) {
#if SPLIT == 3
  ma_mma(acc, al[0], al[1], al[2], al[3], bh0, bh1);
  ma_mma(acc, ah[0], ah[1], ah[2], ah[3], bl0, bl1);
#endif
  ma_mma(acc, ah[0], ah[1], ah[2], ah[3], bh0, bh1);
}

// O, Q, K, V: [N, S, H * D] row-major (the delegate's layout); global = (Sq / BQ) * H * N * NT, local = NT.
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void attn_mma(__global float* O, __global const float* Q,
                                                                       __global const float* K,
                                                                       __global const float* V, int Sq, int Sk,
                                                                       int H, float scale) {
#if PRESPLIT
  __local uint Ks[BKK * KP], Kl[BKK * KP];
  __local uint Vs[BKK * VP], Vl[BKK * VP];
#else
  __local float Ks[BKK * KP];
  __local float Vs[BKK * VP];
#endif
  const int lid = get_local_id(0), warp = lid >> 5, lane = lid & 31, g = lane >> 2, t = lane & 3;
  const int qblocks = Sq / BQ, grp = get_group_id(0);
  const int qb = grp % qblocks, h = (grp / qblocks) % H, n = grp / (qblocks * H);
  const int HD = H * D, col0 = h * D;
  const float sl2 = scale * 1.4426950408889634f;
  const int r0 = qb * BQ + warp * 16 * MT;

  uint qh[MT][DK][4], ql[MT][DK][4];
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    __global const float* qa = Q + (size_t)(n * Sq + r0 + i * 16 + g) * HD + col0;
    __global const float* qc = qa + 8 * HD;
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      const float a[4] = {qa[8 * kk + t] * sl2, qc[8 * kk + t] * sl2, qa[8 * kk + t + 4] * sl2,
                          qc[8 * kk + t + 4] * sl2};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        qh[i][kk][c] = ma_big(a[c]);
        ql[i][kk][c] = ma_small(a[c]);
      }
    }
  }
  float o[MT][DK][4], m[MT][2], l[MT][2];
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    m[i][0] = m[i][1] = -INFINITY;
    l[i][0] = l[i][1] = 0.0f;
#pragma unroll
    for (int d = 0; d < DK; ++d) o[i][d][0] = o[i][d][1] = o[i][d][2] = o[i][d][3] = 0.0f;
  }
  const int src0 = (lane & ~3) | (t >> 1), src1 = src0 + 2;
  const bool odd = (t & 1) != 0;

  for (int kb = 0; kb < Sk; kb += BKK) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous block's fragments are read
    for (int e = lid; e < BKK * (D / 4); e += NT) {
      const int r = e / (D / 4), c4 = e - r * (D / 4);
      const size_t src = (size_t)(n * Sk + kb + r) * HD + col0 + c4 * 4;
#if PRESPLIT
      const float4 kv = vload4(0, K + src), vv = vload4(0, V + src);
      const uint4 kh = (uint4)(ma_big(kv.x), ma_big(kv.y), ma_big(kv.z), ma_big(kv.w));
      const uint4 vh = (uint4)(ma_big(vv.x), ma_big(vv.y), ma_big(vv.z), ma_big(vv.w));
      vstore4(kh, 0, Ks + r * KP + c4 * 4);
      vstore4(as_uint4(kv - as_float4(kh)), 0, Kl + r * KP + c4 * 4);
      vstore4(vh, 0, Vs + r * VP + c4 * 4);
      vstore4(as_uint4(vv - as_float4(vh)), 0, Vl + r * VP + c4 * 4);
#else
      vstore4(vload4(0, K + src), 0, Ks + r * KP + c4 * 4);
      vstore4(vload4(0, V + src), 0, Vs + r * VP + c4 * 4);
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    float s[MT][NJ][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
#pragma unroll
      for (int kk = 0; kk < DK; ++kk) {
#if PRESPLIT
        const int ka = (8 * j + g) * KP + 8 * kk + t;
        const uint bh0 = Ks[ka], bh1 = Ks[ka + 4], bl0 = Kl[ka], bl1 = Kl[ka + 4];
#else
        const float b0 = Ks[(8 * j + g) * KP + 8 * kk + t], b1 = Ks[(8 * j + g) * KP + 8 * kk + t + 4];
        const uint bh0 = ma_big(b0), bh1 = ma_big(b1), bl0 = ma_small(b0), bl1 = ma_small(b1);
#endif
#pragma unroll
        for (int i = 0; i < MT; ++i) ma_mma3(s[i][j], qh[i][kk], ql[i][kk], bh0, bh1, bl0, bl1);
      }
    }

    // online softmax (log2 domain): rows g (elements 0, 1) and g + 8 (elements 2, 3)
#pragma unroll
    for (int i = 0; i < MT; ++i) {
      float mx0 = m[i][0], mx1 = m[i][1];
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        mx0 = fmax(mx0, fmax(s[i][j][0], s[i][j][1]));
        mx1 = fmax(mx1, fmax(s[i][j][2], s[i][j][3]));
      }
      mx0 = fmax(mx0, ma_xor(mx0, 1));
      mx0 = fmax(mx0, ma_xor(mx0, 2));
      mx1 = fmax(mx1, ma_xor(mx1, 1));
      mx1 = fmax(mx1, ma_xor(mx1, 2));
      const float c0 = exp2(m[i][0] - mx0), c1 = exp2(m[i][1] - mx1);  // 0 on the first block (m = -inf)
      m[i][0] = mx0;
      m[i][1] = mx1;
      float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        s[i][j][0] = exp2(s[i][j][0] - mx0);
        s[i][j][1] = exp2(s[i][j][1] - mx0);
        s[i][j][2] = exp2(s[i][j][2] - mx1);
        s[i][j][3] = exp2(s[i][j][3] - mx1);
        sum0 += s[i][j][0] + s[i][j][1];
        sum1 += s[i][j][2] + s[i][j][3];
      }
      l[i][0] = l[i][0] * c0 + sum0;  // this thread's columns only; the quad is summed at the end
      l[i][1] = l[i][1] * c1 + sum1;
#pragma unroll
      for (int d = 0; d < DK; ++d) {
        o[i][d][0] *= c0;
        o[i][d][1] *= c0;
        o[i][d][2] *= c1;
        o[i][d][3] *= c1;
      }
    }

    // O += P V, one 8-key n-tile of P (as an A fragment) per k-step
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      uint ph[MT][4], pl[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const float x0 = ma_idx(s[i][j][0], src0), x1 = ma_idx(s[i][j][1], src0);
        const float y0 = ma_idx(s[i][j][0], src1), y1 = ma_idx(s[i][j][1], src1);
        const float z0 = ma_idx(s[i][j][2], src0), z1 = ma_idx(s[i][j][3], src0);
        const float w0 = ma_idx(s[i][j][2], src1), w1 = ma_idx(s[i][j][3], src1);
        const float a[4] = {odd ? x1 : x0, odd ? z1 : z0, odd ? y1 : y0, odd ? w1 : w0};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          ph[i][c] = ma_big(a[c]);
          pl[i][c] = ma_small(a[c]);
        }
      }
#pragma unroll
      for (int d = 0; d < DK; ++d) {
#if PRESPLIT
        const int va = (8 * j + t) * VP + 8 * d + g;
        const uint bh0 = Vs[va], bh1 = Vs[va + 4 * VP], bl0 = Vl[va], bl1 = Vl[va + 4 * VP];
#else
        const float b0 = Vs[(8 * j + t) * VP + 8 * d + g], b1 = Vs[(8 * j + t + 4) * VP + 8 * d + g];
        const uint bh0 = ma_big(b0), bh1 = ma_big(b1), bl0 = ma_small(b0), bl1 = ma_small(b1);
#endif
#pragma unroll
        for (int i = 0; i < MT; ++i) ma_mma3(o[i][d], ph[i], pl[i], bh0, bh1, bl0, bl1);
      }
    }
  }

#pragma unroll
  for (int i = 0; i < MT; ++i) {
    float l0 = l[i][0], l1 = l[i][1];
    l0 += ma_xor(l0, 1);
    l0 += ma_xor(l0, 2);
    l1 += ma_xor(l1, 1);
    l1 += ma_xor(l1, 2);
    const float f0 = 1.0f / l0, f1 = 1.0f / l1;
    __global float* oa = O + (size_t)(n * Sq + r0 + i * 16 + g) * HD + col0 + 2 * t;
    __global float* oc = oa + 8 * HD;
#pragma unroll
    for (int d = 0; d < DK; ++d) {
      vstore2((float2)(o[i][d][0] * f0, o[i][d][1] * f0), 0, oa + 8 * d);
      vstore2((float2)(o[i][d][2] * f1, o[i][d][3] * f1), 0, oc + 8 * d);
    }
  }
}
