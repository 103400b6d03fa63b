// Lab: a 3xTF32 tensor-core GEMM with a multi-stage cp.async pipeline (NVIDIA OpenCL only, inline PTX; mma_lab.py
// --async). C[M, N] = A[M, K] B[K, N], row-major fp32, fp32 accumulation, products big*big + big*small + small*big
// of the operands' truncated TF32 halves (SPLIT = 1: one TF32 product, the speed reference).
// Differences from mma_gemm.cl (whose best ran at 35-41 TFLOP/s with one TF32 product as fast as three, i.e. bound
// by its data path): global -> local copies by cp.async into STAGES ring slots (no register staging, no store
// phase), one barrier per BK step instead of two, the next STAGES - 1 steps in flight while the MMAs run.
// Local layouts as in mma_gemm.cl (A [BM][BK + 4], B [BK][BN + 8]: conflict-free fragment reads, 16-byte rows).
// Requires K % 4 == 0 and N % 4 == 0 (16-byte copies); partial tiles are zero-filled (cp.async src-size 0).
// SPLIT = 0 (dmma_lab.py): the FP64 tensor cores instead (mma.sync m16n8k8 .f64, sm_90): operands converted to double
// per fragment read (exact), fp64 accumulators, one rounding to fp32 at the end.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
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
#ifndef STAGES
#define STAGES 2
#endif
#define BK 16
#define NWARP ((BM / WM) * (BN / WN))
#define NT (32 * NWARP)
#define AP (BK + 4)
#define BP (BN + 8)
#define FM (WM / 16)
#define FN (WN / 8)
#define A_STAGE (BM * AP)
#define B_STAGE (BK * BP)
#if STAGES == 2
#define MGA_WAIT "cp.async.wait_group 0;"
#elif STAGES == 3
#define MGA_WAIT "cp.async.wait_group 1;"
#elif STAGES == 4
#define MGA_WAIT "cp.async.wait_group 2;"
#else
#error "STAGES must be 2, 3 or 4"
#endif

#if SPLIT == 0
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t;
inline void mga_dmma(double* d, double a0, double a1, double a2, double a3, double b0, double b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
               : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1));
}
#else
typedef float acc_t;
#endif

inline uint mga_big(float x) { return as_uint(x) & 0xffffe000u; }
inline uint mga_small(float x, uint big) { return as_uint(x - as_float(big)); }

inline void mga_mma(float* d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

inline void mga_copy16(__local float* dst, __global const float* src, int valid) {
  const uint d = (uint)(size_t)dst;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// the copies of one BK step (k0) into ring slot `slot`
inline void mga_issue(__local float* lds, int slot, int k0, int lid, int m0, int n0, __global const float* A,
                      __global const float* B, int M, int N, int K) {
  __local float* As = lds + slot * (A_STAGE + B_STAGE);
  __local float* Bs = As + A_STAGE;
#pragma unroll
  for (int p = 0; p < BM * BK / 4 / NT; ++p) {
    const int e = lid + p * NT, r = e / (BK / 4), c = (e % (BK / 4)) * 4;
    const int m = m0 + r, k = k0 + c, ok = m < M && k < K;
    mga_copy16(As + r * AP + c, ok ? A + (size_t)m * K + k : A, ok);
  }
#pragma unroll
  for (int p = 0; p < BK * BN / 4 / NT; ++p) {
    const int e = lid + p * NT, r = e / (BN / 4), c = (e % (BN / 4)) * 4;
    const int k = k0 + r, n = n0 + c, ok = k < K && n < N;
    mga_copy16(Bs + r * BP + c, ok ? B + (size_t)k * N + n : B, ok);
  }
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void gemm_mma_async(__global float* C,
                                                                            __global const float* A,
                                                                            __global const float* B, int M, int N,
                                                                            int K) {
  __local float lds[STAGES * (A_STAGE + B_STAGE)] __attribute__((aligned(16)));  // cp.async writes 16 bytes
  const int lid = get_local_id(0), warp = lid >> 5, lane = lid & 31, g = lane >> 2, t = lane & 3;
  const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
  const int m0 = get_group_id(1) * BM, n0 = get_group_id(0) * BN;
  const int nk = (K + BK - 1) / BK;
  acc_t acc[FM][FN][4];
#pragma unroll
  for (int i = 0; i < FM; ++i)
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.0f;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < nk) mga_issue(lds, s, s * BK, lid, m0, n0, A, B, M, N, K);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  for (int kt = 0; kt < nk; ++kt) {
    asm volatile(MGA_WAIT ::: "memory");  // at most STAGES - 2 groups pending
    barrier(CLK_LOCAL_MEM_FENCE);  // step kt landed for every work-item; slot (kt - 1) % STAGES is free again
    const int nx = kt + STAGES - 1;
    if (nx < nk) mga_issue(lds, nx % STAGES, nx * BK, lid, m0, n0, A, B, M, N, K);
    asm volatile("cp.async.commit_group;" ::: "memory");
    __local const float* As = lds + (kt % STAGES) * (A_STAGE + B_STAGE);
    __local const float* Bs = As + A_STAGE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
#if SPLIT == 0
      double bd[FN][2];
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        bd[j][0] = (double)Bs[(kk + t) * BP + wn0 + j * 8 + g];
        bd[j][1] = (double)Bs[(kk + t + 4) * BP + wn0 + j * 8 + g];
      }
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        const int r = wm0 + i * 16 + g;
        const double a0 = (double)As[r * AP + kk + t], a1 = (double)As[(r + 8) * AP + kk + t];
        const double a2 = (double)As[r * AP + kk + t + 4], a3 = (double)As[(r + 8) * AP + kk + t + 4];
#pragma unroll
        for (int j = 0; j < FN; ++j) mga_dmma(acc[i][j], a0, a1, a2, a3, bd[j][0], bd[j][1]);
      }
#else
      uint bb[FN][2];
#if SPLIT == 3
      uint bs[FN][2];
#endif
#pragma unroll
      for (int j = 0; j < FN; ++j) {
        const float b0 = Bs[(kk + t) * BP + wn0 + j * 8 + g], b1 = Bs[(kk + t + 4) * BP + wn0 + j * 8 + g];
        bb[j][0] = mga_big(b0);
        bb[j][1] = mga_big(b1);
#if SPLIT == 3
        bs[j][0] = mga_small(b0, bb[j][0]);
        bs[j][1] = mga_small(b1, bb[j][1]);
#endif
      }
#pragma unroll
      for (int i = 0; i < FM; ++i) {
        const int r = wm0 + i * 16 + g;
        const float a0 = As[r * AP + kk + t], a1 = As[(r + 8) * AP + kk + t];
        const float a2 = As[r * AP + kk + t + 4], a3 = As[(r + 8) * AP + kk + t + 4];
        const uint h0 = mga_big(a0), h1 = mga_big(a1), h2 = mga_big(a2), h3 = mga_big(a3);
#if SPLIT == 3
        const uint l0 = mga_small(a0, h0), l1 = mga_small(a1, h1), l2 = mga_small(a2, h2), l3 = mga_small(a3, h3);
#endif
#pragma unroll
        for (int j = 0; j < FN; ++j) {
#if SPLIT == 3
          mga_mma(acc[i][j], l0, l1, l2, l3, bb[j][0], bb[j][1]);
          mga_mma(acc[i][j], h0, h1, h2, h3, bs[j][0], bs[j][1]);
#endif
          mga_mma(acc[i][j], h0, h1, h2, h3, bb[j][0], bb[j][1]);
        }
      }
#endif
    }
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
#pragma unroll
  for (int i = 0; i < FM; ++i) {
#pragma unroll
    for (int j = 0; j < FN; ++j) {
      const int r = m0 + wm0 + i * 16 + g, c = n0 + wn0 + j * 8 + 2 * t;
      if (c + 1 < N) {
        if (r < M) vstore2((float2)((float)acc[i][j][0], (float)acc[i][j][1]), 0, C + (size_t)r * N + c);
        if (r + 8 < M) vstore2((float2)((float)acc[i][j][2], (float)acc[i][j][3]), 0, C + (size_t)(r + 8) * N + c);
      }
    }
  }
}
