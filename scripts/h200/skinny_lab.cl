// Candidate skinny GEMMs for the Winograd GEMM of small maps (scripts/h200/skinny_lab.py compiles this file once
// per configuration with -D options and times it next to the library's gemm_t16x64 on the same data).
//
// C[bz][m][n] = sum_k A[bz][m][k] * B[bz][k][n], B tile-major as the library uploads U for gemm_t16x64:
// [batch][ceil(N/64)][K][64]. M <= RM rows per work-group row tile (the Winograd GEMM of a 16x16 map at F4 or an
// 8x8 map at F2 has 16 tiles at batch 1, 32 at batch 2).
//
// gemm_sv: no barrier in the main loop. Work-item (kl, c) owns CPT consecutive columns of the work-group's CW
// columns and the k of lane kl: k = kl*KPT .. kl*KPT + KPT - 1, then + KL*KPT, ...; it reads its B rows as
// float4s straight from global memory (each k-row of a 64-wide slab is 256 contiguous bytes) and A as float4
// along k, the same address for every work-item of a k-lane (an L1 broadcast; AL = 1 stages A in local memory
// in ACH-wide chunks instead). Per A float4: 4 * CPT FMAs (the library kernel: 4 per local read). PF = 1: the
// next step's B rows are loaded before this step's FMAs. The KL lanes are summed by a tree in local memory.
// Needs K % 4 == 0, N % 4 == 0, k_split % KPT == 0.
// Experiment switches: RSPLIT > 1 shares a column's RM rows among RSPLIT work-items (RM / RSPLIT accumulator rows
// each; the same B addresses, merged by the coalescer); BL = 1 reads B re-laid out as [K / KBR][batch*ceil(N/64)]
// [KBR][64] (KBR = KL * KPT: one step of all work-groups reads adjacent blocks; sbb = the slab count then);
// NOLOAD = 1 replaces the B loads by arithmetic and NOMATH = 1 drops the FMAs (results meaningless: they time
// each half of the kernel alone).
#ifndef CW
#define CW 64
#endif
#ifndef CPT
#define CPT 4
#endif
#ifndef KL
#define KL 8
#endif
#ifndef KPT
#define KPT 4
#endif
#ifndef RM
#define RM 16
#endif
#ifndef AL
#define AL 0
#endif
#ifndef ACH
#define ACH 256
#endif
#ifndef PF
#define PF 1
#endif
#ifndef BL
#define BL 0
#endif
#ifndef RSPLIT
#define RSPLIT 1
#endif
#ifndef NOLOAD
#define NOLOAD 0
#endif
#ifndef NOMATH
#define NOMATH 0
#endif
#define NC (CW / CPT)   // work-items along the columns
#define RT (RM / RSPLIT)  // rows per work-item (RSPLIT work-items share a column's rows; same B loads)
#define NTH (NC * RSPLIT * KL)  // work-group size
#define V4 (CPT / 4)    // float4 per B row per work-item

#if NOLOAD
#define B_LOAD(v, k) ((float4)((float)(k) * 1e-3f + (float)(v)))
#else
#define B_LOAD(v, k) vload4(v, bp + B_ROW(k))
#endif
#if AL
#define A_AT(r, k) vload4(0, as + (rh * RT + (r)) * (ACH + 4) + (k) - kc)
#else
#define A_AT(r, k) vload4(0, ap + arow[r] + (k))
#endif

__kernel __attribute__((reqd_work_group_size(NTH, 1, 1))) void gemm_sv(
    __global float* C, int scb, int scs, int scm, __global const float* restrict A, int sab, int sam,
    __global const float* restrict B, int sbb, int M, int N, int K, int splits, int k_split) {
#if AL
  __local float as[RM * (ACH + 4)];
#endif
#if KL > 1
  __local float4 red[(KL / 2) * RM * NC * V4];
#endif
  const int lid = get_local_id(0), c = lid % NC, rh = (lid / NC) % RSPLIT, kl = lid / (NC * RSPLIT);
  const int n0 = get_group_id(0) * CW, m0 = get_group_id(1) * RM;
  const int z = get_group_id(2), bz = z / splits, sz = z - bz * splits;
  const int kbeg = sz * k_split, kend = min(K, kbeg + k_split);
  const int n = n0 + CPT * c;
#if BL
  // [K / KBR][nslab][KBR][64], KBR = KL * KPT: one step of every work-group reads one contiguous block, and the
  // blocks of one step of all work-groups are adjacent (sbb = nslab here)
#define KBR (KL * KPT)
  const int slab_id = bz * ((N + 63) / 64) + n0 / 64;
  __global const float* bp = B + slab_id * KBR * 64 + (n0 % 64) + CPT * c;
#define B_ROW(k) (((k) / KBR) * sbb * KBR * 64 + ((k) % KBR) * 64)
#else
  __global const float* bp = B + bz * sbb + (n0 / 64) * K * 64 + (n0 % 64) + CPT * c;
#define B_ROW(k) ((k) * 64)
#endif
  __global const float* ap = A + bz * sab;
  int arow[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r) arow[r] = min(m0 + rh * RT + r, M - 1) * sam;
  float4 acc[RT * V4];
#pragma unroll
  for (int e = 0; e < RT * V4; ++e) acc[e] = (float4)(0.0f);
#if AL
  for (int kc = kbeg; kc < kend; kc += ACH) {
    const int kce = min(kend, kc + ACH);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < RM * (ACH / 4); e += NTH) {
      const int r = e / (ACH / 4), k4 = e - r * (ACH / 4), k = kc + 4 * k4;
      vstore4(k < kce ? vload4(0, ap + min(m0 + r, M - 1) * sam + k) : (float4)(0.0f), 0, as + r * (ACH + 4) + 4 * k4);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int lo = kc, hi = kce;
#else
  {
    const int lo = kbeg, hi = kend;
#endif
    float4 b[KPT * V4];
    int k0 = lo + kl * KPT;
#if PF
#pragma unroll
    for (int j = 0; j < KPT; ++j)
#pragma unroll
      for (int v = 0; v < V4; ++v) b[j * V4 + v] = k0 + j < hi ? B_LOAD(v, k0 + j) : (float4)(0.0f);
#endif
    for (; k0 < hi; k0 += KL * KPT) {
#if PF
      float4 cur[KPT * V4];
#pragma unroll
      for (int e = 0; e < KPT * V4; ++e) cur[e] = b[e];
      const int kn = k0 + KL * KPT;
#pragma unroll
      for (int j = 0; j < KPT; ++j)
#pragma unroll
        for (int v = 0; v < V4; ++v) b[j * V4 + v] = kn + j < hi ? B_LOAD(v, kn + j) : (float4)(0.0f);
#else
      float4 cur[KPT * V4];
#pragma unroll
      for (int j = 0; j < KPT; ++j)
#pragma unroll
        for (int v = 0; v < V4; ++v) cur[j * V4 + v] = k0 + j < hi ? B_LOAD(v, k0 + j) : (float4)(0.0f);
#endif
#if NOMATH
#pragma unroll
      for (int e = 0; e < KPT * V4; ++e) acc[0] += cur[e];
#else
#pragma unroll
      for (int r = 0; r < RT; ++r) {
#pragma unroll
        for (int j4 = 0; j4 < KPT / 4; ++j4) {
          const int k = k0 + 4 * j4;
          const float4 a = k < hi ? A_AT(r, k) : (float4)(0.0f);
#pragma unroll
          for (int v = 0; v < V4; ++v) {
            float4 s = acc[r * V4 + v];
            s = mad((float4)(a.x), cur[(4 * j4 + 0) * V4 + v], s);
            s = mad((float4)(a.y), cur[(4 * j4 + 1) * V4 + v], s);
            s = mad((float4)(a.z), cur[(4 * j4 + 2) * V4 + v], s);
            s = mad((float4)(a.w), cur[(4 * j4 + 3) * V4 + v], s);
            acc[r * V4 + v] = s;
          }
        }
      }
#endif
    }
  }
#if KL > 1
  for (int hs = KL / 2; hs > 0; hs >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (kl >= hs && kl < 2 * hs) {
#pragma unroll
      for (int e = 0; e < RT * V4; ++e) red[((kl - hs) * RM * V4 + rh * RT * V4 + e) * NC + c] = acc[e];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (kl < hs) {
#pragma unroll
      for (int e = 0; e < RT * V4; ++e) acc[e] += red[(kl * RM * V4 + rh * RT * V4 + e) * NC + c];
    }
  }
#endif
  if (kl != 0 || n >= N) return;
#pragma unroll
  for (int r = 0; r < RT; ++r) {
    const int m = m0 + rh * RT + r;
    if (m >= M) break;
#pragma unroll
    for (int v = 0; v < V4; ++v) vstore4(acc[r * V4 + v], v, C + bz * scb + sz * scs + m * scm + n);
  }
}

// Sums `splits` partial slabs (each `slab` floats apart) into C (float4 per work-item).
__kernel void splitk_sum4(__global float* C, __global const float* P, int slab, int splits, int n4) {
  const int i = get_global_id(0);
  if (i >= n4) return;
  float4 s = vload4(i, P);
  for (int q = 1; q < splits; ++q) s += vload4(i, P + q * slab);
  vstore4(s, i, C);
}

// Read bandwidth reference: every work-item sums float4s strided by the grid over n4 float4s.
__kernel void read_sum4(__global float* out, __global const float4* restrict x, int n4) {
  const int g = get_global_id(0), gs = get_global_size(0);
  float4 s = (float4)(0.0f);
  for (int i = g; i < n4; i += gs) s += x[i];
  out[g] = s.x + s.y + s.z + s.w;
}

// Read references with the GEMM's access patterns: work-group w of nwg streams `per` float4s
//   read_slabs: its own contiguous slab [w*per, (w+1)*per) (tile-major U);
//   read_inter: chunks of `chunk` float4s, the i-th at (i*nwg + w)*chunk (k-block interleaved U).
__kernel void read_slabs(__global float* out, __global const float4* restrict x, int per) {
  const int w = get_group_id(0), l = get_local_id(0), nl = get_local_size(0);
  float4 s = (float4)(0.0f);
  for (int i = l; i < per; i += nl) s += x[w * per + i];
  out[get_global_id(0)] = s.x + s.y + s.z + s.w;
}
__kernel void read_inter(__global float* out, __global const float4* restrict x, int per, int chunk) {
  const int w = get_group_id(0), nwg = get_num_groups(0), l = get_local_id(0), nl = get_local_size(0);
  float4 s = (float4)(0.0f);
  for (int i = l; i < per; i += nl) s += x[((i / chunk) * nwg + w) * chunk + i % chunk];
  out[get_global_id(0)] = s.x + s.y + s.z + s.w;
}
