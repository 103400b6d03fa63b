// SdAttention on GL: GLSL port of ops/attention/opencl.cl (same kernels, same parameters). One
// work-group (ATT_WG invocations) per (batch, head, query row). Q/K/V/O are [N, S, H*D]; head h owns
// columns [h*D, (h+1)*D). D <= ATT_MAXD.
//
// partial_softmax (the paper's partially fused softmax), two kernels:
//   pass 1 (attn_stats): row max m and sum s = sum_j exp(scale*q.k_j - m); only these two vectors are
//          written (no S x S score matrix in memory);
//   pass 2 (attn_pv): scores are recomputed and normalised, exp(.. - m)/s, inside the product with V.
// flash (attn_flash): one pass with the online-softmax rescaling of the accumulator per key block
//          (FlashAttention); no scratch at all.
// Causal: key j > query i is masked out.
// The work-group size is ATT_WG and must equal kAttentionWg on the host (gpu/sd_ops.cc).
#define ATT_WG 64
#define ATT_MAXD 256
#define ATT_ACC (ATT_MAXD / ATT_WG)

//== kernel attn_stats
// attn_stats(stats, so, Q, qo, K, ko, int Sq, int Sk, int H, int D, float scale, int causal)
layout(std430, binding = 0) writeonly buffer B0 { float stats[]; };
layout(std430, binding = 1) readonly buffer B1 { float Q[]; };
layout(std430, binding = 2) readonly buffer B2 { float K[]; };
layout(location = 0) uniform int so;
layout(location = 1) uniform int qo;
layout(location = 2) uniform int ko;
layout(location = 3) uniform int Sq;
layout(location = 4) uniform int Sk;
layout(location = 5) uniform int H;
layout(location = 6) uniform int D;
layout(location = 7) uniform float scale;
layout(location = 8) uniform int causal;
shared float q[ATT_MAXD];
shared float lm[ATT_WG];
shared float ls[ATT_WG];
void main() {
  int row = sd_group_id(0);  // (n*H + h)*Sq + i
  int i = row % Sq, h = (row / Sq) % H, n = row / (Sq * H);
  int lid = sd_local_id(0);
  int HD = H * D;
  int qbase = qo + (n * Sq + i) * HD + h * D;
  for (int d = lid; d < D; d += ATT_WG) q[d] = Q[qbase + d];
  SD_BARRIER();
  int kend = causal != 0 ? min(Sk, i + 1) : Sk;
  float m = SD_NEG_INF, s = 0.0;
  for (int j = lid; j < kend; j += ATT_WG) {
    int kb = ko + (n * Sk + j) * HD + h * D;
    float dot = 0.0;
    for (int d = 0; d < D; ++d) dot += q[d] * K[kb + d];
    float v = dot * scale;
    float nm = max(m, v);
    s = s * exp(m - nm) + exp(v - nm);
    m = nm;
  }
  lm[lid] = m;
  ls[lid] = s;
  SD_BARRIER();
  for (int st = ATT_WG / 2; st > 0; st >>= 1) {
    if (lid < st) {
      float m1 = lm[lid], m2 = lm[lid + st];
      float nm = max(m1, m2);
      ls[lid] = (m1 == SD_NEG_INF ? 0.0 : ls[lid] * exp(m1 - nm)) + (m2 == SD_NEG_INF ? 0.0 : ls[lid + st] * exp(m2 - nm));
      lm[lid] = nm;
    }
    SD_BARRIER();
  }
  if (lid == 0) {
    stats[so + 2 * row] = lm[0];
    stats[so + 2 * row + 1] = ls[0];
  }
}

//== kernel attn_pv
// attn_pv(O, oo, stats, so, Q, qo, K, ko, V, vo, int Sq, int Sk, int H, int D, float scale, int causal)
layout(std430, binding = 0) writeonly buffer B0 { float O[]; };
layout(std430, binding = 1) readonly buffer B1 { float stats[]; };
layout(std430, binding = 2) readonly buffer B2 { float Q[]; };
layout(std430, binding = 3) readonly buffer B3 { float K[]; };
layout(std430, binding = 4) readonly buffer B4 { float V[]; };
layout(location = 0) uniform int oo;
layout(location = 1) uniform int so;
layout(location = 2) uniform int qo;
layout(location = 3) uniform int ko;
layout(location = 4) uniform int vo;
layout(location = 5) uniform int Sq;
layout(location = 6) uniform int Sk;
layout(location = 7) uniform int H;
layout(location = 8) uniform int D;
layout(location = 9) uniform float scale;
layout(location = 10) uniform int causal;
shared float q[ATT_MAXD];
shared float p[ATT_WG];
void main() {
  int row = sd_group_id(0);
  int i = row % Sq, h = (row / Sq) % H, n = row / (Sq * H);
  int lid = sd_local_id(0);
  int HD = H * D;
  int qbase = qo + (n * Sq + i) * HD + h * D;
  for (int d = lid; d < D; d += ATT_WG) q[d] = Q[qbase + d];
  SD_BARRIER();
  float m = stats[so + 2 * row];
  float inv_s = 1.0 / stats[so + 2 * row + 1];
  int kend = causal != 0 ? min(Sk, i + 1) : Sk;
  float acc[ATT_ACC];
  for (int a = 0; a < ATT_ACC; ++a) acc[a] = 0.0;
  for (int j0 = 0; j0 < kend; j0 += ATT_WG) {
    int j = j0 + lid;
    float pj = 0.0;
    if (j < kend) {
      int kb = ko + (n * Sk + j) * HD + h * D;
      float dot = 0.0;
      for (int d = 0; d < D; ++d) dot += q[d] * K[kb + d];
      pj = exp(dot * scale - m) * inv_s;
    }
    p[lid] = pj;
    SD_BARRIER();
    int jn = min(ATT_WG, kend - j0);
    for (int a = 0; a < ATT_ACC; ++a) {
      int d = lid + a * ATT_WG;
      if (d < D) {
        float t = acc[a];
        for (int jj = 0; jj < jn; ++jj) t += p[jj] * V[vo + (n * Sk + j0 + jj) * HD + h * D + d];
        acc[a] = t;
      }
    }
    SD_BARRIER();
  }
  for (int a = 0; a < ATT_ACC; ++a) {
    int d = lid + a * ATT_WG;
    if (d < D) O[oo + (n * Sq + i) * HD + h * D + d] = acc[a];
  }
}

//== kernel attn_flash
// attn_flash(O, oo, Q, qo, K, ko, V, vo, int Sq, int Sk, int H, int D, float scale, int causal)
layout(std430, binding = 0) writeonly buffer B0 { float O[]; };
layout(std430, binding = 1) readonly buffer B1 { float Q[]; };
layout(std430, binding = 2) readonly buffer B2 { float K[]; };
layout(std430, binding = 3) readonly buffer B3 { float V[]; };
layout(location = 0) uniform int oo;
layout(location = 1) uniform int qo;
layout(location = 2) uniform int ko;
layout(location = 3) uniform int vo;
layout(location = 4) uniform int Sq;
layout(location = 5) uniform int Sk;
layout(location = 6) uniform int H;
layout(location = 7) uniform int D;
layout(location = 8) uniform float scale;
layout(location = 9) uniform int causal;
shared float q[ATT_MAXD];
shared float p[ATT_WG];
shared float redm[ATT_WG];  // block max and block sum in separate arrays: common.glsl, "shared broadcast slots"
shared float reds[ATT_WG];
void main() {
  int row = sd_group_id(0);
  int i = row % Sq, h = (row / Sq) % H, n = row / (Sq * H);
  int lid = sd_local_id(0);
  int HD = H * D;
  int qbase = qo + (n * Sq + i) * HD + h * D;
  for (int d = lid; d < D; d += ATT_WG) q[d] = Q[qbase + d];
  SD_BARRIER();
  int kend = causal != 0 ? min(Sk, i + 1) : Sk;
  float m = SD_NEG_INF, s = 0.0;
  float acc[ATT_ACC];
  for (int a = 0; a < ATT_ACC; ++a) acc[a] = 0.0;
  for (int j0 = 0; j0 < kend; j0 += ATT_WG) {
    int j = j0 + lid;
    float sc = SD_NEG_INF;
    if (j < kend) {
      int kb = ko + (n * Sk + j) * HD + h * D;
      float dot = 0.0;
      for (int d = 0; d < D; ++d) dot += q[d] * K[kb + d];
      sc = dot * scale;
    }
    redm[lid] = sc;
    SD_BARRIER();
    for (int st = ATT_WG / 2; st > 0; st >>= 1) {
      if (lid < st) redm[lid] = max(redm[lid], redm[lid + st]);
      SD_BARRIER();
    }
    float nm = max(m, redm[0]);
    float e = j < kend ? exp(sc - nm) : 0.0;
    p[lid] = e;
    reds[lid] = e;  // block sum (every invocation needs it)
    SD_BARRIER();
    for (int st = ATT_WG / 2; st > 0; st >>= 1) {
      if (lid < st) reds[lid] += reds[lid + st];
      SD_BARRIER();
    }
    float corr = m == SD_NEG_INF ? 0.0 : exp(m - nm);
    s = s * corr + reds[0];
    m = nm;
    int jn = min(ATT_WG, kend - j0);
    for (int a = 0; a < ATT_ACC; ++a) {
      int d = lid + a * ATT_WG;
      if (d < D) {
        float t = acc[a] * corr;
        for (int jj = 0; jj < jn; ++jj) t += p[jj] * V[vo + (n * Sk + j0 + jj) * HD + h * D + d];
        acc[a] = t;
      }
    }
    SD_BARRIER();
  }
  float inv_s = 1.0 / s;
  for (int a = 0; a < ATT_ACC; ++a) {
    int d = lid + a * ATT_WG;
    if (d < D) O[oo + (n * Sq + i) * HD + h * D + d] = acc[a] * inv_s;
  }
}
