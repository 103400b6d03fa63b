// Sum of v over the n work-items of the work-group (n = the local size, a power of two) through scratch[n];
// every work-item gets the total. The trailing barrier lets the caller reuse scratch for its next reduction.
inline float gn_tree_sum(__local float* scratch, float v, const int n) {
  const int lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = n / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] += scratch[lid + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}

// SdGroupNorm (+ optional SiLU) in ONE kernel: one work-group per (batch, group).
// x viewed as [N, A, C, B] (channels on axis 2 of the view), group g owns
// channels [g*cpg, (g+1)*cpg). Two-pass statistics (mean, then centred sum of
// squares) through local memory, then the normalise+affine+activation write.
// The work-group size is GN_WG and must equal kGroupNormWg on the host (gpu/sd_ops.cc).
#define GN_WG 64
__kernel void group_norm_f32(__global float* y, int yo, __global const float* x, int xo, __global const float* gamma,
                             int go, __global const float* beta, int bo, int A, int C, int B, int G, float eps,
                             int silu) {
  __local float scratch[GN_WG];
  const int ng = get_group_id(0);
  const int n = ng / G, g = ng % G;
  const int cpg = C / G;
  const int lid = get_local_id(0), lsz = get_local_size(0);
  const int count = A * cpg * B;
  // element e of the group -> (a, c_in_group, b)
  float sum = 0.0f;
  for (int e = lid; e < count; e += lsz) {
    const int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    sum += x[xo + ((n * A + a) * C + g * cpg + cg) * B + b];
  }
  const float mean = gn_tree_sum(scratch, sum, lsz) / (float)count;
  float sq = 0.0f;
  for (int e = lid; e < count; e += lsz) {
    const int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    const float d = x[xo + ((n * A + a) * C + g * cpg + cg) * B + b] - mean;
    sq += d * d;
  }
  const float inv = rsqrt(gn_tree_sum(scratch, sq, lsz) / (float)count + eps);
  for (int e = lid; e < count; e += lsz) {
    const int b = e % B, cg = (e / B) % cpg, a = e / (B * cpg);
    const int c = g * cpg + cg;
    const int idx = ((n * A + a) * C + c) * B + b;
    float v = (x[xo + idx] - mean) * inv * gamma[go + c] + beta[bo + c];
    if (silu) v = v / (1.0f + exp(-v));
    y[yo + idx] = v;
  }
}

// ---------------------------------------------------------------------------
// Channels-last groups in ONE launch (B == 1, cpg = C/G <= GN1_WG, group of at most kGroupNormNhwcMax floats
// on the host): one GN1_WG-wide work-group per (n, g). Work-item lid owns channel c = lid % cpg of the group
// for every position a = lid / cpg (mod rpi = GN1_WG / cpg rows per sweep), so gamma/beta are read once and
// the loops carry no index division; three sweeps over the group (sum, centred sum of squares, write), the
// second and third mostly from cache. The two-stage path below needs three launches (partials, finalize,
// apply) that cost ~18-20 us per GroupNorm on the H200 whatever the size; this kernel's time grows with the
// group (one work-group does it all), so the host takes it for small groups only (gpu/sd_ops.cc).
//   group_norm_nhwc(y, yo, x, xo, gamma, go, beta, bo, int A, int C, int G, float eps, int silu)
//   global = (N*G*GN1_WG), local = (GN1_WG); GN1_WG is mirrored by kGroupNormNhwcWg (gpu/sd_ops.cc).
// ---------------------------------------------------------------------------
#define GN1_WG 512

// The statistics sweeps of group_norm_nhwc[_affine] for group (n, g), xg at this work-item's channel of the group's
// first position, r = its row of the sweep: mean and rstd (every work-item gets them).
inline void gn_nhwc_stats(__local float* scratch, __global const float* xg, int A, int C, int cpg, int r, float eps,
                          float* mean_out, float* rstd_out) {
  const int rpi = GN1_WG / cpg, step = rpi * C;
  const bool active = r < rpi;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int a = r;
  if (active) {
    for (; a + 3 * rpi < A; a += 4 * rpi) {  // four independent loads in flight per iteration
      const int i = a * C;
      s0 += xg[i];
      s1 += xg[i + step];
      s2 += xg[i + 2 * step];
      s3 += xg[i + 3 * step];
    }
    for (; a < A; a += rpi) s0 += xg[a * C];
  }
  const float count = (float)(A * cpg);
  const float mean = gn_tree_sum(scratch, (s0 + s1) + (s2 + s3), GN1_WG) / count;
  s0 = s1 = s2 = s3 = 0.0f;
  a = r;
  if (active) {
    for (; a + 3 * rpi < A; a += 4 * rpi) {
      const int i = a * C;
      const float d0 = xg[i] - mean, d1 = xg[i + step] - mean, d2 = xg[i + 2 * step] - mean,
                  d3 = xg[i + 3 * step] - mean;
      s0 = mad(d0, d0, s0);
      s1 = mad(d1, d1, s1);
      s2 = mad(d2, d2, s2);
      s3 = mad(d3, d3, s3);
    }
    for (; a < A; a += rpi) {
      const float d = xg[a * C] - mean;
      s0 = mad(d, d, s0);
    }
  }
  *mean_out = mean;
  *rstd_out = rsqrt(gn_tree_sum(scratch, (s0 + s1) + (s2 + s3), GN1_WG) / count + eps);
}

__kernel __attribute__((reqd_work_group_size(GN1_WG, 1, 1))) void group_norm_nhwc(
    __global float* y, int yo, __global const float* x, int xo, __global const float* gamma, int go,
    __global const float* beta, int bo, int A, int C, int G, float eps, int silu) {
  __local float scratch[GN1_WG];
  const int ng = get_group_id(0), n = ng / G, g = ng % G;
  const int cpg = C / G, rpi = GN1_WG / cpg;
  const int lid = get_local_id(0), c = lid % cpg, r = lid / cpg;
  const bool active = r < rpi;
  const int off = n * A * C + g * cpg + c;
  __global const float* xg = x + xo + off;
  float mean, rstd;
  gn_nhwc_stats(scratch, xg, A, C, cpg, r, eps, &mean, &rstd);
  if (!active) return;
  const int ch = g * cpg + c;
  const float scale = rstd * gamma[go + ch], shift = beta[bo + ch];
  __global float* yg = y + yo + off;
  for (int a = r; a < A; a += rpi) {
    float v = mad(xg[a * C] - mean, scale, shift);
    if (silu) v = v / (1.0f + exp(-v));
    yg[a * C] = v;
  }
}

// Channel ch of image n in the norm table of the *_affine kernels below.
inline void gn_write_affine(__global float* table, int to, int n, int C, int ch, float mean, float rstd,
                            __global const float* gamma, int go, __global const float* beta, int bo) {
  const float scale = rstd * gamma[go + ch];
  table[to + 2 * (n * C + ch)] = scale;
  table[to + 2 * (n * C + ch) + 1] = beta[bo + ch] - mean * scale;
}

// The norm table instead of the normalised tensor (the input-norm prologue, gpu/ops.h GpuOp::FuseInputNorm):
// table[2*(n*C + c)] = scale = rstd * gamma[c], [.. + 1] = shift = beta[c] - mean * scale, so that the consumer
// computes y = x * scale + shift (then SiLU) while it reads x. Same launch as group_norm_nhwc; no third sweep.
//   group_norm_nhwc_affine(table, to, x, xo, gamma, go, beta, bo, int A, int C, int G, float eps)
__kernel __attribute__((reqd_work_group_size(GN1_WG, 1, 1))) void group_norm_nhwc_affine(
    __global float* table, int to, __global const float* x, int xo, __global const float* gamma, int go,
    __global const float* beta, int bo, int A, int C, int G, float eps) {
  __local float scratch[GN1_WG];
  const int ng = get_group_id(0), n = ng / G, g = ng % G;
  const int cpg = C / G;
  const int lid = get_local_id(0), c = lid % cpg, r = lid / cpg;
  float mean, rstd;
  gn_nhwc_stats(scratch, x + xo + n * A * C + g * cpg + c, A, C, cpg, r, eps, &mean, &rstd);
  if (r == 0) gn_write_affine(table, to, n, C, g * cpg + c, mean, rstd, gamma, go, beta, bo);  // one per channel
}

// ---------------------------------------------------------------------------
// Two-stage path for large groups (the VAE's 512x512x128 GroupNorms: 32 groups
// of 1M elements would leave all but 32 work-groups of the GPU idle above).
// A group's elements, in memory order, are runs of L = cpg*B contiguous floats
// (one run per position a): element e of group (n, g) is at
//   ((n*A + a)*C + g*cpg)*B + (e - a*L),  a = e / L.
//   1. group_norm_partial: one GN_WG2-wide work-group per (n, g, chunk of
//      GN_CHUNK elements): chunk count, mean and centred sum of squares M2
//      (two passes over the chunk, the second from cache) -> part[3*k ..];
//   2. group_norm_finalize: one GN_WG-wide work-group per (n, g) combines the
//      chunks exactly (mean = sum n_i mean_i / N; M2 = sum M2_i + n_i (mean_i - mean)^2,
//      no E[x^2] - E[x]^2 cancellation) -> stats[2*ng] = mean, [2*ng+1] = 1/sqrt(var + eps);
//   3. group_norm_apply: one work-item per element (or per float4 when four
//      neighbours share a channel or are four consecutive channels):
//      y = (x - mean) * rstd * gamma[c] + beta[c], then SiLU when asked.
// Signatures (host: SdGroupNormOp in gpu/sd_ops.cc; GN_WG2 / GN_CHUNK mirrored there):
//   group_norm_partial(part, po, x, xo, int A, int C, int B, int G, int nchunks)
//   group_norm_finalize(stats, so, part, po, int nchunks, int count, float eps)
//   group_norm_finalize_affine(table, ...): the norm table instead of (mean, rstd), no apply (see
//                              group_norm_nhwc_affine; used for the input-norm prologue)
//   group_norm_apply(y, yo, x, xo, gamma, go, beta, bo, stats, so, int A, int C, int B, int G, int silu, int n)
//   group_norm_apply4(same; n counts float4s; vec_channels = 1: the four are consecutive channels (B == 1),
//                     0: the four share one channel (B % 4 == 0)) + int vec_channels
// ---------------------------------------------------------------------------
#define GN_WG2 256
#define GN_CHUNK 4096

__kernel void group_norm_partial(__global float* part, int po, __global const float* x, int xo, int A, int C, int B,
                                 int G, int nchunks) {
  __local float scratch[GN_WG2];
  const int k = get_group_id(0);  // (n*G + g)*nchunks + chunk
  const int chunk = k % nchunks, ng = k / nchunks;
  const int n = ng / G, g = ng % G;
  const int cpg = C / G, L = cpg * B;
  const int count = A * L;
  const int e0 = chunk * GN_CHUNK, e1 = min(count, e0 + GN_CHUNK);
  const int lid = get_local_id(0);
  __global const float* xg = x + xo + (n * A * C + g * cpg) * B;  // run a starts at xg + a*C*B
  const int run_stride = C * B;
  float sum = 0.0f;
  for (int e = e0 + lid; e < e1; e += GN_WG2) {
    const int a = e / L;
    sum += xg[a * run_stride + (e - a * L)];
  }
  const float cnt = (float)(e1 - e0);
  const float mean = gn_tree_sum(scratch, sum, GN_WG2) / cnt;
  float sq = 0.0f;
  for (int e = e0 + lid; e < e1; e += GN_WG2) {
    const int a = e / L;
    const float d = xg[a * run_stride + (e - a * L)] - mean;
    sq += d * d;
  }
  const float m2 = gn_tree_sum(scratch, sq, GN_WG2);
  if (lid == 0) {
    part[po + 3 * k] = cnt;
    part[po + 3 * k + 1] = mean;
    part[po + 3 * k + 2] = m2;
  }
}

// Channels-last variant of stage 1 (B == 1, C % 4 == 0, C <= 4*GN_WG2, G <= GN_WG2): one work-group per
// (n, chunk of `rows` positions) reads whole rows of C channels as float4 (coalesced, unlike the per-group walk
// above, which touches cpg floats of every C-float row) and produces the partials of ALL G groups of the chunk:
// per-thread float4 channel sums -> local per-channel sums -> per-group sums (two passes: mean, then centred
// M2). Same part layout: part[3*((n*G + g)*nchunks + chunk) ..] = (count, mean, M2). xo in float4 units.
// group_norm_partial_rows(part, po, x (float4), xo, int A, int C, int G, int rows, int nchunks)
inline void gn_rows_reduce(__local float4* l4, __local float* chan, __local float* grp, float4 acc, int tpr, int rpp,
                           int C, int G) {
  const int lid = get_local_id(0);
  l4[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid < tpr) {
    float4 s = (float4)(0.0f);
    for (int r = 0; r < rpp; ++r) s += l4[lid + r * tpr];
    chan[4 * lid] = s.s0;
    chan[4 * lid + 1] = s.s1;
    chan[4 * lid + 2] = s.s2;
    chan[4 * lid + 3] = s.s3;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int cpg = C / G;
  if (lid < G) {
    float s = 0.0f;
    for (int c = lid * cpg; c < (lid + 1) * cpg; ++c) s += chan[c];
    grp[lid] = s;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
}

__kernel void group_norm_partial_rows(__global float* part, int po, __global const float4* x, int xo, int A, int C,
                                      int G, int rows, int nchunks) {
  __local float4 l4[GN_WG2];
  __local float chan[4 * GN_WG2];
  __local float gmean[GN_WG2];
  __local float gm2[GN_WG2];
  const int k = get_group_id(0);  // n*nchunks + chunk
  const int n = k / nchunks, chunk = k % nchunks;
  const int lid = get_local_id(0);
  const int tpr = C / 4, rpp = GN_WG2 / tpr;
  const int c4 = lid % tpr, r0 = lid / tpr;
  const int a0 = chunk * rows, a1 = min(A, a0 + rows);
  const int cpg = C / G;
  const bool active = r0 < rpp;
  __global const float4* xr = x + xo + (n * A) * tpr + c4;
  float4 acc = (float4)(0.0f);
  if (active) {
    for (int a = a0 + r0; a < a1; a += rpp) acc += xr[a * tpr];
  }
  gn_rows_reduce(l4, chan, gmean, acc, tpr, rpp, C, G);
  const float cnt = (float)((a1 - a0) * cpg);
  const int c = 4 * c4;
  const float4 mean4 = (float4)(gmean[c / cpg], gmean[(c + 1) / cpg], gmean[(c + 2) / cpg], gmean[(c + 3) / cpg]) / cnt;
  float4 sq = (float4)(0.0f);
  if (active) {
    for (int a = a0 + r0; a < a1; a += rpp) {
      const float4 d = xr[a * tpr] - mean4;
      sq += d * d;
    }
  }
  gn_rows_reduce(l4, chan, gm2, sq, tpr, rpp, C, G);
  if (lid < G) {
    const int idx = 3 * ((n * G + lid) * nchunks + chunk);
    part[po + idx] = cnt;
    part[po + idx + 1] = gmean[lid] / cnt;
    part[po + idx + 2] = gm2[lid];
  }
}

// The exact combination of group (ng)'s chunk partials: mean and rstd (every work-item gets them).
inline void gn_combine(__local float* scratch, __global const float* part, int po, int ng, int nchunks, int count,
                       float eps, float* mean_out, float* rstd_out) {
  const int lid = get_local_id(0);
  __global const float* p = part + po + 3 * ng * nchunks;
  float s = 0.0f;
  for (int i = lid; i < nchunks; i += GN_WG) s += p[3 * i] * p[3 * i + 1];
  const float mean = gn_tree_sum(scratch, s, GN_WG) / (float)count;
  float m2 = 0.0f;
  for (int i = lid; i < nchunks; i += GN_WG) {
    const float d = p[3 * i + 1] - mean;
    m2 += p[3 * i + 2] + p[3 * i] * d * d;
  }
  *mean_out = mean;
  *rstd_out = rsqrt(gn_tree_sum(scratch, m2, GN_WG) / (float)count + eps);
}

__kernel void group_norm_finalize(__global float* stats, int so, __global const float* part, int po, int nchunks,
                                  int count, float eps) {
  __local float scratch[GN_WG];
  const int ng = get_group_id(0);
  float mean, rstd;
  gn_combine(scratch, part, po, ng, nchunks, count, eps, &mean, &rstd);
  if (get_local_id(0) == 0) {
    stats[so + 2 * ng] = mean;
    stats[so + 2 * ng + 1] = rstd;
  }
}

// group_norm_finalize writing the norm table of group_norm_nhwc_affine (channels of the group, x [N, A, C, 1]):
//   group_norm_finalize_affine(table, to, part, po, int nchunks, int count, float eps, gamma, go, beta, bo, int C,
//                              int G)
__kernel void group_norm_finalize_affine(__global float* table, int to, __global const float* part, int po,
                                         int nchunks, int count, float eps, __global const float* gamma, int go,
                                         __global const float* beta, int bo, int C, int G) {
  __local float scratch[GN_WG];
  const int ng = get_group_id(0), n = ng / G, g = ng % G, cpg = C / G;
  float mean, rstd;
  gn_combine(scratch, part, po, ng, nchunks, count, eps, &mean, &rstd);
  for (int c = get_local_id(0); c < cpg; c += GN_WG) {
    gn_write_affine(table, to, n, C, g * cpg + c, mean, rstd, gamma, go, beta, bo);
  }
}

inline float gn_affine(float v, float mean, float rstd, float gm, float bt, int silu) {
  v = (v - mean) * rstd * gm + bt;
  return silu ? v / (1.0f + exp(-v)) : v;
}

__kernel void group_norm_apply(__global float* y, int yo, __global const float* x, int xo, __global const float* gamma,
                               int go, __global const float* beta, int bo, __global const float* stats, int so, int A,
                               int C, int B, int G, int silu, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int c = (i / B) % C;
  const int ng = (i / (A * C * B)) * G + c / (C / G);
  const float mean = stats[so + 2 * ng], rstd = stats[so + 2 * ng + 1];
  y[yo + i] = gn_affine(x[xo + i], mean, rstd, gamma[go + c], beta[bo + c], silu);
}

__kernel void group_norm_apply4(__global float4* y, int yo, __global const float4* x, int xo,
                                __global const float* gamma, int go, __global const float* beta, int bo,
                                __global const float* stats, int so, int A, int C, int B, int G, int silu, int n,
                                int vec_channels) {
  const int i = get_global_id(0);  // float4 index; yo/xo are in float4 units here
  if (i >= n) return;
  const int e = 4 * i;
  const int c = (e / B) % C;
  const int cpg = C / G;
  const int nbase = (e / (A * C * B)) * G;
  const float4 v = x[xo + i];
  float4 r;
  if (vec_channels) {  // four consecutive channels (B == 1, C % 4 == 0): groups may differ
    const int g0 = nbase + c / cpg, g1 = nbase + (c + 1) / cpg, g2 = nbase + (c + 2) / cpg, g3 = nbase + (c + 3) / cpg;
    r.s0 = gn_affine(v.s0, stats[so + 2 * g0], stats[so + 2 * g0 + 1], gamma[go + c], beta[bo + c], silu);
    r.s1 = gn_affine(v.s1, stats[so + 2 * g1], stats[so + 2 * g1 + 1], gamma[go + c + 1], beta[bo + c + 1], silu);
    r.s2 = gn_affine(v.s2, stats[so + 2 * g2], stats[so + 2 * g2 + 1], gamma[go + c + 2], beta[bo + c + 2], silu);
    r.s3 = gn_affine(v.s3, stats[so + 2 * g3], stats[so + 2 * g3 + 1], gamma[go + c + 3], beta[bo + c + 3], silu);
  } else {  // one channel (B % 4 == 0)
    const int ng = nbase + c / cpg;
    const float mean = stats[so + 2 * ng], rstd = stats[so + 2 * ng + 1], gm = gamma[go + c], bt = beta[bo + c];
    r.s0 = gn_affine(v.s0, mean, rstd, gm, bt, silu);
    r.s1 = gn_affine(v.s1, mean, rstd, gm, bt, silu);
    r.s2 = gn_affine(v.s2, mean, rstd, gm, bt, silu);
    r.s3 = gn_affine(v.s3, mean, rstd, gm, bt, silu);
  }
  y[yo + i] = r;
}

// ---------------------------------------------------------------------------
// Row-wise fast path (the LayerNorm view the converter emits: groups == 1, one position per batch row,
// x [R, 1, C] channels last, C % 4 == 0, C <= 4 * LN_WG * LN_V4): one LN_WG-wide work-group per row keeps
// the row in registers as float4s, so each element is read once and written once (the general kernels
// above read it two or three times, with per-element index arithmetic); mean, then the centred variance
// from the registers (no E[x^2] - E[x]^2 cancellation), then normalise + affine (+ SiLU).
//   layer_norm_rows(y, yo, x, xo, gamma, go, beta, bo, int C4, float eps, int silu)
//   y/x offsets in float4 units, gamma/beta offsets in floats; global = (R * LN_WG), local = (LN_WG).
// ---------------------------------------------------------------------------
#define LN_WG 64
#define LN_V4 8

__kernel __attribute__((reqd_work_group_size(LN_WG, 1, 1))) void layer_norm_rows(
    __global float4* y, int yo, __global const float4* x, int xo, __global const float* gamma, int go,
    __global const float* beta, int bo, int C4, float eps, int silu) {
  __local float red[LN_WG];
  const int row = get_group_id(0), lid = get_local_id(0);
  const int base = row * C4;
  // Centred on x0 = the row's first element: values are held as x - x0 (exact for a row of one scale) and centred as
  // (x - x0) - (mean - x0), so neither the sum nor the rounding of a mean far from zero enters them (mean 1000,
  // spread 2: a plain sum and x - mean put ~1e-4 of the spread into every output; tests/native/
  // test_opencl_layer_norm_fold.py, offset 1000).
  const float x0 = x[xo + base].x;
  float4 v[LN_V4];
  float s = 0.0f;
  for (int t = 0; t < LN_V4; ++t) {
    const int c = lid + t * LN_WG;
    v[t] = (c < C4 ? x[xo + base + c] : (float4)(x0)) - x0;
    s += (v[t].x + v[t].y) + (v[t].z + v[t].w);
  }
  const float inv_n = 1.0f / (4.0f * (float)C4);
  const float md = gn_tree_sum(red, s, LN_WG) * inv_n;  // mean - x0
  float q = 0.0f;
  for (int t = 0; t < LN_V4; ++t) {
    if (lid + t * LN_WG < C4) {
      const float4 d = v[t] - md;
      q += dot(d, d);
    }
  }
  const float rstd = rsqrt(gn_tree_sum(red, q, LN_WG) * inv_n + eps);
  for (int t = 0; t < LN_V4; ++t) {
    const int c = lid + t * LN_WG;
    if (c >= C4) break;
    float4 r = (v[t] - md) * rstd * vload4(c, gamma + go) + vload4(c, beta + bo);
    if (silu) r = r / (1.0f + exp(-r));
    y[yo + base + c] = r;
  }
}
