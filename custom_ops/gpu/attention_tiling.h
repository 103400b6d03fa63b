// The tiled SdAttention kernel families as the planner (ops/attention/gpu.cc) sees them: one AttnTiling per instantiation
// suffix of ops/attention/gpu.kern (backend-neutral, table kAttnTilings) or of a vendor file (a backend's
// Device::vendor_attention_tilings(), e.g. backends/opencl/nvidia/attention_tilings.cc), with the local memory each
// of its kernels declares, so that a device whose limit is smaller skips it (GL ES 3.1 guarantees 16 KiB).
#pragma once

#include <cstddef>
#include <vector>

namespace sdgpu::gpu {

// Bytes of local (GL: shared) memory of a tiling's kernels: attn_flash_<t> (and attn_flash_ks_<t>), attn_stats_<t>,
// attn_pv_<t>.
struct AttnLocalBytes {
  size_t flash = 0;
  size_t stats = 0;
  size_t pv = 0;
};

// A tensor-core tiling (flash only, no causal mask): kTc3xTf32 = 3xTF32 products, kTcFp64 = FP64 tensor cores; a
// candidate only with the delegate option tensor_cores=3xtf32 / fp64 (or when attention_tiling forces it).
enum AttnTc { kTcNone = 0, kTc3xTf32 = 1, kTcFp64 = 2 };

// The kernels attn_{flash,stats,pv}_<suffix>: queries per work-group (bq) and work-group size (nt) -- correctness
// constants that mirror the instantiation lines of the kernel source -- and when the planner picks them.
// head_dim 0 = any head dim up to max_head_dim. min_keys: picked only for Sk >= min_keys. bk: keys per staged tile
// (NS * KS) of the row-wise tilings, which also have the key-split kernel attn_flash_ks_<suffix>; 0 = no key split.
// auto_split: the delegate splits this tiling's keys in 2 on its own when the grid has at most one work-group per
// compute unit (AttnKeySplits). max_groups_per_cu: > 0 = picked only when its grid (batch x heads x query blocks)
// has at most that many work-groups per compute unit. before (vendor tilings): the backend-neutral tiling this one
// is tried before.
struct AttnTiling {
  const char* suffix;
  int head_dim;
  int max_head_dim;
  size_t bq;
  size_t nt;
  int min_keys;
  int bk;
  bool auto_split;
  int max_groups_per_cu;
  int tc;
  AttnLocalBytes local;
  const char* before;
};

constexpr int kForcedOnly = 1 << 30;  // min_keys of tilings reached only through the attention_tiling option

// The backend-neutral tilings (attention_tiling.cc kAttnTilings) with `vendor` (a device's
// vendor_attention_tilings(), which must outlive the result) each in front of the tiling it names, those naming none
// last: the planner's candidates in order.
std::vector<const AttnTiling*> AttnTilingTable(const std::vector<AttnTiling>& vendor);

constexpr size_t AttnMax(size_t a, size_t b) { return a > b ? a : b; }

// The block-tiled kernels (ATT_INSTANTIATE(T, DFIX, BQ, BK, RM, NC, DC, JC, DMAX)): qs BQ x odd(ceil(DC/4)) and ks
// BK x odd(ceil(DC/4)) float4, vs JC x ceil(DMAX/4) float4, ps BQ x (BK + 4) floats, red BQ x NC floats (attn_stats:
// qs, ks and red twice).
constexpr AttnLocalBytes AttnBlockLocalBytes(size_t bq, size_t bk, size_t nc, size_t dc, size_t jc, size_t dmax) {
  const size_t odd4 = ((dc + 3) / 4) | 1;
  const size_t qk = 16 * (bq + bk) * odd4, v = 16 * jc * ((dmax + 3) / 4), p = 16 * (bq * (bk + 4) / 4);
  return {qk + v + p + 4 * bq * nc, qk + 8 * bq * nc, qk + v + p};
}

// The row-wise kernels (ATR_INSTANTIATE(T, D, RM, RW, NS, KS, DB, LZ, QL, DS); ATR_LDS4): the partial scores of DS > 1
// pass through local memory, except with NVIDIA's shuffle exchange (`shuffle`, ATR_XS).
constexpr size_t AttnRowLds4(size_t d, size_t rm, size_t rw, size_t ns, size_t ks, size_t db, size_t ql, size_t kv,
                             size_t ds, bool shuffle) {
  return AttnMax(ql * rw * rm * (d / 4) + (1 + db) * ns * ks * (d / 4) * kv +
                     (ds > 1 && !shuffle ? rw * ns * ds * rm * ks / 4 : 0),
                 (2 * ns * rw * rm) / 4 + (ns / 2) * rw * rm * (d / 4));
}
constexpr AttnLocalBytes AttnRowLocalBytes(size_t d, size_t rm, size_t rw, size_t ns, size_t ks, size_t db, size_t ql,
                                           size_t ds, bool shuffle = false) {
  return {16 * AttnRowLds4(d, rm, rw, ns, ks, db, ql, 2, ds, shuffle),
          16 * AttnRowLds4(d, rm, rw, ns, ks, db, ql, 1, ds, shuffle),
          16 * AttnRowLds4(d, rm, rw, ns, ks, db, ql, 2, ds, shuffle)};
}

// attn_short_q<BQ> (ATS_INSTANTIATE): qp max(BQ x 11 float4, BQ x 84 floats), kv 80 x 11 float4, red BQ x 10 floats,
// lsum BQ floats.
constexpr size_t AttnShortLocalBytes(size_t bq) { return 16 * AttnMax(bq * 84 / 4, bq * 11) + 16 * 80 * 11 + 44 * bq; }

}  // namespace sdgpu::gpu
