// Lab kernel (attn_lab.py --gemm): flash attention with register-blocked GEMMs on both products, appended to the
// library source (uses its ATT_LOG2E, ATT_INLINE, att_block_coords). Head dim G_D (a multiple of 8 with G_D / 8
// columns of O per work-item: 40 -> 5, 80 -> 10), BQ = 64 queries per work-group, BK = 64 keys per tile, 64
// work-items (ri, ci) = (lid / 8, lid % 8):
//   S = Q K^T: work-item owns the 8 x 8 block rows ri*8.., keys ci*8.. (64 accumulators); per head-dim step two
//              float4 reads of Q (transposed in local memory, [d][q]) and two of K ([d][k]) feed 64 FMAs;
//   softmax:   row max / sum of the 8 work-items that share a row through local memory (redm / redl);
//   O += P V:  work-item owns rows ri*8.. x G_D/8 columns; P ([k][q] in local memory) read as two float4 per key,
//              V ([k][d]) as float4 (+ a scalar for D = 40).
// Q is pre-scaled by scale * log2(e) (scores in log2 units, probabilities exp2(s - m)).
#ifndef G_D
#define G_D 40
#endif
#define G_BQ 64
#define G_BK 64
#define G_OC (G_D / 8)  // O columns per work-item
#define G_CAT(a, b) a##b
#define G_NAME(d) G_CAT(attn_flash_g, d)

__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void G_NAME(G_D)(
    __global float* O, int oo, __global const float* Q, int qo, __global const float* K, int ko,
    __global const float* V, int vo, int Sq, int Sk, int H, int Dr, float scale, int causal) {
  // 48 KB at D = 40 (NVIDIA's per-work-group limit): redl aliases Ks, which is dead between the row-max exchange
  // and the next tile's staging (the barrier after the QK product separates its last read from redl's writes)
  __local float lds[G_D * G_BQ + G_D * G_BK + G_BK * G_D + G_BK * G_BQ + 8 * G_BQ];
  __local float* Qs = lds;                   // [d][q]
  __local float* Ks = Qs + G_D * G_BQ;       // [d][k]
  __local float* Vs = Ks + G_D * G_BK;       // [k][d]
  __local float* Ps = Vs + G_BK * G_D;       // [k][q]
  __local float* redm = Ps + G_BK * G_BQ;    // [ci][q]
  __local float* redl = Ks;
  const int lid = get_local_id(0), ri = lid >> 3, ci = lid & 7;
  int n, h, q0;
  att_block_coords(Sq, H, G_BQ, &n, &h, &q0);
  const int HD = H * G_D, col0 = h * G_D, D4 = G_D / 4;
  const float sl2 = scale * ATT_LOG2E;
  for (int e = lid; e < G_BQ * D4; e += 64) {
    const int r = e / D4, c4 = e - r * D4;
    const float4 v = vload4(c4, Q + qo + (n * Sq + min(q0 + r, Sq - 1)) * HD + col0) * sl2;
    Qs[(4 * c4 + 0) * G_BQ + r] = v.x;
    Qs[(4 * c4 + 1) * G_BQ + r] = v.y;
    Qs[(4 * c4 + 2) * G_BQ + r] = v.z;
    Qs[(4 * c4 + 3) * G_BQ + r] = v.w;
  }
  float o[8][G_OC], m[8], l[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < G_OC; ++c) o[i][c] = 0.0f;
  }
  const int kend = causal ? min(Sk, q0 + G_BQ) : Sk;
  for (int j0 = 0; j0 < kend; j0 += G_BK) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile's Ks / Vs / Ps / red are consumed (and Qs is staged)
    for (int e = lid; e < G_BK * D4; e += 64) {
      const int r = e / D4, c4 = e - r * D4;
      const bool ok = j0 + r < kend;
      const float4 kv = ok ? vload4(c4, K + ko + (n * Sk + j0 + r) * HD + col0) : (float4)(0.0f);
      const float4 vv = ok ? vload4(c4, V + vo + (n * Sk + j0 + r) * HD + col0) : (float4)(0.0f);
      Ks[(4 * c4 + 0) * G_BK + r] = kv.x;
      Ks[(4 * c4 + 1) * G_BK + r] = kv.y;
      Ks[(4 * c4 + 2) * G_BK + r] = kv.z;
      Ks[(4 * c4 + 3) * G_BK + r] = kv.w;
      vstore4(vv, 0, Vs + r * G_D + 4 * c4);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float s[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) s[i][j] = 0.0f;
    }
#pragma unroll 4
    for (int d = 0; d < G_D; ++d) {
      const float4 qa = vload4(0, Qs + d * G_BQ + ri * 8), qb = vload4(0, Qs + d * G_BQ + ri * 8 + 4);
      const float4 ka = vload4(0, Ks + d * G_BK + ci * 8), kb = vload4(0, Ks + d * G_BK + ci * 8 + 4);
      const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
      const float kk[8] = {ka.x, ka.y, ka.z, ka.w, kb.x, kb.y, kb.z, kb.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) s[i][j] = mad(qv[i], kk[j], s[i][j]);
      }
    }
    if (causal || j0 + G_BK > kend) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int key = j0 + ci * 8 + j;
          const bool keep = key < kend && (!causal || key <= q0 + ri * 8 + i);
          s[i][j] = keep ? s[i][j] : -INFINITY;
        }
      }
    }
    float pm[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float mx = s[i][0];
#pragma unroll
      for (int j = 1; j < 8; ++j) mx = fmax(mx, s[i][j]);
      pm[i] = mx;
    }
    vstore4((float4)(pm[0], pm[1], pm[2], pm[3]), 0, redm + ci * G_BQ + ri * 8);
    vstore4((float4)(pm[4], pm[5], pm[6], pm[7]), 0, redm + ci * G_BQ + ri * 8 + 4);
    barrier(CLK_LOCAL_MEM_FENCE);
    float ps[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float mx = m[i];
#pragma unroll
      for (int c = 0; c < 8; ++c) mx = fmax(mx, redm[c * G_BQ + ri * 8 + i]);
      const float mref = mx == -INFINITY ? 0.0f : mx;
      const float corr = exp2(m[i] - mref);  // 0 while m = -INFINITY (o, l are 0 then)
      m[i] = mx;
      l[i] *= corr;
#pragma unroll
      for (int c = 0; c < G_OC; ++c) o[i][c] *= corr;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p = exp2(s[i][j] - mref);
        s[i][j] = p;
        sum += p;
      }
      ps[i] = sum;
    }
    vstore4((float4)(ps[0], ps[1], ps[2], ps[3]), 0, redl + ci * G_BQ + ri * 8);
    vstore4((float4)(ps[4], ps[5], ps[6], ps[7]), 0, redl + ci * G_BQ + ri * 8 + 4);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      vstore4((float4)(s[0][j], s[1][j], s[2][j], s[3][j]), 0, Ps + (ci * 8 + j) * G_BQ + ri * 8);
      vstore4((float4)(s[4][j], s[5][j], s[6][j], s[7][j]), 0, Ps + (ci * 8 + j) * G_BQ + ri * 8 + 4);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < 8; ++c) sum += redl[c * G_BQ + ri * 8 + i];
      l[i] += sum;
    }
#pragma unroll 4
    for (int k = 0; k < G_BK; ++k) {
      const float4 pa = vload4(0, Ps + k * G_BQ + ri * 8), pb = vload4(0, Ps + k * G_BQ + ri * 8 + 4);
      const float pv[8] = {pa.x, pa.y, pa.z, pa.w, pb.x, pb.y, pb.z, pb.w};
      float vv[G_OC];
#if G_OC == 5
      const float4 va = vload4(0, Vs + k * G_D + ci * 4);
      vv[0] = va.x;
      vv[1] = va.y;
      vv[2] = va.z;
      vv[3] = va.w;
      vv[4] = Vs[k * G_D + 32 + ci];
#else
      const float4 va = vload4(0, Vs + k * G_D + ci * 8), vb = vload4(0, Vs + k * G_D + ci * 8 + 4);
      vv[0] = va.x;
      vv[1] = va.y;
      vv[2] = va.z;
      vv[3] = va.w;
      vv[4] = vb.x;
      vv[5] = vb.y;
      vv[6] = vb.z;
      vv[7] = vb.w;
#if G_OC == 10
      const float2 vc = vload2(0, Vs + k * G_D + 64 + ci * 2);
      vv[8] = vc.x;
      vv[9] = vc.y;
#endif
#endif
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int c = 0; c < G_OC; ++c) o[i][c] = mad(pv[i], vv[c], o[i][c]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = q0 + ri * 8 + i;
    if (r >= Sq) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    __global float* dst = O + oo + (n * Sq + r) * HD + col0;
#if G_OC == 5
    vstore4((float4)(o[i][0], o[i][1], o[i][2], o[i][3]) * inv, 0, dst + ci * 4);
    dst[32 + ci] = o[i][4] * inv;
#else
    vstore4((float4)(o[i][0], o[i][1], o[i][2], o[i][3]) * inv, 0, dst + ci * 8);
    vstore4((float4)(o[i][4], o[i][5], o[i][6], o[i][7]) * inv, 0, dst + ci * 8 + 4);
#if G_OC == 10
    vstore2((float2)(o[i][8], o[i][9]) * inv, 0, dst + 64 + ci * 2);
#endif
#endif
  }
}
