// SdAttention on the GPU backends (kernels: ops/attention/gpu.kern, the vendor ones through the device's
// vendor_attention_tilings): the tiled flash / partial-softmax paths, the short-sequence kernels, key splits, and the
// fallback kernels.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "gpu/attention_tiling.h"
#include "gpu/builtin_params.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// Work-group size of the fallback attention kernels (ATT_WG): a correctness constant, the kernels size shared arrays
// by it.
constexpr size_t kAttentionWg = 64;
constexpr int kMaxHeadDim = 256;  // ATT_MAXD in the fallback attention kernels
constexpr int kTiledMaxHeadDim = 512;  // ATT_DYN_MAXD

// Tiled kernels (the fast path, see gpu/attention_tiling.cc): one NT-wide work-group per (batch, head, block of BQ
// queries); K/V tiles in local memory, no S x S matrix. Fallback (attention_tiling=legacy, or a device that takes
// none of them): one kAttentionWg-wide work-group per (batch, head, query row). Both kernel families take
//   flash:   attn_flash*(O, oo, Q, qo, K, ko, V, vo, int Sq, int Sk, int H, int D, float scale, int causal)
//   partial: attn_stats*(stats, so, Q, qo, K, ko, Sq, Sk, H, D, scale, causal), then
//            attn_pv*(O, oo, stats, so, Q, qo, K, ko, V, vo, Sq, Sk, H, D, scale, causal);
//            stats (row max m and sum s) live in the op's arena scratch; a family's stats are only
//            meaningful to the same family's attn_pv (the tiled ones work in log2 units).
class SdAttentionOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::scratch_bytes_;
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef& scratch,
                 Timings* timings) override {
    if (splits_ > 1) return EnqueueKeySplit(dev, in, out, scratch, timings);
    const Dim3 global = {groups_ * wg_, 1, 1}, local = {wg_, 1, 1};
    const TensorRef &q = in[0], &k = in[1], &v = in[2];
    if (attrs_.variant == AttentionVariant::kFlash || single_pass_) {
      Args a;
      a.Buf(out).Buf(q).Buf(k);
      a.Buf(v);
      ShapeArgs(&a);
      return dev.Launch(*k1_, a, global, local, timings);
    }
    Args s;
    s.Buf(scratch).Buf(q).Buf(k);
    ShapeArgs(&s);
    SDGPU_RETURN_IF_ERROR(dev.Launch(*k1_, s, global, local, timings));
    Args a;
    a.Buf(out).Buf(scratch).Buf(q);
    a.Buf(k).Buf(v);
    ShapeArgs(&a);
    return dev.Launch(*k2_, a, global, local, timings);
  }

  // The trailing parameters every attention kernel takes: int Sq, int Sk, int H, int D, float scale, int causal.
  void ShapeArgs(Args* a) const {
    a->Int(sq_).Int(sk_).Int(attrs_.heads).Int(attrs_.head_dim).Float(attrs_.scale).Int(attrs_.causal ? 1 : 0);
  }

  // attn_flash_ks_<t> over splits_ key ranges of kps_ keys into the scratch (parts, then stats), then attn_merge.
  Status EnqueueKeySplit(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out,
                         const TensorRef& scratch, Timings* timings) {
    const TensorRef &q = in[0], &k = in[1], &v = in[2];
    const int hd = attrs_.heads * attrs_.head_dim;
    const int pstride = n_ * sq_ * hd, sstride = 2 * n_ * attrs_.heads * sq_;
    const int po = scratch.elem_offset(), so = po + splits_ * pstride;
    Args a;
    a.Buf(scratch.buffer, po).Int(pstride).Buf(scratch.buffer, so).Int(sstride);
    a.Buf(q).Buf(k).Buf(v);
    ShapeArgs(&a);
    a.Int(kps_);
    SDGPU_RETURN_IF_ERROR(dev.Launch(*k1_, a, {groups_ * wg_, static_cast<size_t>(splits_), 1}, {wg_, 1, 1}, timings));
    const int total4 = pstride / 4;
    Args m;
    m.Buf(out).Buf(scratch.buffer, po).Int(pstride).Buf(scratch.buffer, so).Int(sstride);
    m.Int(splits_).Int(sq_).Int(attrs_.heads).Int(attrs_.head_dim).Int(total4);
    return Launch1D(dev, *k2_, m, static_cast<size_t>(total4), timings);
  }

  const Kernel* k1_ = nullptr;
  const Kernel* k2_ = nullptr;
  AttentionAttrs attrs_;
  int n_ = 0, sq_ = 0, sk_ = 0;
  size_t groups_ = 0, wg_ = 0;
  int splits_ = 1, kps_ = 0;  // key split (flash, row-wise tilings): splits_ ranges of kps_ keys
  bool single_pass_ = false;  // attn_short_q*: one launch with the exact softmax for either variant
};

// attn_short_q<BQ> (ops/attention/gpu.kern "Short key sequences"): work-group size ATS_NT, keys up to ATS_KMAX, BQ
// one of kAttnShortBq. Correctness constants.
constexpr size_t kAttnShortNt = 160;
constexpr int kAttnShortMaxKeys = 80;
constexpr int kAttnShortBq[] = {16, 32, 64};

// Whether attn_short_q* runs an attention of `keys` keys at `head_dim` (unless attention_tiling forces a tiling): up
// to 80 keys, at every head dim but 160. H200, 8 heads, device ms (BENCHMARKS.md, attn_lab.py --small, call 7):
// 4096 x 77 d40 b1 q64 0.0278 vs d40 0.0304, b2 0.0491 vs 0.0527; 1024 x 77 d80 b1 0.0213 vs d80 0.0249, b2 0.0290
// vs 0.0344; the text encoder's 77 x 77 d64 (12 heads) q16 0.0162 vs "dyn" 0.0321; but at d160 r160 was faster from
// 64 to 256 queries at b1 (256 x 77: 0.0243 vs q16 0.0272).
bool UseAttnShort(int keys, int head_dim) {
  return keys <= kAttnShortMaxKeys && head_dim % 4 == 0 && head_dim != 160;
}

// The query block of attn_short_q*: the largest whose grid (`blocks_of(bq)` work-groups) still gives every two compute
// units one work-group, else the smallest; blocks whose local memory exceeds the device's `local_bytes` are skipped
// (0: none fits). Each work-group stages all of K and V, so larger blocks amortise that better wherever the grid stays
// near a wave: H200 (132 CUs, BENCHMARKS.md), 1024 x 77 d80 b1 q64 (128 work-groups) 0.0209 vs q32 0.0249 / q16
// 0.0365 ms; but the text encoder's 77 x 77 d64, 12 heads: q16 (60) 0.0161 vs q32 (36) 0.0169 / q64 (24) 0.0200, and
// 256 x 77 d160: b1 q16 (128) 0.0276 vs q64 (32) 0.0348, b2 q32 (128) 0.0292 vs q16 0.0395 / q64 0.0346. `forced_bq`
// (attention_tiling=short16 / short32 / short64) wins where it fits.
template <typename BlocksOf>
int AttnShortBq(const BlocksOf& blocks_of, int compute_units, int forced_bq, size_t local_bytes) {
  const auto fits = [&](int bq) { return AttnShortLocalBytes(static_cast<size_t>(bq)) <= local_bytes; };
  if (forced_bq > 0) return fits(forced_bq) ? forced_bq : 0;
  int smallest = 0;
  for (int i = static_cast<int>(std::size(kAttnShortBq)) - 1; i >= 0; --i) {
    const int bq = kAttnShortBq[i];
    if (!fits(bq)) continue;
    smallest = bq;
    if (compute_units <= 0 || 2 * blocks_of(static_cast<size_t>(bq)) >= static_cast<size_t>(compute_units)) return bq;
  }
  return smallest;
}

// Key splits for a flash attention of `groups` work-groups over `key_tiles` staged key tiles (AttnTiling::bk keys
// each) on `compute_units` CUs. forced: delegate option attention_key_splits (0 = the rule below, 1 = never, n = n
// splits, capped at key_tiles). The rule: 2 splits for a tiling marked auto_split whose grid has at most one
// work-group per compute unit (and >= 4 key tiles), else none. Measured on an H200 (132 CUs;
// BENCHMARKS.md, attn_lab.py --splits, split + merge launch vs unsplit): r80 at b1's 32x32 self-attention (128
// work-groups) 0.134 vs 0.147 ms with 2 splits, but 3-8 splits (a second wave at 2 resident work-groups per SM)
// and every r160 shape (16x16 / 8x8 self and cross, b1 and b2: the per-work-group fixed cost, not the key loop,
// bounds those) were slower or equal, and so was any split of a grid that already fills the device.
int AttnKeySplits(size_t groups, int key_tiles, int compute_units, int forced, bool auto_split) {
  if (forced >= 1) return std::max(1, std::min(forced, key_tiles));
  const bool split = auto_split && compute_units > 0 && groups <= static_cast<size_t>(compute_units) && key_tiles >= 4;
  return split ? 2 : 1;
}

// The delegate option attention_tiling=<suffix> forces one tiling (benchmarks, e.g. bench/opencl_attn_bench.py,
// and tests; "legacy" = the fallback kernels); a forced tiling that cannot run the head dim is ignored.
const char* ForcedAttnTiling(const Device& dev) {
  const std::string& t = dev.overrides().attention_tiling;
  return t.empty() ? nullptr : t.c_str();
}

// The tilings of `table` for `head_dim`, `keys` (Sk) and `blocks_of(bq)` work-groups on `compute_units` CUs, best
// first: those of its own head dim whose min_keys and max_groups_per_cu it meets, in table order, then the
// any-head-dim one. A forced tiling is the only candidate whenever it fits the head dim.
template <typename BlocksOf>
std::vector<const AttnTiling*> AttnTilingCandidates(const std::vector<const AttnTiling*>& table, int head_dim,
                                                    int keys, const BlocksOf& blocks_of, int compute_units,
                                                    const char* forced) {
  std::vector<const AttnTiling*> own, any;
  for (const AttnTiling* t : table) {
    const bool fits = t->head_dim == 0 ? head_dim <= t->max_head_dim : head_dim == t->head_dim;
    if (!fits) continue;
    if (forced != nullptr && std::strcmp(forced, t->suffix) == 0) return {t};
    if (keys < t->min_keys) continue;
    if (t->max_groups_per_cu > 0 &&
        (compute_units <= 0 || blocks_of(t->bq) > static_cast<size_t>(t->max_groups_per_cu) * compute_units)) {
      continue;
    }
    (t->head_dim == 0 ? any : own).push_back(t);
  }
  own.insert(own.end(), any.begin(), any.end());
  return own;
}

// Whether the device takes a tiling's work-group and the local memory of the kernels that `flash` (else the
// partial-softmax pair) launches.
bool AttnTilingFits(const Device& dev, const AttnTiling& t, bool flash) {
  const size_t local = flash ? t.local.flash : std::max(t.local.stats, t.local.pv);
  return t.nt <= dev.max_work_group_size() && local <= dev.local_memory_bytes();
}

}  // namespace

Status MakeSdAttention(const Device& dev, const AttentionAttrs& attrs, const Dims& q, const Dims& k, int key_splits,
                       std::unique_ptr<GpuOp>* out) {
  auto u = std::make_unique<SdAttentionOp>();
  u->attrs_ = attrs;
  u->n_ = static_cast<int>(q[0]);
  u->sq_ = static_cast<int>(q[1]);
  u->sk_ = static_cast<int>(k[1]);
  u->device_inputs_ = {0, 1, 2};
  const bool flash = attrs.variant == AttentionVariant::kFlash;
  const size_t rows = static_cast<size_t>(u->n_) * attrs.heads * u->sq_;
  if (!flash) u->scratch_bytes_ = rows * 2 * sizeof(float);  // the m and s vectors

  const char* forced = ForcedAttnTiling(dev);
  const bool legacy_only = forced != nullptr && std::strcmp(forced, "legacy") == 0;
  const auto blocks_of = [&](size_t bq) {
    return static_cast<size_t>(u->n_) * attrs.heads * ((static_cast<size_t>(u->sq_) + bq - 1) / bq);
  };
  // (the vendor kernels, inline PTX and tensor cores, keep float32 storage: none with activations_fp16, in its float
  // storage islands either)
  const std::vector<AttnTiling> vendor =
      dev.default_act_half() ? std::vector<AttnTiling>{} : dev.vendor_attention_tilings();
  const std::vector<const AttnTiling*> table = AttnTilingTable(vendor);
  // a tensor-core tiling runs flash without a causal mask, with its tensor_cores option or when attention_tiling
  // forces it
  const auto tc_ok = [&](const AttnTiling& t) {
    const bool wanted = t.tc == kTcFp64 ? dev.overrides().tensor_cores_fp64 : dev.overrides().tensor_cores_3xtf32;
    return flash && !attrs.causal && (wanted || (forced != nullptr && std::strcmp(forced, t.suffix) == 0));
  };
  // The kernels of tiling t for this op (into k1_ / k2_), if the device has them and takes their work-group and local
  // memory.
  const auto pick = [&](const AttnTiling& t) {
    if (!AttnTilingFits(dev, t, flash) || (t.tc != kTcNone && !tc_ok(t))) return false;
    const std::string sfx = std::string("_") + t.suffix;
    return flash ? dev.GetKernel("attn_flash" + sfx, &u->k1_).ok()
                 : dev.GetKernel("attn_stats" + sfx, &u->k1_).ok() && dev.GetKernel("attn_pv" + sfx, &u->k2_).ok();
  };
  // A forced tiling of this head dim that this device cannot run (local memory, work-group size, kernel) is ignored:
  // the op picks as without the option.
  if (forced != nullptr && !legacy_only) {
    const std::vector<const AttnTiling*> one =
        AttnTilingCandidates(table, attrs.head_dim, u->sk_, blocks_of, dev.compute_units(), forced);
    if (one.size() == 1 && std::strcmp(forced, one[0]->suffix) == 0 && !pick(*one[0])) forced = nullptr;
    u->k1_ = u->k2_ = nullptr;
  }
  // Short key sequences (SD's cross-attention, 77 keys): one launch with every key in the work-group, either variant
  // (it computes the same exact softmax), where UseAttnShort says; attention_tiling=short forces it where it fits.
  // "short" (the block by AttnShortBq) or "short16" / "short32" / "short64" (a block whose local memory the device
  // lacks: the block AttnShortBq picks among those that fit)
  int forced_bq = 0;
  bool forced_short = false;
  if (forced != nullptr && std::strncmp(forced, "short", 5) == 0) {
    for (int bq : kAttnShortBq) {
      if (std::strcmp(forced + 5, std::to_string(bq).c_str()) == 0) forced_bq = bq;
    }
    forced_short = forced[5] == '\0' || forced_bq > 0;
  }
  const bool short_ok = u->sk_ <= kAttnShortMaxKeys && attrs.head_dim % 4 == 0 &&
                        dev.max_work_group_size() >= kAttnShortNt &&
                        (forced_short || (forced == nullptr && UseAttnShort(u->sk_, attrs.head_dim)));
  int short_bq = short_ok ? AttnShortBq(blocks_of, dev.compute_units(), forced_bq, dev.local_memory_bytes()) : 0;
  if (short_ok && short_bq == 0 && forced_bq > 0) {
    short_bq = AttnShortBq(blocks_of, dev.compute_units(), 0, dev.local_memory_bytes());
  }
  if (short_bq > 0) {
    if (dev.GetKernel("attn_short_q" + std::to_string(short_bq), &u->k1_).ok()) {
      u->single_pass_ = true;
      u->scratch_bytes_ = 0;
      u->groups_ = blocks_of(static_cast<size_t>(short_bq));
      u->wg_ = kAttnShortNt;
      *out = std::move(u);
      return Status::Ok();
    }
    u->k1_ = nullptr;
  }
  const std::vector<const AttnTiling*> candidates =
      legacy_only ? std::vector<const AttnTiling*>{}
                  : AttnTilingCandidates(table, attrs.head_dim, u->sk_, blocks_of, dev.compute_units(), forced);
  for (const AttnTiling* t : candidates) {
    if (pick(*t)) {
      u->groups_ = blocks_of(t->bq);
      u->wg_ = t->nt;
      const int key_tiles = t->bk > 0 ? (u->sk_ + t->bk - 1) / t->bk : 0;
      const int splits = flash && !attrs.causal && t->bk > 0 && attrs.head_dim % 4 == 0
                             ? AttnKeySplits(u->groups_, key_tiles, dev.compute_units(), key_splits, t->auto_split)
                             : 1;
      const Kernel* ks = nullptr;
      const Kernel* merge = nullptr;
      const size_t parts = static_cast<size_t>(u->n_) * u->sq_ * attrs.heads * attrs.head_dim;
      const int kps = splits > 1 ? (key_tiles + splits - 1) / splits * t->bk : 0;
      const int used = splits > 1 ? (u->sk_ + kps - 1) / kps : 1;  // no empty range
      const size_t scratch_elems = static_cast<size_t>(used) * (parts + 2 * rows);  // O parts, then (m, l) stats
      // the O parts and statistics are one scratch operand (GL: one storage block binding)
      const bool fits = dev.ScratchOperandFits(static_cast<int64_t>(scratch_elems));
      if (splits > 1 && fits && dev.GetKernel("attn_flash_ks" + std::string("_") + t->suffix, &ks).ok() &&
          dev.GetKernel("attn_merge", &merge).ok()) {
        u->kps_ = kps;
        u->splits_ = used;
        u->k1_ = ks;
        u->k2_ = merge;
        u->scratch_bytes_ = scratch_elems * sizeof(float);
      }
      *out = std::move(u);
      return Status::Ok();
    }
  }
  u->k1_ = u->k2_ = nullptr;
  if (attrs.head_dim > kMaxHeadDim) {
    // The limit of what this device could run: the any-head-dim tiled kernels when it has them and takes them
    // (dyn128, the smallest of them, names their needs).
    const AttnTiling* smallest = *std::find_if(table.begin(), table.end(), [](const AttnTiling* t) {
      return std::strcmp(t->suffix, "dyn128") == 0;
    });  // the any-head-dim tiling for small devices (AttnTilingTable has it)
    const bool has_tiled = !legacy_only && dev.HasKernel("attn_flash_dyn128");
    const bool tiled = has_tiled && AttnTilingFits(dev, *smallest, flash);
    return Status::Error("head_dim " + std::to_string(attrs.head_dim) + " above the kernel limit " +
                         std::to_string(tiled ? kTiledMaxHeadDim : kMaxHeadDim) +
                         (has_tiled && !tiled ? " (the kernels up to " + std::to_string(kTiledMaxHeadDim) +
                                                    " need more local memory or a larger work-group than this "
                                                    "device's " + std::to_string(dev.local_memory_bytes()) +
                                                    " bytes / " + std::to_string(dev.max_work_group_size()) + ")"
                                              : std::string()));
  }
  u->groups_ = rows;
  u->wg_ = kAttentionWg;
  if (flash) {
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("attn_flash", &u->k1_));
  } else {
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("attn_stats", &u->k1_));
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("attn_pv", &u->k2_));
  }
  *out = std::move(u);
  return Status::Ok();
}

bool IsAttentionTilingName(const std::string& name, const std::vector<AttnTiling>& vendor) {
  if (name == "legacy" || name == "short") return true;
  for (int bq : kAttnShortBq) {
    if (name == "short" + std::to_string(bq)) return true;
  }
  for (const AttnTiling* t : AttnTilingTable(vendor)) {
    if (name == t->suffix) return true;
  }
  return false;
}

}  // namespace sdgpu::gpu
