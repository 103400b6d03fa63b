// SdAttention on OpenCL. The fast path is the tiled kernels further down
// (attn_{flash,stats,pv}_<tiling>); the three kernels first below are the
// simple fallback (and the reference for other backends' ports): one
// work-group (ATT_WG threads) per (batch, head, query row).
// Q/K/V/O are [N, S, H*D]; head h owns columns [h*D, (h+1)*D). D <= ATT_MAXD.
//
// partial_softmax (the paper's partially fused softmax), two kernels:
//   pass 1 (attn_stats): row max m and sum s = sum_j exp(scale*q.k_j - m); only
//          these two vectors are written (no S x S score matrix in memory);
//   pass 2 (attn_pv): scores are recomputed and normalised, exp(.. - m)/s,
//          inside the product with V.
// flash (attn_flash): one pass with the online-softmax rescaling of the
//          accumulator per key block (FlashAttention); no scratch at all.
// Causal: key j > query i is masked out.
#define ATT_WG 64
#define ATT_MAXD 256
#define ATT_ACC (ATT_MAXD / ATT_WG)

inline void att_load_q(__local float* q, __global const float* Q, int base, int D) {
  for (int d = get_local_id(0); d < D; d += ATT_WG) q[d] = Q[base + d];
  barrier(CLK_LOCAL_MEM_FENCE);
}

inline float att_score(__local const float* q, __global const float* K, int kbase, int D, float scale) {
  float acc = 0.0f;
  for (int d = 0; d < D; ++d) acc += q[d] * K[kbase + d];
  return acc * scale;
}

__kernel void attn_stats(__global float* stats, int so, __global const float* Q, int qo, __global const float* K, int ko,
                         int Sq, int Sk, int H, int D, float scale, int causal) {
  __local float q[ATT_MAXD];
  __local float lm[ATT_WG];
  __local float ls[ATT_WG];
  const int row = get_group_id(0);  // (n*H + h)*Sq + i
  const int i = row % Sq, h = (row / Sq) % H, n = row / (Sq * H);
  const int lid = get_local_id(0);
  const int HD = H * D;
  att_load_q(q, Q, qo + (n * Sq + i) * HD + h * D, D);
  const int kend = causal ? min(Sk, i + 1) : Sk;
  float m = -INFINITY, s = 0.0f;
  for (int j = lid; j < kend; j += ATT_WG) {
    const float v = att_score(q, K, ko + (n * Sk + j) * HD + h * D, D, scale);
    const float nm = fmax(m, v);
    s = s * exp(m - nm) + exp(v - nm);
    m = nm;
  }
  lm[lid] = m;
  ls[lid] = s;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int st = ATT_WG / 2; st > 0; st >>= 1) {
    if (lid < st) {
      const float m1 = lm[lid], m2 = lm[lid + st];
      const float nm = fmax(m1, m2);
      ls[lid] = (m1 == -INFINITY ? 0.0f : ls[lid] * exp(m1 - nm)) + (m2 == -INFINITY ? 0.0f : ls[lid + st] * exp(m2 - nm));
      lm[lid] = nm;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lid == 0) {
    stats[so + 2 * row] = lm[0];
    stats[so + 2 * row + 1] = ls[0];
  }
}

__kernel void attn_pv(__global float* O, int oo, __global const float* stats, int so, __global const float* Q, int qo,
                      __global const float* K, int ko, __global const float* V, int vo, int Sq, int Sk, int H, int D,
                      float scale, int causal) {
  __local float q[ATT_MAXD];
  __local float p[ATT_WG];
  const int row = get_group_id(0);
  const int i = row % Sq, h = (row / Sq) % H, n = row / (Sq * H);
  const int lid = get_local_id(0);
  const int HD = H * D;
  att_load_q(q, Q, qo + (n * Sq + i) * HD + h * D, D);
  const float m = stats[so + 2 * row];
  const float inv_s = 1.0f / stats[so + 2 * row + 1];
  const int kend = causal ? min(Sk, i + 1) : Sk;
  float acc[ATT_ACC];
  for (int a = 0; a < ATT_ACC; ++a) acc[a] = 0.0f;
  for (int j0 = 0; j0 < kend; j0 += ATT_WG) {
    const int j = j0 + lid;
    p[lid] = j < kend ? exp(att_score(q, K, ko + (n * Sk + j) * HD + h * D, D, scale) - m) * inv_s : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int jn = min(ATT_WG, kend - j0);
    for (int a = 0; a < ATT_ACC; ++a) {
      const int d = lid + a * ATT_WG;
      if (d < D) {
        float t = acc[a];
        for (int jj = 0; jj < jn; ++jj) t += p[jj] * V[vo + (n * Sk + j0 + jj) * HD + h * D + d];
        acc[a] = t;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int a = 0; a < ATT_ACC; ++a) {
    const int d = lid + a * ATT_WG;
    if (d < D) O[oo + (n * Sq + i) * HD + h * D + d] = acc[a];
  }
}

__kernel void attn_flash(__global float* O, int oo, __global const float* Q, int qo, __global const float* K, int ko,
                         __global const float* V, int vo, int Sq, int Sk, int H, int D, float scale, int causal) {
  __local float q[ATT_MAXD];
  __local float p[ATT_WG];
  __local float red[ATT_WG];
  const int row = get_group_id(0);
  const int i = row % Sq, h = (row / Sq) % H, n = row / (Sq * H);
  const int lid = get_local_id(0);
  const int HD = H * D;
  att_load_q(q, Q, qo + (n * Sq + i) * HD + h * D, D);
  const int kend = causal ? min(Sk, i + 1) : Sk;
  float m = -INFINITY, s = 0.0f;
  float acc[ATT_ACC];
  for (int a = 0; a < ATT_ACC; ++a) acc[a] = 0.0f;
  for (int j0 = 0; j0 < kend; j0 += ATT_WG) {
    const int j = j0 + lid;
    const float sc = j < kend ? att_score(q, K, ko + (n * Sk + j) * HD + h * D, D, scale) : -INFINITY;
    red[lid] = sc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = ATT_WG / 2; st > 0; st >>= 1) {
      if (lid < st) red[lid] = fmax(red[lid], red[lid + st]);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float nm = fmax(m, red[0]);
    const float e = j < kend ? exp(sc - nm) : 0.0f;
    p[lid] = e;
    barrier(CLK_LOCAL_MEM_FENCE);
    // block sum (every thread needs it): reuse `red`
    red[lid] = e;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int st = ATT_WG / 2; st > 0; st >>= 1) {
      if (lid < st) red[lid] += red[lid + st];
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float corr = m == -INFINITY ? 0.0f : exp(m - nm);
    s = s * corr + red[0];
    m = nm;
    const int jn = min(ATT_WG, kend - j0);
    for (int a = 0; a < ATT_ACC; ++a) {
      const int d = lid + a * ATT_WG;
      if (d < D) {
        float t = acc[a] * corr;
        for (int jj = 0; jj < jn; ++jj) t += p[jj] * V[vo + (n * Sk + j0 + jj) * HD + h * D + d];
        acc[a] = t;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float inv_s = 1.0f / s;
  for (int a = 0; a < ATT_ACC; ++a) {
    const int d = lid + a * ATT_WG;
    if (d < D) O[oo + (n * Sq + i) * HD + h * D + d] = acc[a] * inv_s;
  }
}

// ===========================================================================
// Tiled kernels (the fast path; the three kernels above stay as the fallback
// for backends that do not have these yet). Same math, log2 domain: scores
// are q.k * scale * log2(e) and probabilities exp2(s - m), so the row stats
// written by attn_stats_<t> (m in log2 units, s) pair ONLY with attn_pv_<t>.
//
// Work-group = one block of BQ queries of one (batch, head); NT = (BQ/RM)*NC
// work-items. Work-item lid = rg*NC + c owns the RM query rows rg*RM.. of the
// block, and
//   * when scoring a K tile of BK keys: keys c, c+NC, ... (KPT = BK/NC);
//   * in P.V: head-dim columns c, c+NC, ... (CPT = DMAX/NC, guarded d < D);
// so the NC work-items of a row group share the softmax state of their rows
// and combine per-row partials through `red` (local memory). No S x S matrix
// exists anywhere: a BQ x BK probability tile lives in local memory (`ps`).
// Q block: resident in local memory for the whole kernel when D <= DC, else
// streamed in DC-wide chunks together with K. V: staged JC rows at a time
// (JC == BK: with K, one barrier). Local rows of Q/K are padded to an odd
// number of float4 so the float4 reads of NC different key rows hit distinct
// banks; the NC work-items of a row group read the same Q row (broadcast).
//
// Kernels (same parameter lists as the fallback kernels above, launched with
// global = ceil(Sq/BQ)*H*N*NT, local = NT; the host table kAttnTilings in
// gpu/sd_ops.cc mirrors BQ and NT):
//   attn_flash_<t>(O, oo, Q, qo, K, ko, V, vo, int Sq, int Sk, int H, int D, float scale, int causal)
//   attn_stats_<t>(stats, so, Q, qo, K, ko, Sq, Sk, H, D, scale, causal)      -> stats[2*row] = m, [2*row+1] = s
//   attn_pv_<t>(O, oo, stats, so, Q, qo, K, ko, V, vo, Sq, Sk, H, D, scale, causal)
// with <t> = d40 | d80 | d160 | d512 (D fixed) | dyn (any D <= ATT_DYN_MAXD).
// ===========================================================================
#define ATT_LOG2E 1.4426950408889634f
#define ATT_DYN_MAXD 512
#define ATT_SMAX 16  // >= RM*KPT of every instantiation
#define ATT_OMAX 64  // >= RM*CPT
#define ATT_RMAX 4   // >= RM
// The tiled bodies are written once and specialised per instantiation by constant arguments: they must be
// inlined for the constants to fold (fixed trip counts -> unrolled loops, accumulators in registers).
#define ATT_INLINE inline __attribute__((always_inline))

// dst[r*stride4 + c4] = src[(row0+r)*row_stride + col0 + 4*c4 .. +3] for r < rows, c4 < cols4;
// zeros for r >= rows_valid or columns >= cols_valid (so padded keys/dims contribute nothing).
ATT_INLINE void att_stage(__local float4* dst, int stride4, int cols4, int rows, __global const float* src, int row0,
                      int rows_valid, int row_stride, int col0, int cols_valid, int lid, int nt) {
  for (int e = lid; e < rows * cols4; e += nt) {
    const int r = e / cols4, c4 = e - r * cols4;
    const int col = 4 * c4;
    float4 v = (float4)(0.0f);
    if (r < rows_valid) {
      __global const float* p = src + (row0 + r) * row_stride + col0 + col;
      if (col + 4 <= cols_valid) {
        v = vload4(0, p);
      } else {
        if (col < cols_valid) v.s0 = p[0];
        if (col + 1 < cols_valid) v.s1 = p[1];
        if (col + 2 < cols_valid) v.s2 = p[2];
      }
    }
    dst[r * stride4 + c4] = v;
  }
}

// s[i*KPT + t] += Q row (rg*RM+i) . K row (c+NC*t) over cols4 float4 columns of the staged tiles.
ATT_INLINE void att_dot(float* s, __local const float4* qs, __local const float4* ks, int stride4, int cols4, int rg,
                    int c, const int RM, const int KPT, const int NC) {
  for (int d4 = 0; d4 < cols4; ++d4) {
    float4 qv[ATT_RMAX];
#pragma unroll
    for (int i = 0; i < RM; ++i) qv[i] = qs[(rg * RM + i) * stride4 + d4];
#pragma unroll
    for (int t = 0; t < KPT; ++t) {
      const float4 kv = ks[(c + NC * t) * stride4 + d4];
#pragma unroll
      for (int i = 0; i < RM; ++i) {
        float a = s[i * KPT + t];
        a = mad(qv[i].s0, kv.s0, a);
        a = mad(qv[i].s1, kv.s1, a);
        a = mad(qv[i].s2, kv.s2, a);
        a = mad(qv[i].s3, kv.s3, a);
        s[i * KPT + t] = a;
      }
    }
  }
}

// Scores of the tile in log2 units, masked keys (j >= Sk, causal j > row) -> -INFINITY.
ATT_INLINE void att_mask(float* s, int q0, int j0, int Sk, int causal, float sl2, int rg, int c, const int RM,
                     const int KPT, const int NC) {
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int row = q0 + rg * RM + i;
#pragma unroll
    for (int t = 0; t < KPT; ++t) {
      const int j = j0 + c + NC * t;
      const bool keep = j < Sk && (!causal || j <= row);
      s[i * KPT + t] = keep ? s[i * KPT + t] * sl2 : -INFINITY;
    }
  }
}

// o[i*CPT + t] += sum_j P[row i][jp0 + j] * V[j][c + NC*t] over nj (multiple of 4) staged V rows.
#define ATT_PV_STEP(comp, jj)                                                        \
  for (int t = 0; t < CPT; ++t) {                                                    \
    const int d = c + NC * t;                                                        \
    if (d < D) {                                                                     \
      const float vv = vsf[(j + jj) * vstride + d];                                  \
      for (int i = 0; i < RM; ++i) o[i * CPT + t] = mad(pv[i].comp, vv, o[i * CPT + t]); \
    }                                                                                \
  }
ATT_INLINE void att_pv_acc(float* o, __local const float* ps, int pstride, int jp0, __local const float* vsf,
                           int vstride, int nj, int D, int rg, int c, const int RM, const int CPT, const int NC) {
  for (int j = 0; j < nj; j += 4) {
    float4 pv[ATT_RMAX];
#pragma unroll
    for (int i = 0; i < RM; ++i) pv[i] = *((__local const float4*)(ps + (rg * RM + i) * pstride + jp0 + j));
#pragma unroll
    ATT_PV_STEP(s0, 0)
#pragma unroll
    ATT_PV_STEP(s1, 1)
#pragma unroll
    ATT_PV_STEP(s2, 2)
#pragma unroll
    ATT_PV_STEP(s3, 3)
  }
}
#undef ATT_PV_STEP

// The scores of K tile j0 for this work-item's rows/keys (unscaled, unmasked): stages K (and Q chunks when Q is
// not resident) and, when JC == BK, the whole V tile too. Returns with every staged tile visible to the group.
ATT_INLINE void att_scores(float* s, __global const float* Qb, __global const float* Kb, __global const float* Vb,
                       __local float4* qs, __local float4* ks, __local float4* vs, int n, int Sq, int Sk, int q0,
                       int j0, int HD, int col0, int D, int lid, int rg, int c, const int BQ, const int BK,
                       const int RM, const int KPT, const int NC, const int DC, const int JC, const int with_v) {
  const int NT = (BQ / RM) * NC;
  const int D4 = (D + 3) / 4;
  const int kvalid = min(BK, Sk - j0);
#pragma unroll
  for (int e = 0; e < RM * KPT; ++e) s[e] = 0.0f;
  if (D <= DC) {  // Q resident (staged once by the caller), K with the full head dim
    const int stride4 = D4 + ((D4 & 1) ? 0 : 1);
    att_stage(ks, stride4, D4, BK, Kb, n * Sk + j0, kvalid, HD, col0, D, lid, NT);
    if (with_v && JC == BK) att_stage(vs, D4, D4, BK, Vb, n * Sk + j0, kvalid, HD, col0, D, lid, NT);
    barrier(CLK_LOCAL_MEM_FENCE);
    att_dot(s, qs, ks, stride4, D4, rg, c, RM, KPT, NC);
  } else {
    const int C4 = DC / 4, stride4 = C4 + ((C4 & 1) ? 0 : 1);
    const int qrows = min(BQ, Sq - q0);
    for (int d0 = 0; d0 < D; d0 += DC) {
      const int dw = min(DC, D - d0);
      att_stage(qs, stride4, C4, BQ, Qb, n * Sq + q0, qrows, HD, col0 + d0, dw, lid, NT);
      att_stage(ks, stride4, C4, BK, Kb, n * Sk + j0, kvalid, HD, col0 + d0, dw, lid, NT);
      barrier(CLK_LOCAL_MEM_FENCE);
      att_dot(s, qs, ks, stride4, C4, rg, c, RM, KPT, NC);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (with_v && JC == BK) {
      att_stage(vs, D4, D4, BK, Vb, n * Sk + j0, kvalid, HD, col0, D, lid, NT);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
}

// P.V for the probability tile in `ps` (visible to the group): the staged V tile, or V streamed JC rows at a time.
ATT_INLINE void att_apply_v(float* o, __local const float* ps, __local float4* vs, __global const float* Vb, int n,
                        int Sk, int j0, int HD, int col0, int D, int lid, int rg, int c, const int BQ, const int BK,
                        const int RM, const int CPT, const int NC, const int JC) {
  const int NT = (BQ / RM) * NC;
  const int D4 = (D + 3) / 4;
  const int pstride = BK + 4;
  if (JC == BK) {
    att_pv_acc(o, ps, pstride, 0, (__local const float*)vs, 4 * D4, BK, D, rg, c, RM, CPT, NC);
  } else {
    for (int jc = 0; jc < BK; jc += JC) {
      att_stage(vs, D4, D4, JC, Vb, n * Sk + j0 + jc, max(0, min(JC, Sk - j0 - jc)), HD, col0, D, lid, NT);
      barrier(CLK_LOCAL_MEM_FENCE);
      att_pv_acc(o, ps, pstride, jc, (__local const float*)vs, 4 * D4, JC, D, rg, c, RM, CPT, NC);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
}

ATT_INLINE void att_block_coords(int Sq, int H, const int BQ, int* n, int* h, int* q0) {
  const int nqb = (Sq + BQ - 1) / BQ;
  const int g = get_group_id(0);
  *q0 = (g % nqb) * BQ;
  *h = (g / nqb) % H;
  *n = g / (nqb * H);
}

ATT_INLINE void att_stage_q(__local float4* qs, __global const float* Qb, int n, int Sq, int q0, int HD, int col0,
                            int D, int lid, const int BQ, const int NT, const int DC) {
  if (D > DC) return;  // streamed with K instead
  const int D4 = (D + 3) / 4;
  att_stage(qs, D4 + ((D4 & 1) ? 0 : 1), D4, BQ, Qb, n * Sq + q0, min(BQ, Sq - q0), HD, col0, D, lid, NT);
}

ATT_INLINE void att_flash_tiled(__global float* O, int oo, __global const float* Q, int qo, __global const float* K,
                            int ko, __global const float* V, int vo, int Sq, int Sk, int H, int D, float scale,
                            int causal, __local float4* qs, __local float4* ks, __local float4* vs, __local float* ps,
                            __local float* red, const int BQ, const int BK, const int RM, const int NC, const int DC,
                            const int JC, const int DMAX) {
  const int NT = (BQ / RM) * NC, KPT = BK / NC, CPT = DMAX / NC, pstride = BK + 4;
  const int lid = get_local_id(0), rg = lid / NC, c = lid - rg * NC;
  int n, h, q0;
  att_block_coords(Sq, H, BQ, &n, &h, &q0);
  const int HD = H * D, col0 = h * D;
  const float sl2 = scale * ATT_LOG2E;
  __global const float* Qb = Q + qo;
  __global const float* Kb = K + ko;
  __global const float* Vb = V + vo;
  att_stage_q(qs, Qb, n, Sq, q0, HD, col0, D, lid, BQ, NT, DC);
  float m[ATT_RMAX], l[ATT_RMAX], o[ATT_OMAX], s[ATT_SMAX];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
#pragma unroll
  for (int e = 0; e < RM * CPT; ++e) o[e] = 0.0f;
  const int kend = causal ? min(Sk, q0 + BQ) : Sk;
  for (int j0 = 0; j0 < kend; j0 += BK) {
    att_scores(s, Qb, Kb, Vb, qs, ks, vs, n, Sq, Sk, q0, j0, HD, col0, D, lid, rg, c, BQ, BK, RM, KPT, NC, DC, JC, 1);
    att_mask(s, q0, j0, Sk, causal, sl2, rg, c, RM, KPT, NC);
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      float mx = -INFINITY;
#pragma unroll
      for (int t = 0; t < KPT; ++t) mx = fmax(mx, s[i * KPT + t]);
      red[(rg * RM + i) * NC + c] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int r = rg * RM + i;
      float mn = m[i];
      for (int cc = 0; cc < NC; ++cc) mn = fmax(mn, red[r * NC + cc]);
      const float mref = mn == -INFINITY ? 0.0f : mn;  // a row with no key yet: keep everything at 0
      const float corr = exp2(m[i] - mref);
      m[i] = mn;
      float lsum = 0.0f;
#pragma unroll
      for (int t = 0; t < KPT; ++t) {
        const float p = exp2(s[i * KPT + t] - mref);
        ps[r * pstride + c + NC * t] = p;
        lsum += p;
      }
      l[i] = l[i] * corr + lsum;  // this work-item's keys only; combined across the row group at the end
#pragma unroll
      for (int t = 0; t < CPT; ++t) o[i * CPT + t] *= corr;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    att_apply_v(o, ps, vs, Vb, n, Sk, j0, HD, col0, D, lid, rg, c, BQ, BK, RM, CPT, NC, JC);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) red[(rg * RM + i) * NC + c] = l[i];
  barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int r = rg * RM + i;
    if (q0 + r >= Sq) continue;
    float sum = 0.0f;
    for (int cc = 0; cc < NC; ++cc) sum += red[r * NC + cc];
    const float inv = 1.0f / sum;
    __global float* dst = O + oo + (n * Sq + q0 + r) * HD + col0;
#pragma unroll
    for (int t = 0; t < CPT; ++t) {
      const int d = c + NC * t;
      if (d < D) dst[d] = o[i * CPT + t] * inv;
    }
  }
}

ATT_INLINE void att_stats_tiled(__global float* stats, int so, __global const float* Q, int qo, __global const float* K,
                            int ko, int Sq, int Sk, int H, int D, float scale, int causal, __local float4* qs,
                            __local float4* ks, __local float* red, const int BQ, const int BK, const int RM,
                            const int NC, const int DC) {
  const int NT = (BQ / RM) * NC, KPT = BK / NC;
  const int lid = get_local_id(0), rg = lid / NC, c = lid - rg * NC;
  int n, h, q0;
  att_block_coords(Sq, H, BQ, &n, &h, &q0);
  const int HD = H * D, col0 = h * D;
  const float sl2 = scale * ATT_LOG2E;
  __global const float* Qb = Q + qo;
  __global const float* Kb = K + ko;
  att_stage_q(qs, Qb, n, Sq, q0, HD, col0, D, lid, BQ, NT, DC);
  float m[ATT_RMAX], l[ATT_RMAX], s[ATT_SMAX];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  const int kend = causal ? min(Sk, q0 + BQ) : Sk;
  for (int j0 = 0; j0 < kend; j0 += BK) {
    att_scores(s, Qb, Kb, Kb, qs, ks, ks, n, Sq, Sk, q0, j0, HD, col0, D, lid, rg, c, BQ, BK, RM, KPT, NC, DC, BK, 0);
    att_mask(s, q0, j0, Sk, causal, sl2, rg, c, RM, KPT, NC);
#pragma unroll
    for (int i = 0; i < RM; ++i) {  // online (m, s) over this work-item's keys: no cross-item traffic per tile
      float mx = m[i];
#pragma unroll
      for (int t = 0; t < KPT; ++t) mx = fmax(mx, s[i * KPT + t]);
      const float mref = mx == -INFINITY ? 0.0f : mx;
      float sum = l[i] * exp2(m[i] - mref);
#pragma unroll
      for (int t = 0; t < KPT; ++t) sum += exp2(s[i * KPT + t] - mref);
      l[i] = sum;
      m[i] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites ks
  }
  __local float* redm = red;
  __local float* redl = red + BQ * NC;
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    redm[(rg * RM + i) * NC + c] = m[i];
    redl[(rg * RM + i) * NC + c] = l[i];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (c == 0) {
    for (int i = 0; i < RM; ++i) {
      const int r = rg * RM + i;
      if (q0 + r >= Sq) continue;
      float mx = -INFINITY;
      for (int cc = 0; cc < NC; ++cc) mx = fmax(mx, redm[r * NC + cc]);
      const float mref = mx == -INFINITY ? 0.0f : mx;
      float sum = 0.0f;
      for (int cc = 0; cc < NC; ++cc) sum += redl[r * NC + cc] * exp2(redm[r * NC + cc] - mref);
      const int row = (n * H + h) * Sq + q0 + r;
      stats[so + 2 * row] = mx;
      stats[so + 2 * row + 1] = sum;
    }
  }
}

ATT_INLINE void att_pv_tiled(__global float* O, int oo, __global const float* stats, int so, __global const float* Q,
                         int qo, __global const float* K, int ko, __global const float* V, int vo, int Sq, int Sk,
                         int H, int D, float scale, int causal, __local float4* qs, __local float4* ks,
                         __local float4* vs, __local float* ps, const int BQ, const int BK, const int RM, const int NC,
                         const int DC, const int JC, const int DMAX) {
  const int NT = (BQ / RM) * NC, KPT = BK / NC, CPT = DMAX / NC, pstride = BK + 4;
  const int lid = get_local_id(0), rg = lid / NC, c = lid - rg * NC;
  int n, h, q0;
  att_block_coords(Sq, H, BQ, &n, &h, &q0);
  const int HD = H * D, col0 = h * D;
  const float sl2 = scale * ATT_LOG2E;
  __global const float* Qb = Q + qo;
  __global const float* Kb = K + ko;
  __global const float* Vb = V + vo;
  att_stage_q(qs, Qb, n, Sq, q0, HD, col0, D, lid, BQ, NT, DC);
  float m[ATT_RMAX], inv[ATT_RMAX], o[ATT_OMAX], s[ATT_SMAX];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int r = q0 + rg * RM + i;
    const int row = (n * H + h) * Sq + r;
    m[i] = r < Sq ? stats[so + 2 * row] : 0.0f;
    inv[i] = r < Sq ? 1.0f / stats[so + 2 * row + 1] : 0.0f;
  }
#pragma unroll
  for (int e = 0; e < RM * CPT; ++e) o[e] = 0.0f;
  const int kend = causal ? min(Sk, q0 + BQ) : Sk;
  for (int j0 = 0; j0 < kend; j0 += BK) {
    att_scores(s, Qb, Kb, Vb, qs, ks, vs, n, Sq, Sk, q0, j0, HD, col0, D, lid, rg, c, BQ, BK, RM, KPT, NC, DC, JC, 1);
    att_mask(s, q0, j0, Sk, causal, sl2, rg, c, RM, KPT, NC);
#pragma unroll
    for (int i = 0; i < RM; ++i) {  // normalised probabilities: 1/s folded in before the product with V
#pragma unroll
      for (int t = 0; t < KPT; ++t) ps[(rg * RM + i) * pstride + c + NC * t] = exp2(s[i * KPT + t] - m[i]) * inv[i];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    att_apply_v(o, ps, vs, Vb, n, Sk, j0, HD, col0, D, lid, rg, c, BQ, BK, RM, CPT, NC, JC);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int r = rg * RM + i;
    if (q0 + r >= Sq) continue;
    __global float* dst = O + oo + (n * Sq + q0 + r) * HD + col0;
#pragma unroll
    for (int t = 0; t < CPT; ++t) {
      const int d = c + NC * t;
      if (d < D) dst[d] = o[i * CPT + t];
    }
  }
}

// Instantiations: name suffix, fixed D (0: runtime, <= DMAX), BQ, BK, RM, NC, DC, JC, DMAX. Local arrays:
//   qs: BQ rows x QS4 float4 (QS4 = odd(ceil(min(D,DC)/4))), ks: BK x QS4, vs: JC x ceil(DMAX/4),
//   ps: BQ x (BK+4) floats, red: BQ x NC floats (attn_stats: twice that, m and s partials).
#define ATT_ODD4(x) ((((x) + 3) / 4) | 1)
#define ATT_INSTANTIATE(T, DFIX, BQ, BK, RM, NC, DC, JC, DMAX)                                                      \
  __kernel void attn_flash_##T(__global float* O, int oo, __global const float* Q, int qo, __global const float* K, \
                               int ko, __global const float* V, int vo, int Sq, int Sk, int H, int D, float scale,  \
                               int causal) {                                                                         \
    __local float4 qs[(BQ) * ATT_ODD4(DC)];                                                                          \
    __local float4 ks[(BK) * ATT_ODD4(DC)];                                                                          \
    __local float4 vs[(JC) * (((DMAX) + 3) / 4)];                                                                    \
    __local float4 ps[(BQ) * ((BK) + 4) / 4];                                                                        \
    __local float red[(BQ) * (NC)];                                                                                  \
    att_flash_tiled(O, oo, Q, qo, K, ko, V, vo, Sq, Sk, H, (DFIX) > 0 ? (DFIX) : D, scale, causal, qs, ks, vs,      \
                    (__local float*)ps, red, BQ, BK, RM, NC, DC, JC, DMAX);                                          \
  }                                                                                                                  \
  __kernel void attn_stats_##T(__global float* stats, int so, __global const float* Q, int qo,                      \
                               __global const float* K, int ko, int Sq, int Sk, int H, int D, float scale,          \
                               int causal) {                                                                         \
    __local float4 qs[(BQ) * ATT_ODD4(DC)];                                                                          \
    __local float4 ks[(BK) * ATT_ODD4(DC)];                                                                          \
    __local float red[2 * (BQ) * (NC)];                                                                              \
    att_stats_tiled(stats, so, Q, qo, K, ko, Sq, Sk, H, (DFIX) > 0 ? (DFIX) : D, scale, causal, qs, ks, red, BQ, BK, \
                    RM, NC, DC);                                                                                     \
  }                                                                                                                  \
  __kernel void attn_pv_##T(__global float* O, int oo, __global const float* stats, int so, __global const float* Q, \
                            int qo, __global const float* K, int ko, __global const float* V, int vo, int Sq, int Sk, \
                            int H, int D, float scale, int causal) {                                                 \
    __local float4 qs[(BQ) * ATT_ODD4(DC)];                                                                          \
    __local float4 ks[(BK) * ATT_ODD4(DC)];                                                                          \
    __local float4 vs[(JC) * (((DMAX) + 3) / 4)];                                                                    \
    __local float4 ps[(BQ) * ((BK) + 4) / 4];                                                                        \
    att_pv_tiled(O, oo, stats, so, Q, qo, K, ko, V, vo, Sq, Sk, H, (DFIX) > 0 ? (DFIX) : D, scale, causal, qs, ks,  \
                 vs, (__local float*)ps, BQ, BK, RM, NC, DC, JC, DMAX);                                              \
  }

// SD1.x head dims (64x64 / 32x32 / 16x16 and 8x8 levels); Q resident (DC = D), V with K (JC = BK). d40 / d80
// run the cross-attention (77 keys) and any Sk < 256; the long self-attention uses r40 / r80 further down, and
// head dim 160 (16x16 / 8x8) uses r160 at every Sk (d160 only when the attention_tiling option forces it).
// Local memory (flash): d40 33 KB, d80 37 KB, d160 45 KB (NVIDIA allows 48 KB per work-group).
// Measured on an H200 (scripts/opencl_attn_bench.py, BENCHMARKS): these beat 8 rows per work-item
// (d40 RM 8: 1.52 vs 0.92 ms at 4096x4096x8 heads), 128-query blocks (1.78 ms) and 16-query blocks for
// the short 32x32 / 16x16 sequences (0.29 vs 0.21 ms, 0.11 vs 0.08 ms).
ATT_INSTANTIATE(d40, 40, 64, 32, 4, 8, 40, 32, 40)
ATT_INSTANTIATE(d80, 80, 32, 32, 2, 8, 80, 32, 80)
ATT_INSTANTIATE(d160, 160, 32, 16, 2, 8, 160, 16, 160)
// The VAE's single 512-wide head: Q/K streamed in 32-wide chunks, V in 8-row slices, 4 rows x 16 columns per
// work-item in P.V; 43 KB.
ATT_INSTANTIATE(d512, 512, 32, 64, 4, 32, 32, 8, 512)
// Any other head dim up to 512: chunked like d512 (resident Q when D <= 32), 2 rows x 32 columns; 32 KB.
ATT_INSTANTIATE(dyn, 0, 32, 32, 2, 16, 32, 8, ATT_DYN_MAXD)
#undef ATT_INSTANTIATE

// ===========================================================================
// Row-wise tiled kernels ("r" tilings; the default for long self-attention at the head dims that have one).
// Same math and log2 domain as the tiled kernels above (attn_stats_r* pair with attn_pv_r* only), a different
// work split:
//
// Work-group = BQ = RW*RM queries of one (batch, head), NT = RW*NS work-items. Work-item lid = sp*RW + w
// owns query rows w, w+RW, ... (RM of them) with the WHOLE head dim: its output accumulators live in
// registers, its Q rows (pre-scaled by scale*log2(e)) too or, with QL, in local memory, and its softmax
// state is its own, so no per-tile cross-item reduction exists (the tiled kernels above pay one `red`
// round-trip + 2 barriers per tile for the row max). The NS "key splits" sp share each staged BK = NS*KS
// key tile: split sp scores and accumulates keys sp*KS .. sp*KS+KS-1 of every tile, and the NS partial
// (m, l, O) of a row are merged once, after the last tile, through local memory (log2(NS) rounds). With
// RW = 32 one split is one NVIDIA warp: every K/V read from local memory is the same address across the
// warp (a broadcast, no bank conflicts), RM*4 FMAs per float4 read. Trade-offs: RM*D floats of O (plus
// RM*D of Q without QL) per work-item bound RM*D (register pressure: <= 80 with Q in registers, <= 160
// with QL), the merge costs NS*BQ*D/2 floats of local memory once, and splitting keys (NS) is what fills
// the GPU when Sq*H is small (one work-item per row would give 1-2 warps per SM at 32x32).
// DB = 1: K/V tiles double-buffered in local memory and the next tile's global loads issued (into
// registers) before the current tile's math: one barrier per tile instead of two.
//
// Kernels (the parameter lists of the fallback kernels; global = ceil(Sq/BQ)*H*N*NT, local = NT; host table
// kAttnTilings in gpu/sd_ops.cc mirrors BQ and NT): attn_flash_<t>, attn_stats_<t>, attn_pv_<t> with
// <t> = the suffix of an ATR_INSTANTIATE line; D is fixed per instantiation (multiple of 4).
// ===========================================================================
// ATR_XS (NVIDIA: the host builds with -DSDGPU_NV_PTX=1 there): the DS head-dim parts of a row (DS > 1) are
// adjacent lanes of one warp and add their partial dot products with shfl.sync butterflies (inline PTX): no local
// memory and no barrier per key tile. Elsewhere they are DS warps apart and exchange through local memory.
#if defined(SDGPU_NV_PTX) && SDGPU_NV_PTX
#define ATR_XS 1
#else
#define ATR_XS 0
#endif
#define ATR_Q4MAX 20  // >= RM*D/4 with Q in registers (QL = 0)
#define ATR_O4MAX 40  // >= RM*D/4
#define ATR_SMAX 32   // >= RM*KS
#define ATR_PFMAX 10  // >= ceil(BK*D/4 / NT) (float4 per work-item per staged K or V tile)

// dst[r*D4 + c4] = src row (row0 + r), float4 column c4 for r < nrows (zeros for r >= rows_valid).
ATT_INLINE void atr_stage(__local float4* dst, __global const float* src, int row0, int rows_valid, int HD, int col0,
                          const int D4, const int nrows, int lid, const int NT) {
  for (int e = lid; e < nrows * D4; e += NT) {
    const int r = e / D4;
    dst[e] = r < rows_valid ? vload4(e - r * D4, src + (row0 + r) * HD + col0) : (float4)(0.0f);
  }
}

// The same tile in two halves: global -> registers (issued early), registers -> local (after the math).
ATT_INLINE void atr_fetch(float4* reg, __global const float* src, int row0, int rows_valid, int HD, int col0,
                          const int D4, const int nrows, int lid, const int NT) {
#pragma unroll
  for (int it = 0; it < (nrows * D4 + NT - 1) / NT; ++it) {
    const int e = lid + it * NT;
    const int r = e / D4;
    reg[it] = e < nrows * D4 && r < rows_valid ? vload4(e - r * D4, src + (row0 + r) * HD + col0) : (float4)(0.0f);
  }
}

ATT_INLINE void atr_store(__local float4* dst, const float4* reg, const int D4, const int nrows, int lid,
                          const int NT) {
#pragma unroll
  for (int it = 0; it < (nrows * D4 + NT - 1) / NT; ++it) {
    const int e = lid + it * NT;
    if (e < nrows * D4) dst[e] = reg[it];
  }
}

// MODE 0: flash -> O; 1: stats (m, s per row) -> stats; 2: P.V with the stats of MODE 1 -> O; 3: flash over the
// key range [kb, ke) only ("key split", see attn_flash_ks_<t>): O normalised over that range -> O, and the range's
// (reference max, sum) per row -> stats, for attn_merge.
// QL = 1: the Q block lives in local memory ([D/4][BQ] float4, pre-scaled) instead of registers, re-read per
// key tile (RM distinct float4 per d4 step, amortised over KS keys): frees RM*D registers for larger RM.
// LZ > 0 (flash): lazy rescaling, the accumulators are rescaled only when a row's tile max exceeds its
// reference max by more than LZ (log2 units; probabilities stay <= 2^LZ, far from fp32 overflow); the
// reference, not the true max, then enters the final merge, which is exact for any reference.
ATT_INLINE void atr_tiled(const int MODE, __global float* O, int oo, __global float* stats, int so,
                          __global const float* Q, int qo, __global const float* K, int ko, __global const float* V,
                          int vo, int Sq, int Sk, int H, const int D, float scale, int causal, __local float4* lds,
                          const int RM, const int RW, const int NS, const int KS, const int DB, const float LZ,
                          const int QL, const int DS, int kb, int ke) {
  const int NT = RW * NS * DS, BQ = RW * RM, BK = NS * KS, D4 = D / 4, E4 = D4 / DS;
  const int WITH_V = MODE != 1, FLASH = MODE == 0 || MODE == 3;
  const int TILE4 = BK * D4 * (WITH_V ? 2 : 1);  // float4 of one staged buffer: K tile [+ V tile]
  const int SX4 = RM * KS / 4;                    // DS > 1: float4 of one work-item's partial scores per tile
  // work-item lid = (sp * DS + hf) * RW + w: key split sp, head-dim part hf (float4 columns c4o .. c4o+E4-1);
  // with ATR_XS and DS > 1, lid = (sp * RW + w) * DS + hf (the parts of a row in adjacent lanes)
  const int lid = get_local_id(0), XS = ATR_XS && DS > 1;
  const int hf = XS ? lid % DS : (lid / RW) % DS;
  const int w = XS ? (lid / DS) % RW : lid % RW;
  const int sp = lid / (RW * DS), g = sp * DS + hf;
  const int c4o = hf * E4;
  int n, h, q0;
  att_block_coords(Sq, H, BQ, &n, &h, &q0);
  const int HD = H * D, col0 = h * D;
  const float sl2 = scale * ATT_LOG2E;
  __global const float* Kb = K + ko;
  __global const float* Vb = V + vo;
  __local float4* qs = lds;                      // QL: [D4][BQ]
  __local float4* tiles = lds + (QL ? BQ * D4 : 0);
  __local float4* xch = tiles + (1 + DB) * TILE4;  // DS > 1: [NS*DS][SX4][RW] partial scores

  float4 q[ATR_Q4MAX], o[ATR_O4MAX];
  float m[ATT_RMAX], l[ATT_RMAX];
  if (QL) {
    for (int e = lid; e < BQ * D4; e += NT) {
      const int r = e / D4, c4 = e - r * D4;
      qs[c4 * BQ + r] = vload4(c4, Q + qo + (n * Sq + min(q0 + r, Sq - 1)) * HD + col0) * sl2;
    }
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int r = min(q0 + w + RW * i, Sq - 1);  // rows past Sq compute a copy of the last one, never stored
    if (!QL) {
      __global const float* qp = Q + qo + (n * Sq + r) * HD + col0;
#pragma unroll
      for (int d4 = 0; d4 < E4; ++d4) q[i * E4 + d4] = vload4(c4o + d4, qp) * sl2;
    }
    if (MODE == 2) {
      const int row = (n * H + h) * Sq + r;
      m[i] = stats[so + 2 * row];
      l[i] = 1.0f / stats[so + 2 * row + 1];  // 1/s folded into the probabilities
    } else {
      m[i] = -INFINITY;
      l[i] = 0.0f;
    }
  }
#pragma unroll
  for (int e = 0; e < RM * E4; ++e) o[e] = (float4)(0.0f);

  // keys [kb, kend) (kb a multiple of BK); rows past kend are staged as zeros and masked below
  const int kend = min(ke, causal ? min(Sk, q0 + BQ) : Sk);
  const int ntiles = kend > kb ? (kend - kb + BK - 1) / BK : 0;
  float4 pk[ATR_PFMAX], pv[ATR_PFMAX];
  if (DB) {
    atr_stage(tiles, Kb, n * Sk + kb, min(BK, kend - kb), HD, col0, D4, BK, lid, NT);
    if (WITH_V) atr_stage(tiles + BK * D4, Vb, n * Sk + kb, min(BK, kend - kb), HD, col0, D4, BK, lid, NT);
  }
  if (DB || QL) barrier(CLK_LOCAL_MEM_FENCE);
  for (int t = 0; t < ntiles; ++t) {
    const int j0 = kb + t * BK;
    __local float4* buf = tiles + (DB ? (t & 1) * TILE4 : 0);
    if (DB) {
      if (t + 1 < ntiles) {
        const int jn = j0 + BK;
        atr_fetch(pk, Kb, n * Sk + jn, min(BK, kend - jn), HD, col0, D4, BK, lid, NT);
        if (WITH_V) atr_fetch(pv, Vb, n * Sk + jn, min(BK, kend - jn), HD, col0, D4, BK, lid, NT);
      }
    } else {
      if (t > 0) barrier(CLK_LOCAL_MEM_FENCE);  // everyone is done with the previous tile
      atr_stage(buf, Kb, n * Sk + j0, min(BK, kend - j0), HD, col0, D4, BK, lid, NT);
      if (WITH_V) atr_stage(buf + BK * D4, Vb, n * Sk + j0, min(BK, kend - j0), HD, col0, D4, BK, lid, NT);
      barrier(CLK_LOCAL_MEM_FENCE);
    }
    __local const float4* kt = buf + sp * KS * D4;
    __local const float4* vt = buf + BK * D4 + sp * KS * D4;
    float s[ATR_SMAX];
#pragma unroll
    for (int e = 0; e < RM * KS; ++e) s[e] = 0.0f;
    if (QL) {  // d outer: RM Q reads per step, each used for KS keys; RM*KS independent accumulator chains
#pragma unroll
      for (int d4 = 0; d4 < E4; ++d4) {
        float4 qv[ATT_RMAX];
#pragma unroll
        for (int i = 0; i < RM; ++i) qv[i] = qs[(c4o + d4) * BQ + w + RW * i];
#pragma unroll
        for (int u = 0; u < KS; ++u) {
          const float4 kv = kt[u * D4 + c4o + d4];
#pragma unroll
          for (int i = 0; i < RM; ++i) {
            float a = s[i * KS + u];
            a = mad(qv[i].s0, kv.s0, a);
            a = mad(qv[i].s1, kv.s1, a);
            a = mad(qv[i].s2, kv.s2, a);
            a = mad(qv[i].s3, kv.s3, a);
            s[i * KS + u] = a;
          }
        }
      }
    } else {  // keys outer, Q in registers (d outer measured the same for flash on the H200)
#pragma unroll
      for (int u = 0; u < KS; ++u) {
#pragma unroll
        for (int d4 = 0; d4 < E4; ++d4) {
          const float4 kv = kt[u * D4 + c4o + d4];
#pragma unroll
          for (int i = 0; i < RM; ++i) {
            const float4 qv = q[i * E4 + d4];
            float a = s[i * KS + u];
            a = mad(qv.s0, kv.s0, a);
            a = mad(qv.s1, kv.s1, a);
            a = mad(qv.s2, kv.s2, a);
            a = mad(qv.s3, kv.s3, a);
            s[i * KS + u] = a;
          }
        }
      }
    }
#if ATR_XS
    if (DS > 1) {  // butterfly over the DS lanes of a row: both operands of every add are the same pair of partial
                   // sums, so the lanes end with bit-identical scores and run the same softmax
#pragma unroll
      for (int e = 0; e < RM * KS; ++e) {
        float t = s[e];
        for (int k = 1; k < DS; k <<= 1) t += nv_shfl_xor(t, k);
        s[e] = t;
      }
    }
#else
    if (DS > 1) {  // head-dim parts: every part sums all DS partial dot products in part order (its own from
                   // registers), so the DS work-items of a row hold bit-identical scores and run the same softmax
      __local float4* xw = xch + g * SX4 * RW + w;
#pragma unroll
      for (int c = 0; c < SX4; ++c) xw[c * RW] = (float4)(s[4 * c], s[4 * c + 1], s[4 * c + 2], s[4 * c + 3]);
      barrier(CLK_LOCAL_MEM_FENCE);
      __local const float4* xr = xch + sp * DS * SX4 * RW + w;
#pragma unroll
      for (int c = 0; c < SX4; ++c) {
        const float4 own = (float4)(s[4 * c], s[4 * c + 1], s[4 * c + 2], s[4 * c + 3]);
        float4 t = hf == 0 ? own : xr[c * RW];
#pragma unroll
        for (int k = 1; k < DS; ++k) t += hf == k ? own : xr[(k * SX4 + c) * RW];
        s[4 * c] = t.s0;
        s[4 * c + 1] = t.s1;
        s[4 * c + 2] = t.s2;
        s[4 * c + 3] = t.s3;
      }
    }
#endif
    if (causal || j0 + BK > kend) {  // uniform: only the last tile, or causal blocks, have masked keys
#pragma unroll
      for (int u = 0; u < KS; ++u) {
        const int j = j0 + sp * KS + u;
#pragma unroll
        for (int i = 0; i < RM; ++i) {
          const bool keep = j < kend && (!causal || j <= q0 + w + RW * i);
          s[i * KS + u] = keep ? s[i * KS + u] : -INFINITY;
        }
      }
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      if (MODE == 2) {
#pragma unroll
        for (int u = 0; u < KS; ++u) s[i * KS + u] = exp2(s[i * KS + u] - m[i]) * l[i];
        continue;
      }
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < KS; ++u) mx = fmax(mx, s[i * KS + u]);
      float mref;
      if (FLASH && LZ > 0.0f) {
        if (mx > m[i] + LZ) {  // false for a tile with no key (mx = -INFINITY)
          const float corr = exp2(m[i] - mx);  // 0 when m = -INFINITY (l, o are 0 then anyway)
          m[i] = mx;
          l[i] *= corr;
#pragma unroll
          for (int d4 = 0; d4 < E4; ++d4) o[i * E4 + d4] *= corr;
        }
        mref = m[i] == -INFINITY ? 0.0f : m[i];
      } else {
        mx = fmax(mx, m[i]);
        mref = mx == -INFINITY ? 0.0f : mx;  // no key yet: keep everything at 0
        const float corr = exp2(m[i] - mref);
        m[i] = mx;
        l[i] *= corr;
        if (FLASH) {
#pragma unroll
          for (int d4 = 0; d4 < E4; ++d4) o[i * E4 + d4] *= corr;
        }
      }
      float sum = l[i];
#pragma unroll
      for (int u = 0; u < KS; ++u) {
        const float p = exp2(s[i * KS + u] - mref);
        s[i * KS + u] = p;
        sum += p;
      }
      l[i] = sum;
    }
    if (WITH_V) {
#pragma unroll
      for (int u = 0; u < KS; ++u) {
#pragma unroll
        for (int d4 = 0; d4 < E4; ++d4) {
          const float4 vv = vt[u * D4 + c4o + d4];
#pragma unroll
          for (int i = 0; i < RM; ++i) o[i * E4 + d4] = mad((float4)(s[i * KS + u]), vv, o[i * E4 + d4]);
        }
      }
    }
    if (DB) {
      if (t + 1 < ntiles) {
        __local float4* nb = tiles + ((t + 1) & 1) * TILE4;
        atr_store(nb, pk, D4, BK, lid, NT);
        if (WITH_V) atr_store(nb + BK * D4, pv, D4, BK, lid, NT);
      }
      barrier(CLK_LOCAL_MEM_FENCE);  // tile t+1 visible; tile t free again
    }
  }
  if (!DB) barrier(CLK_LOCAL_MEM_FENCE);

  // Merge the NS key splits of every row: (m, l) first, then O by a tree over the splits.
  __local float* redm = (__local float*)lds;
  __local float* redl = redm + NS * BQ;
  __local float4* ob = (__local float4*)(redl + NS * BQ);  // [NS/2][D4][BQ]
  if (MODE != 2) {
    if (hf == 0) {  // the DS parts of a row hold the same (m, l)
#pragma unroll
      for (int i = 0; i < RM; ++i) {
        redm[sp * BQ + w + RW * i] = m[i];
        redl[sp * BQ + w + RW * i] = l[i];
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int r = w + RW * i;
      float mx = -INFINITY;
      for (int k = 0; k < NS; ++k) mx = fmax(mx, redm[k * BQ + r]);
      const float mref = mx == -INFINITY ? 0.0f : mx;
      float sum = 0.0f;
      for (int k = 0; k < NS; ++k) sum += redl[k * BQ + r] * exp2(redm[k * BQ + r] - mref);
      if (MODE == 1) {
        m[i] = mx;
        l[i] = sum;
      } else {
        const float f = sum > 0.0f ? exp2(m[i] - mref) / sum : 0.0f;
#pragma unroll
        for (int d4 = 0; d4 < E4; ++d4) o[i * E4 + d4] *= f;
        if (MODE == 3) {  // the range's stats: any reference works (attn_merge rescales by exp2(m - max m))
          m[i] = mref;
          l[i] = sum;
        }
      }
    }
  }
  if (MODE != 1) {
    for (int hs = NS / 2; hs > 0; hs /= 2) {
      if (sp >= hs && sp < 2 * hs) {
#pragma unroll
        for (int i = 0; i < RM; ++i) {
#pragma unroll
          for (int d4 = 0; d4 < E4; ++d4) ob[((sp - hs) * D4 + c4o + d4) * BQ + w + RW * i] = o[i * E4 + d4];
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      if (sp < hs) {
#pragma unroll
        for (int i = 0; i < RM; ++i) {
#pragma unroll
          for (int d4 = 0; d4 < E4; ++d4) o[i * E4 + d4] += ob[(sp * D4 + c4o + d4) * BQ + w + RW * i];
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
  if (sp != 0) return;
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int r = q0 + w + RW * i;
    if (r >= Sq) continue;
    if ((MODE == 1 || MODE == 3) && hf == 0) {
      const int row = (n * H + h) * Sq + r;
      stats[so + 2 * row] = m[i];
      stats[so + 2 * row + 1] = l[i];
    }
    if (MODE != 1) {
      __global float* dst = O + oo + (n * Sq + r) * HD + col0;
#pragma unroll
      for (int d4 = 0; d4 < E4; ++d4) vstore4(o[i * E4 + d4], c4o + d4, dst);
    }
  }
}

// Instantiations: suffix, D, RM, RW, NS, KS, DB, LZ, QL, DS. Local memory (float4): [the Q block BQ*D/4 (QL)] +
// the staged tile(s) (1 + DB) * BK * D/4 * (K + V) [+ DS > 1: the partial scores NT*RM*KS/4]; the merge reuses
// it: 2*NS*BQ/4 (m, l) + (NS/2)*BQ*D/4 (O).
#define ATR_MAX(a, b) ((a) > (b) ? (a) : (b))
#define ATR_LDS4(D, RM, RW, NS, KS, DB, QL, KV, DS)                                                  \
  ATR_MAX((QL) * (RW) * (RM) * ((D) / 4) + (1 + (DB)) * (NS) * (KS) * ((D) / 4) * (KV) +             \
              ((DS) > 1 && !ATR_XS ? (RW) * (NS) * (DS) * (RM) * (KS) / 4 : 0),                       \
          (2 * (NS) * (RW) * (RM)) / 4 + ((NS) / 2) * (RW) * (RM) * ((D) / 4))
#define ATR_INSTANTIATE(T, D, RM, RW, NS, KS, DB, LZ, QL, DS)                                                           \
  __kernel void attn_flash_##T(__global float* O, int oo, __global const float* Q, int qo, __global const float* K, \
                               int ko, __global const float* V, int vo, int Sq, int Sk, int H, int Dr, float scale, \
                               int causal) {                                                                         \
    __local float4 lds[ATR_LDS4(D, RM, RW, NS, KS, DB, QL, 2, DS)];                                                      \
    atr_tiled(0, O, oo, O, 0, Q, qo, K, ko, V, vo, Sq, Sk, H, D, scale, causal, lds, RM, RW, NS, KS, DB, LZ, QL, DS, 0, \
              Sk);                                                                                                   \
  }                                                                                                                  \
  __kernel void attn_stats_##T(__global float* stats, int so, __global const float* Q, int qo,                      \
                               __global const float* K, int ko, int Sq, int Sk, int H, int Dr, float scale,         \
                               int causal) {                                                                         \
    __local float4 lds[ATR_LDS4(D, RM, RW, NS, KS, DB, QL, 1, DS)];                                                      \
    atr_tiled(1, stats, 0, stats, so, Q, qo, K, ko, K, ko, Sq, Sk, H, D, scale, causal, lds, RM, RW, NS, KS, DB, LZ, \
              QL, DS, 0, Sk);                                                                                          \
  }                                                                                                                  \
  __kernel void attn_pv_##T(__global float* O, int oo, __global const float* stats, int so, __global const float* Q, \
                            int qo, __global const float* K, int ko, __global const float* V, int vo, int Sq, int Sk, \
                            int H, int Dr, float scale, int causal) {                                                \
    __local float4 lds[ATR_LDS4(D, RM, RW, NS, KS, DB, QL, 2, DS)];                                                      \
    atr_tiled(2, O, oo, (__global float*)stats, so, Q, qo, K, ko, V, vo, Sq, Sk, H, D, scale, causal, lds, RM, RW,  \
              NS, KS, DB, LZ, QL, DS, 0, Sk);                                                                              \
  }                                                                                                                  \
  __kernel void attn_flash_ks_##T(__global float* Op, int oo, int ostride, __global float* stats, int so,           \
                                  int sstride, __global const float* Q, int qo, __global const float* K, int ko,    \
                                  __global const float* V, int vo, int Sq, int Sk, int H, int Dr, float scale,      \
                                  int causal, int kps) {                                                            \
    __local float4 lds[ATR_LDS4(D, RM, RW, NS, KS, DB, QL, 2, DS)];                                                      \
    const int sk = get_group_id(1);                                                                                  \
    atr_tiled(3, Op, oo + sk * ostride, stats, so + sk * sstride, Q, qo, K, ko, V, vo, Sq, Sk, H, D, scale, causal,  \
              lds, RM, RW, NS, KS, DB, LZ, QL, DS, sk * kps, sk * kps + kps);                                            \
  }

// SD1.x self-attention at the 64x64 and 32x32 levels (host: picked for Sk >= 256). Cross-attention (77 keys)
// stays on d40/d80 above: there the one-time split merge and the strided per-row Q loads / O stores are not
// amortised over 3-5 key tiles (H200, 4096 x 77: d40 0.028 ms, row-wise 0.041 - 0.072; 1024 x 77: d80 0.024,
// row-wise 0.025 - 0.052). H200, N=1, 8 heads, flash (scripts/opencl_attn_bench.py):
//   r40: 2 rows x 40 per work-item, Q in registers, 2 key splits of 64 rows, 8 keys per split per tile,
//        double buffered; 22 KB local. 4096 x 4096: 0.647 ms (33 TFLOP/s) vs d40 0.918 ms.
//   r80: 2 rows x 80 per work-item with Q in local memory (registers hold only O), 4 key splits of 32 rows,
//        4 keys per split per tile, double buffered, lazy rescaling; 43 KB local. 1024 x 1024: 0.141 ms vs
//        d80 0.206 ms.
// Tried there and dropped (ms, d40 4096 / d80 1024): 1 row per work-item (1.17 - 1.19 / 0.151 - 0.159);
// no double buffering (0.96 / 0.16 - 0.23); 4 splits of 32 or 64 rows (0.71 - 0.76); 1 split, no merge
// (1.26 - 1.32: too few warps); 16 keys per split per tile, or lazy rescaling, for d40 (0.665 - 0.678);
// Q in local memory for d40 (2 rows 0.72 - 0.82, 4 rows 0.82); 8 splits for d80 (0.150 - 0.186); the d-outer
// product order with Q in registers (0.664 / 0.159; 6% faster for d40 partial_softmax, which SD does not
// pick at these shapes).
ATR_INSTANTIATE(r40, 40, 2, 64, 2, 8, 1, 0.0f, 0, 1)
ATR_INSTANTIATE(r80, 80, 2, 32, 4, 4, 1, 8.0f, 1, 1)
// h80 / h160 / h160w: the head dim split over DS = 2 work-items (each holds Q and O for half of it, in registers
// for any of these; the two add their partial dot products once per key tile: through local memory with one more
// barrier, or on NVIDIA by shfl.sync (ATR_XS; h80 at b1 0.119 vs 0.129 ms, BENCHMARKS session 15)). H200 (BENCHMARKS session 14, attn_lab.py), flash, 8 heads: 1024 x 1024 d80 at b1 h80 0.127 ms vs
// r80 0.134 (its key split) but at b2 0.246 vs 0.229; 256 x 256 d160 at b1 h160 0.043 vs r160 0.051, at b2 h160w
// 0.064 vs 0.075; shorter key ranges (77 / 64 keys) gain nothing. The host picks them only where they won (Sk >=
// 256, grids of at most one work-group per compute unit). For d40 the same split lost (RM 3 or 4 rows: 0.72 -
// 1.20 ms vs r40 0.657; RM 4 with KS 8 spills).
ATR_INSTANTIATE(h80, 80, 2, 32, 4, 4, 1, 8.0f, 0, 2)
// r160: the 16x16 / 8x8 levels (D 160: 256 / 64 tokens, self and cross), every Sk: one row x 160 per
// work-item, Q in local memory, 16-query blocks, 8 key splits x 2 keys (16-key tiles, single-buffered), 42 KB
// local (the split merge). H200, flash, 8 heads: 256 x 256 0.054 ms vs d160 0.079; 256 x 77 0.023 vs 0.029;
// 64 x 64 0.020 vs 0.024. Tried there: 32-query blocks with 4 splits x 4 keys (0.087 / 0.035 / 0.030) and
// d160 with 16-query blocks (0.083 / 0.029 / 0.024).
ATR_INSTANTIATE(r160, 160, 1, 16, 8, 2, 0, 0.0f, 1, 1)
ATR_INSTANTIATE(h160, 160, 1, 16, 8, 4, 0, 0.0f, 0, 2)
ATR_INSTANTIATE(h160w, 160, 1, 32, 4, 4, 1, 0.0f, 0, 2)
#if ATR_XS
// h160x (NVIDIA only): h160w's geometry (32-query blocks, 256 work-items) with 4 rows per work-item and the head dim
// split over 8 lanes (20 floats of Q and O per row), exchanged by shfl.sync. H200, flash, 8 heads, 256 x 256 d160
// (BENCHMARKS session 15, attn_lab.py --xs): b2 0.0565 ms vs h160w 0.0649 (0.0692 with the local-memory
// exchange); at b1 0.0527 vs h160 0.0446, so the host keeps h160 there. Without ATR_XS its exchange buffer would
// take local memory past 48 KB, hence not instantiated.
ATR_INSTANTIATE(h160x, 160, 4, 8, 4, 4, 1, 0.0f, 0, 8)
#endif
#undef ATR_INSTANTIATE

// ===========================================================================
// Short key sequences (Sk <= ATS_KMAX; SD's cross-attention over the 77 text tokens), any head dim D % 4 == 0:
// attn_short_q<BQ>. Every key fits the work-group at once, so there is no online softmax and no key loop:
//   1. scores S = Q K^T for BQ queries x ATS_KMAX keys, over ATS_DC-wide chunks of the head dim (the Q and K
//      chunks staged in local memory); work-item (rg, kg) = (lid / 10, lid % 10) accumulates rows rg*RS ..
//      rg*RS + RS - 1 (RS = BQ / 16) against keys kg + 10*jj (jj < 8) in registers;
//   2. the exact softmax per row: max, exp2 and sum over the ten key groups' partials through local memory;
//      the unnormalised P goes to local memory (over the Q chunk);
//   3. O = P V / sum over ATS_DC-wide chunks (the V chunk staged where K was); work-item (rg, c4) holds its RS
//      rows x float4 column c4 of the chunk.
// Against the tiled / row-wise flash kernels above at 77 keys: K and V are staged once per head-dim chunk instead of
// per key tile, with no per-tile rescaling or row-max round trip. Costs: keys are padded to ATS_KMAX (77 -> 80),
// every work-group stages all of K and V (so BQ 64 wins wherever the queries fill it), and local memory holds
// BQ x ATS_KMAX probabilities (BQ 64: 38 KB in all). The host takes it where it measured faster (gpu/sd_ops.cc
// UseAttnShort: H200, 7-17% faster than d40 / d80 at SD1.5's cross-attention, 2x "dyn" at the text encoder's d64;
// slower than r160 at d160).
// Parameters and grid of attn_flash_<t>: global = ceil(Sq/BQ)*H*N*ATS_NT, local = ATS_NT (host: kAttnShortNt).
#define ATS_NT 160
#define ATS_KMAX 80
#define ATS_KG 10                // key groups = float4 columns of a chunk
#define ATS_KPG (ATS_KMAX / ATS_KG)  // keys per group
#define ATS_DC4 10               // head-dim chunk in float4 (ATS_DC = 40 floats)
#define ATS_S4 11                // local row stride of a Q / K / V chunk in float4 (odd: distinct banks per key group)
#define ATS_PS 84                // local row stride of P in floats (rows stay 16-byte aligned)

// rows x ATS_DC4 float4 of src rows row0.. (zeros past rows_valid or past column D) -> dst[r * ATS_S4 + c4], times mul.
ATT_INLINE void ats_stage(__local float4* dst, int rows, __global const float* src, int row0, int rows_valid,
                          int row_stride, int col0, int d0, int D, float mul, int lid) {
  for (int e = lid; e < rows * ATS_DC4; e += ATS_NT) {
    const int r = e / ATS_DC4, c4 = e - r * ATS_DC4, d = d0 + 4 * c4;
    float4 v = (float4)(0.0f);
    if (r < rows_valid && d < D) v = vload4(0, src + (row0 + r) * row_stride + col0 + d) * mul;
    dst[r * ATS_S4 + c4] = v;
  }
}

ATT_INLINE void attn_short_body(__global float* O, int oo, __global const float* Q, int qo, __global const float* K,
                                int ko, __global const float* V, int vo, int Sq, int Sk, int H, int D, float scale,
                                int causal, __local float4* qp, __local float4* kv, __local float* red,
                                __local float* lsum, const int BQ) {
  const int RS = BQ / 16;
  const int lid = get_local_id(0), rg = lid / ATS_KG, kg = lid - rg * ATS_KG;
  int n, h, q0;
  att_block_coords(Sq, H, BQ, &n, &h, &q0);
  const int HD = H * D, col0 = h * D, qrows = min(BQ, Sq - q0);
  const float sl2 = scale * ATT_LOG2E;
  __global const float* Qb = Q + qo + n * Sq * HD;
  __global const float* Kb = K + ko + n * Sk * HD;
  __global const float* Vb = V + vo + n * Sk * HD;
  float acc[4 * ATS_KPG];  // acc[i * ATS_KPG + jj]: row rg*RS + i, key kg + ATS_KG*jj
#pragma unroll
  for (int e = 0; e < RS * ATS_KPG; ++e) acc[e] = 0.0f;
  for (int d0 = 0; d0 < D; d0 += 4 * ATS_DC4) {
    ats_stage(qp, BQ, Qb, q0, qrows, HD, col0, d0, D, sl2, lid);
    ats_stage(kv, ATS_KMAX, Kb, 0, Sk, HD, col0, d0, D, 1.0f, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    att_dot(acc, qp, kv, ATS_S4, ATS_DC4, rg, kg, RS, ATS_KPG, ATS_KG);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  // masked keys -> -inf; the row max over the ten key groups
#pragma unroll
  for (int i = 0; i < RS; ++i) {
    const int row = q0 + rg * RS + i;
    float mx = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < ATS_KPG; ++jj) {
      const int j = kg + ATS_KG * jj;
      if (j >= Sk || (causal && j > row)) acc[i * ATS_KPG + jj] = -INFINITY;
      mx = fmax(mx, acc[i * ATS_KPG + jj]);
    }
    red[(rg * RS + i) * ATS_KG + kg] = mx;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  __local float* P = (__local float*)qp;  // the Q chunk is dead now
#pragma unroll
  for (int i = 0; i < RS; ++i) {
    const int r = rg * RS + i;
    float mx = red[r * ATS_KG];
#pragma unroll
    for (int g = 1; g < ATS_KG; ++g) mx = fmax(mx, red[r * ATS_KG + g]);
    float sum = 0.0f;
#pragma unroll
    for (int jj = 0; jj < ATS_KPG; ++jj) {
      const float pj = mx == -INFINITY ? 0.0f : exp2(acc[i * ATS_KPG + jj] - mx);  // a fully masked row: zeros
      sum += pj;
      P[r * ATS_PS + kg + ATS_KG * jj] = pj;
    }
    acc[i * ATS_KPG] = sum;  // the partial sum, kept until the max's reads are done
  }
  barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
  for (int i = 0; i < RS; ++i) red[(rg * RS + i) * ATS_KG + kg] = acc[i * ATS_KPG];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < BQ) {
    float sum = 0.0f;
#pragma unroll
    for (int g = 0; g < ATS_KG; ++g) sum += red[lid * ATS_KG + g];
    lsum[lid] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  // P . V per head-dim chunk; work-item (rg, c4 = kg) writes rows rg*RS.. x float4 column c4
  const int kq = (min(Sk, ATS_KMAX) + 3) / 4;
  for (int d0 = 0; d0 < D; d0 += 4 * ATS_DC4) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous chunk's reads of kv (and lsum's writes) are done
    ats_stage(kv, ATS_KMAX, Vb, 0, Sk, HD, col0, d0, D, 1.0f, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 o[4];
#pragma unroll
    for (int i = 0; i < RS; ++i) o[i] = (float4)(0.0f);
    for (int j4 = 0; j4 < kq; ++j4) {
      const float4 v0 = kv[(4 * j4) * ATS_S4 + kg], v1 = kv[(4 * j4 + 1) * ATS_S4 + kg];
      const float4 v2 = kv[(4 * j4 + 2) * ATS_S4 + kg], v3 = kv[(4 * j4 + 3) * ATS_S4 + kg];
#pragma unroll
      for (int i = 0; i < RS; ++i) {
        const float4 p4 = vload4(0, P + (rg * RS + i) * ATS_PS + 4 * j4);
        o[i] = mad((float4)(p4.x), v0, mad((float4)(p4.y), v1, mad((float4)(p4.z), v2, mad((float4)(p4.w), v3, o[i]))));
      }
    }
    const int d = d0 + 4 * kg;
#pragma unroll
    for (int i = 0; i < RS; ++i) {
      const int r = rg * RS + i;
      if (r < qrows && d < D) vstore4(o[i] * lsum[r], 0, O + oo + (n * Sq + q0 + r) * HD + col0 + d);
    }
  }
}

// Local memory: qp max(BQ x ATS_S4 float4, BQ x ATS_PS floats) + kv ATS_KMAX x ATS_S4 float4 + red BQ x ATS_KG + lsum BQ.
#define ATS_INSTANTIATE(BQ)                                                                                             \
  __kernel __attribute__((reqd_work_group_size(ATS_NT, 1, 1))) void attn_short_q##BQ(                                  \
      __global float* O, int oo, __global const float* Q, int qo, __global const float* K, int ko,                     \
      __global const float* V, int vo, int Sq, int Sk, int H, int D, float scale, int causal) {                         \
    __local float4 qp[((BQ) * ATS_PS / 4 > (BQ) * ATS_S4) ? (BQ) * ATS_PS / 4 : (BQ) * ATS_S4];                         \
    __local float4 kv[ATS_KMAX * ATS_S4];                                                                               \
    __local float red[(BQ) * ATS_KG];                                                                                   \
    __local float lsum[BQ];                                                                                             \
    attn_short_body(O, oo, Q, qo, K, ko, V, vo, Sq, Sk, H, D, scale, causal, qp, kv, red, lsum, BQ);                    \
  }
ATS_INSTANTIATE(64)
ATS_INSTANTIATE(32)
ATS_INSTANTIATE(16)
#undef ATS_INSTANTIATE

// Key split ("flash-decoding"): when (batch x heads x query blocks) leaves most compute units idle (SD1.5 at b1:
// 128 work-groups for the 32x32 and 16x16 self-attention on a 132-SM H200), attn_flash_ks_<t> runs `splits`
// work-groups per query block, split s taking keys [s*kps, (s+1)*kps) (kps a multiple of the tiling's BK), and
// writes that range's normalised O to parts[s] ([N*Sq][H*D]) and its per-row (reference max m_s in log2 units,
// sum l_s) to stats[s] ([N*H*Sq][2]). attn_merge then forms, per row and head,
//   O = sum_s w_s O_s / sum_s w_s,  w_s = l_s * exp2(m_s - max_s' m_s')   (ranges with l_s = 0 drop out),
// the flash recurrence applied once across the splits. Cost: splits x the output written and read once more
// (O and stats), and one more launch; global = N*Sq*H*D/4 (D a multiple of 4), one float4 per work-item.
__kernel void attn_merge(__global float* O, int oo, __global const float* parts, int po, int pstride,
                         __global const float* stats, int so, int sstride, int splits, int Sq, int H, int D,
                         int total4) {
  const int e = get_global_id(0);
  if (e >= total4) return;
  const int D4 = D / 4, d4 = e % D4, rest = e / D4, h = rest % H, nr = rest / H;  // nr = n * Sq + r
  const int n = nr / Sq, r = nr - n * Sq;
  const int srow = 2 * ((n * H + h) * Sq + r);
  const int col = nr * H * D + h * D + 4 * d4;
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) {
    const float l = stats[so + s * sstride + srow + 1];
    if (l > 0.0f) mx = fmax(mx, stats[so + s * sstride + srow]);
  }
  float4 acc = (float4)(0.0f);
  float wsum = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float l = stats[so + s * sstride + srow + 1];
    if (!(l > 0.0f)) continue;
    const float w = l * exp2(stats[so + s * sstride + srow] - mx);
    acc = mad((float4)(w), vload4(0, parts + po + s * pstride + col), acc);
    wsum += w;
  }
  vstore4(wsum > 0.0f ? acc / wsum : (float4)(0.0f), 0, O + oo + col);
}

// ===========================================================================
// Tensor-core flash attention, 3xTF32 (NVIDIA only: inline PTX mma.sync, built where ATR_XS is; the host picks it
// only with the delegate option tensor_cores=3xtf32, flash, no causal mask): attn_flash_m40 (head dim 40) and
// attn_flash_m80 (head dim 80), the parameter list and grid of attn_flash_<t> (BQ = 16 MT NW, NT = 32 NW; host:
// kAttnTilings "m40", "m80").
// Every product is 3xTF32: x = big + small with big = x truncated to its top 11 significant bits (a TF32 value: one
// AND) and small = x - big (exact), and a*b = big*big + big*small + small*big with fp32 accumulation, the term
// small*small (<= 2^-20 |a b|) dropped and small read by the tensor core at TF32 precision. SD1.5's 64x64
// self-attention on the H200 (BENCHMARKS session 21, mma_attn_lab.py): max error 3e-5 of the output's range vs
// 1.6e-6 for the fp32 kernel r40, 1.5x faster. Rounding big to nearest instead (+0x1000 before the mask) left the
// error where it was (3.3e-5) and cost 5%; splitting K and V once when staged (big and small planes in local memory)
// cost 15% (twice the local reads). Head dim 80 (SD1.5's 32x32 level, mma_attn_lab.py --d80 on an H100, BENCHMARKS
// session 22): alone 1.29x the fp32 h80 at b1 and 1.66x r80 at b2, error ~1e-5; in the UNet only b2 gained, so the
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
#if ATR_XS

ATT_INLINE float atm_idx(float v, int src) {
  float r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(src));
  return r;
}

// acc += A B, A = (ah, al) big / small fragments, B = (bh0, bh1) / (bl0, bl1); the small terms first
ATT_INLINE void atm_mma3(float* acc, const uint* ah, const uint* al, uint bh0, uint bh1, uint bl0, uint bl1) {
  nv_mma_tf32(acc, al[0], al[1], al[2], al[3], bh0, bh1);
  nv_mma_tf32(acc, ah[0], ah[1], ah[2], ah[3], bl0, bl1);
  nv_mma_tf32(acc, ah[0], ah[1], ah[2], ah[3], bh0, bh1);
}

ATT_INLINE void atm_split(float x, uint* big, uint* small) {
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
#endif  // ATR_XS
