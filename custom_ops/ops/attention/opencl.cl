// SdAttention on OpenCL, one work-group (ATT_WG threads) per (batch, head, query row).
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
