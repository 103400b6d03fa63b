// Lab: flash attention on the FP64 tensor cores (inline PTX mma.sync m16n8k8 .f64, sm_90; NVIDIA OpenCL only;
// dmma_lab.py --attn). Every product is an fp64 product of two fp32 values (exact) with fp64 accumulation, so the
// scores and P V are at least as accurate as fp32 FMAs; the softmax (max, exp2, sums) runs in fp32 as in r40.
// Layout as mma_attn.cl (its 3xTF32 sibling): NW warps, MT m-tiles of 16 query rows each; Q (pre-scaled by
// scale * log2 e) in registers as double A fragments; K and V staged per BKK keys in local memory as fp32 (converted
// per fragment read); S per 8-key n-tile accumulated in doubles, then kept as fp32; P turned into A fragments by
// shfl.idx (the m16n8k8 f64 fragments have the TF32 ones' (row, column) positions). OD = 1: O in double C fragments;
// OD = 0: O in fp32, each block's P V summed in doubles from zero and added once (fewer registers).
// Limits of this lab: Sq % BQ == 0, Sk % BKK == 0, no mask.
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#ifndef MT
#define MT 1
#endif
#ifndef NW
#define NW 4
#endif
#ifndef BKK
#define BKK 64
#endif
#ifndef OD
#define OD 1
#endif
#ifndef D
#define D 40
#endif
#ifndef KD
#define KD 0  // 1: K and V converted to double once when staged (local memory holds doubles), not per fragment read
#endif
#define DK (D / 8)
#define NT (32 * NW)
#define BQ (16 * MT * NW)
#define NJ (BKK / 8)
#if KD  // 8-byte reads: a half-warp's 16 lanes on distinct bank pairs ((g KP + t) and (t VP + g) doubles)
#if D == 80
#define KP 84
#define VP 84
#else
#define KP 44
#define VP 52
#endif
typedef double kv_t;
#else
#if D == 80
#define KP 84
#define VP 88
#else
#define KP 44
#define VP 40
#endif
typedef float kv_t;
#endif

inline float da_idx(float v, int src) {
  float r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(src));
  return r;
}

inline float da_xor(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}

inline void da_mma(double* d, double a0, double a1, double a2, double a3, double b0, double b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
               : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1));
}

// O, Q, K, V: [N, S, H * D] row-major (the delegate's layout); global = (Sq / BQ) * H * N * NT, local = NT.
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void attn_dmma(__global float* O, __global const float* Q,
                                                                        __global const float* K,
                                                                        __global const float* V, int Sq, int Sk,
                                                                        int H, float scale) {
  __local kv_t Ks[BKK * KP];
  __local kv_t Vs[BKK * VP];
  const int lid = get_local_id(0), warp = lid >> 5, lane = lid & 31, g = lane >> 2, t = lane & 3;
  const int qblocks = Sq / BQ, grp = get_group_id(0);
  const int qb = grp % qblocks, h = (grp / qblocks) % H, n = grp / (qblocks * H);
  const int HD = H * D, col0 = h * D;
  const float sl2 = scale * 1.4426950408889634f;
  const int r0 = qb * BQ + warp * 16 * MT;

  double qf[MT][DK][4];
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    __global const float* qa = Q + (size_t)(n * Sq + r0 + i * 16 + g) * HD + col0;
    __global const float* qc = qa + 8 * HD;
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      qf[i][kk][0] = (double)(qa[8 * kk + t] * sl2);
      qf[i][kk][1] = (double)(qc[8 * kk + t] * sl2);
      qf[i][kk][2] = (double)(qa[8 * kk + t + 4] * sl2);
      qf[i][kk][3] = (double)(qc[8 * kk + t + 4] * sl2);
    }
  }
#if OD
  double o[MT][DK][4];
#else
  float o[MT][DK][4];
#endif
  float m[MT][2], l[MT][2];
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
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int e = lid; e < BKK * (D / 4); e += NT) {
      const int r = e / (D / 4), c4 = e - r * (D / 4);
      const size_t src = (size_t)(n * Sk + kb + r) * HD + col0 + c4 * 4;
#if KD
      vstore4(convert_double4(vload4(0, K + src)), 0, Ks + r * KP + c4 * 4);
      vstore4(convert_double4(vload4(0, V + src)), 0, Vs + r * VP + c4 * 4);
#else
      vstore4(vload4(0, K + src), 0, Ks + r * KP + c4 * 4);
      vstore4(vload4(0, V + src), 0, Vs + r * VP + c4 * 4);
#endif
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    float s[MT][NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      double acc[MT][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0;
#pragma unroll
      for (int kk = 0; kk < DK; ++kk) {
        const double b0 = (double)Ks[(8 * j + g) * KP + 8 * kk + t];
        const double b1 = (double)Ks[(8 * j + g) * KP + 8 * kk + t + 4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
          da_mma(acc[i], qf[i][kk][0], qf[i][kk][1], qf[i][kk][2], qf[i][kk][3], b0, b1);
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[i][j][c] = (float)acc[i][c];
    }

#pragma unroll
    for (int i = 0; i < MT; ++i) {
      float mx0 = m[i][0], mx1 = m[i][1];
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        mx0 = fmax(mx0, fmax(s[i][j][0], s[i][j][1]));
        mx1 = fmax(mx1, fmax(s[i][j][2], s[i][j][3]));
      }
      mx0 = fmax(mx0, da_xor(mx0, 1));
      mx0 = fmax(mx0, da_xor(mx0, 2));
      mx1 = fmax(mx1, da_xor(mx1, 1));
      mx1 = fmax(mx1, da_xor(mx1, 2));
      const float c0 = exp2(m[i][0] - mx0), c1 = exp2(m[i][1] - mx1);
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
      l[i][0] = l[i][0] * c0 + sum0;
      l[i][1] = l[i][1] * c1 + sum1;
#if OD
#pragma unroll
      for (int d = 0; d < DK; ++d) {
        o[i][d][0] *= c0;
        o[i][d][1] *= c0;
        o[i][d][2] *= c1;
        o[i][d][3] *= c1;
      }
#endif
#if !OD  // this m-tile's P V of the block, summed in doubles from zero, added once
      {
        double pv[DK][4];
#pragma unroll
        for (int d = 0; d < DK; ++d) pv[d][0] = pv[d][1] = pv[d][2] = pv[d][3] = 0.0;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const float x0 = da_idx(s[i][j][0], src0), x1 = da_idx(s[i][j][1], src0);
          const float y0 = da_idx(s[i][j][0], src1), y1 = da_idx(s[i][j][1], src1);
          const float z0 = da_idx(s[i][j][2], src0), z1 = da_idx(s[i][j][3], src0);
          const float w0 = da_idx(s[i][j][2], src1), w1 = da_idx(s[i][j][3], src1);
          const double a0 = odd ? x1 : x0, a1 = odd ? z1 : z0, a2 = odd ? y1 : y0, a3 = odd ? w1 : w0;
#pragma unroll
          for (int d = 0; d < DK; ++d) {
            const double b0 = (double)Vs[(8 * j + t) * VP + 8 * d + g];
            const double b1 = (double)Vs[(8 * j + t + 4) * VP + 8 * d + g];
            da_mma(pv[d], a0, a1, a2, a3, b0, b1);
          }
        }
#pragma unroll
        for (int d = 0; d < DK; ++d) {
          o[i][d][0] = o[i][d][0] * c0 + (float)pv[d][0];
          o[i][d][1] = o[i][d][1] * c0 + (float)pv[d][1];
          o[i][d][2] = o[i][d][2] * c1 + (float)pv[d][2];
          o[i][d][3] = o[i][d][3] * c1 + (float)pv[d][3];
        }
      }
#endif
    }

#if OD
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const float x0 = da_idx(s[i][j][0], src0), x1 = da_idx(s[i][j][1], src0);
        const float y0 = da_idx(s[i][j][0], src1), y1 = da_idx(s[i][j][1], src1);
        const float z0 = da_idx(s[i][j][2], src0), z1 = da_idx(s[i][j][3], src0);
        const float w0 = da_idx(s[i][j][2], src1), w1 = da_idx(s[i][j][3], src1);
        const double a0 = odd ? x1 : x0, a1 = odd ? z1 : z0, a2 = odd ? y1 : y0, a3 = odd ? w1 : w0;
#pragma unroll
        for (int d = 0; d < DK; ++d) {
          const double b0 = (double)Vs[(8 * j + t) * VP + 8 * d + g];
          const double b1 = (double)Vs[(8 * j + t + 4) * VP + 8 * d + g];
          da_mma(o[i][d], a0, a1, a2, a3, b0, b1);
        }
      }
    }
#endif
  }

#pragma unroll
  for (int i = 0; i < MT; ++i) {
    float l0 = l[i][0], l1 = l[i][1];
    l0 += da_xor(l0, 1);
    l0 += da_xor(l0, 2);
    l1 += da_xor(l1, 1);
    l1 += da_xor(l1, 2);
    const float f0 = 1.0f / l0, f1 = 1.0f / l1;
    const int ra = r0 + i * 16 + g, rc = ra + 8;
#pragma unroll
    for (int d = 0; d < DK; ++d) {
      vstore2((float2)((float)o[i][d][0] * f0, (float)o[i][d][1] * f0), 0,
              O + (size_t)(n * Sq + ra) * HD + col0 + 8 * d + 2 * t);
      vstore2((float2)((float)o[i][d][2] * f1, (float)o[i][d][3] * f1), 0,
              O + (size_t)(n * Sq + rc) * HD + col0 + 8 * d + 2 * t);
    }
  }
}

// Issue-rate and layout probes (dmma_lab.py --probe): one m16n8k8 f64 product of a 16 x 8 A and 8 x 8 B
// (row-major, B as [k][n]) by one warp, and `iters` rounds of 8 independent products per warp.
__kernel void dmma_tile(__global double* Dm, __global const double* A, __global const double* B) {
  const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
  double d[4] = {0.0, 0.0, 0.0, 0.0};
  da_mma(d, A[g * 8 + t], A[(g + 8) * 8 + t], A[g * 8 + t + 4], A[(g + 8) * 8 + t + 4], B[t * 8 + g],
         B[(t + 4) * 8 + g]);
  Dm[g * 8 + 2 * t] = d[0];
  Dm[g * 8 + 2 * t + 1] = d[1];
  Dm[(g + 8) * 8 + 2 * t] = d[2];
  Dm[(g + 8) * 8 + 2 * t + 1] = d[3];
}

__kernel void dmma_rate(__global double* out, int iters, float seed) {
  const int lane = get_local_id(0) & 31;
  double a[4], b[2], acc[8][4];
  for (int i = 0; i < 4; ++i) a[i] = seed * (lane + i);
  for (int i = 0; i < 2; ++i) b[i] = seed * (lane - i);
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < 8; ++j) da_mma(acc[j], a[0], a[1], a[2], a[3], b[0], b[1]);
  }
  double s = 0.0;
  for (int j = 0; j < 8; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  out[get_global_id(0)] = s;
}
