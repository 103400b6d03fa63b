// Lab: a 3xTF32 tensor-core GEMM through inline PTX mma.sync (NVIDIA OpenCL only; mma_lab.py). C[M, N] = A[M, K] B[K, N],
// row-major fp32, fp32 accumulation; each operand value x is split into big = tf32(x) and small = tf32(x - big) and
// the product is big*big + big*small + small*big (SPLIT = 3; SPLIT = 1: one TF32 product). Work-group: BM x BN
// tile, (BM / WM) x (BN / WN) warps, each a WM x WN warp tile of m16n8k8 fragments (layouts: ptx_probe.cl); K in
// steps of 16 staged in local memory (A [BM][16 + 4], B [16][BN + 8]: conflict-free fragment reads), the next
// step's global loads issued into registers before the current step's MMAs.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 64
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 32
#endif
#ifndef SPLIT
#define SPLIT 3
#endif
#ifndef BK
#define BK 16
#endif
#ifndef PRESPLIT
#define PRESPLIT 0  // 1: values split once when staged (local memory holds (big, small) pairs), not per fragment read
#endif
#define NWARP ((BM / WM) * (BN / WN))
#define NT (32 * NWARP)
#define AP (BK + 4)
#define BP (BN + 8)
#define FM (WM / 16)
#define FN (WN / 8)
#define ALD (BM * BK / 4 / NT)  // float4 of A per work-item per step
#define BLD (BK * BN / 4 / NT)

inline uint mg_tf32(float x) {
  uint r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

#ifndef TRUNC
#define TRUNC 0  // 1: big = x with its 13 low mantissa bits cleared (one AND), small = x - big passed as is (the MMA
                 // reads the top 19 bits of each operand), instead of cvt.rna.tf32 (an integer sequence on sm_90)
#endif
inline uint mg_big(float x) {
#if TRUNC
  return as_uint(x) & 0xffffe000u;
#else
  return mg_tf32(x);
#endif
}
inline uint mg_small(float x, uint big) {
#if TRUNC
  return as_uint(x - as_float(big));
#else
  return mg_tf32(x - as_float(big));
#endif
}

inline void mg_mma(float* d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void gemm_mma(__global float* C, __global const float* A,
                                                                      __global const float* B, int M, int N, int K) {
#if PRESPLIT
  __local uint2 As[BM * AP];
  __local uint2 Bs[BK * BP];
#else
  __local float As[BM * AP];
  __local float Bs[BK * BP];
#endif
  const int lid = get_local_id(0), warp = lid >> 5, lane = lid & 31, g = lane >> 2, t = lane & 3;
  const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
  const int m0 = get_group_id(1) * BM, n0 = get_group_id(0) * BN;
  float acc[FM][FN][4];
  for (int i = 0; i < FM; ++i)
    for (int j = 0; j < FN; ++j)
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
  float4 ra[ALD], rb[BLD];
#define MG_FETCH(k0)                                                                        \
  for (int p = 0; p < ALD; ++p) {                                                           \
    const int e = lid + p * NT, r = e / (BK / 4), c = (e % (BK / 4)) * 4;                   \
    const int m = m0 + r, k = (k0) + c;                                                     \
    ra[p] = m < M && k + 3 < K ? vload4(0, A + (size_t)m * K + k) : (float4)(0.0f);         \
  }                                                                                         \
  for (int p = 0; p < BLD; ++p) {                                                           \
    const int e = lid + p * NT, r = e / (BN / 4), c = (e % (BN / 4)) * 4;                   \
    const int k = (k0) + r, n = n0 + c;                                                     \
    rb[p] = k < K && n + 3 < N ? vload4(0, B + (size_t)k * N + n) : (float4)(0.0f);         \
  }
  MG_FETCH(0)
  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int p = 0; p < ALD; ++p) {
      const int e = lid + p * NT, r = e / (BK / 4), c = (e % (BK / 4)) * 4;
#if PRESPLIT
      const float v[4] = {ra[p].x, ra[p].y, ra[p].z, ra[p].w};
      for (int q = 0; q < 4; ++q) {
        const uint h = mg_big(v[q]);
        As[r * AP + c + q] = (uint2)(h, mg_small(v[q], h));
      }
#else
      vstore4(ra[p], 0, As + r * AP + c);
#endif
    }
    for (int p = 0; p < BLD; ++p) {
      const int e = lid + p * NT, r = e / (BN / 4), c = (e % (BN / 4)) * 4;
#if PRESPLIT
      const float v[4] = {rb[p].x, rb[p].y, rb[p].z, rb[p].w};
      for (int q = 0; q < 4; ++q) {
        const uint h = mg_big(v[q]);
        Bs[r * BP + c + q] = (uint2)(h, mg_small(v[q], h));
      }
#else
      vstore4(rb[p], 0, Bs + r * BP + c);
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (k0 + BK < K) {
      MG_FETCH(k0 + BK)
    }
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      uint bb[FN][2], bs[FN][2];
#pragma unroll
      for (int j = 0; j < FN; ++j) {
#if PRESPLIT
        const uint2 b0 = Bs[(kk + t) * BP + wn0 + j * 8 + g], b1 = Bs[(kk + t + 4) * BP + wn0 + j * 8 + g];
        bb[j][0] = b0.x;
        bb[j][1] = b1.x;
        bs[j][0] = b0.y;
        bs[j][1] = b1.y;
#else
        const float b0 = Bs[(kk + t) * BP + wn0 + j * 8 + g], b1 = Bs[(kk + t + 4) * BP + wn0 + j * 8 + g];
        bb[j][0] = mg_big(b0);
        bb[j][1] = mg_big(b1);
        bs[j][0] = mg_small(b0, bb[j][0]);
        bs[j][1] = mg_small(b1, bb[j][1]);
#endif
      }
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        const int r = wm0 + i * 16 + g;
#if PRESPLIT
        const uint2 a0 = As[r * AP + kk + t], a1 = As[(r + 8) * AP + kk + t];
        const uint2 a2 = As[r * AP + kk + t + 4], a3 = As[(r + 8) * AP + kk + t + 4];
        const uint h0 = a0.x, h1 = a1.x, h2 = a2.x, h3 = a3.x;
        const uint l0 = a0.y, l1 = a1.y, l2 = a2.y, l3 = a3.y;
#else
        const float a0 = As[r * AP + kk + t], a1 = As[(r + 8) * AP + kk + t];
        const float a2 = As[r * AP + kk + t + 4], a3 = As[(r + 8) * AP + kk + t + 4];
        const uint h0 = mg_big(a0), h1 = mg_big(a1), h2 = mg_big(a2), h3 = mg_big(a3);
#if SPLIT == 3
        const uint l0 = mg_small(a0, h0), l1 = mg_small(a1, h1), l2 = mg_small(a2, h2), l3 = mg_small(a3, h3);
#endif
#endif
#pragma unroll
        for (int j = 0; j < FN; ++j) {
#if SPLIT == 3
          mg_mma(acc[i][j], l0, l1, l2, l3, bb[j][0], bb[j][1]);
          mg_mma(acc[i][j], h0, h1, h2, h3, bs[j][0], bs[j][1]);
#endif
          mg_mma(acc[i][j], h0, h1, h2, h3, bb[j][0], bb[j][1]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int i = 0; i < FM; ++i) {
    for (int j = 0; j < FN; ++j) {
      const int r = m0 + wm0 + i * 16 + g, c = n0 + wn0 + j * 8 + 2 * t;
      if (c + 1 < N) {
        if (r < M) vstore2((float2)(acc[i][j][0], acc[i][j][1]), 0, C + (size_t)r * N + c);
        if (r + 8 < M) vstore2((float2)(acc[i][j][2], acc[i][j][3]), 0, C + (size_t)(r + 8) * N + c);
      }
    }
  }
}
