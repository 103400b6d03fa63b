// Sd* fused ops and DEQUANTIZE (kernels in ops/<op>/<backend> sources and
// backends/<backend>/kernels/elementwise.*).
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "common/half.h"
#include "gpu/attention_tiling.h"
#include "gpu/builtin_params.h"
#include "gpu/matmul_ops.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// Work-group size of group_norm_f32 / group_norm_finalize (GN_WG in their source) and of the fallback
// attention kernels (ATT_WG). Correctness constants: the kernels size shared arrays by them.
constexpr size_t kGroupNormWg = 64;
constexpr size_t kAttentionWg = 64;
constexpr int kMaxHeadDim = 256;  // ATT_MAXD in the fallback attention kernels
// The two-stage group-norm kernels: work-group size of group_norm_partial[_rows] (GN_WG2, a correctness
// constant) and elements per group_norm_partial work-group (GN_CHUNK). Groups of at most one chunk keep
// the one-kernel path.
constexpr size_t kGroupNormWg2 = 256;
constexpr int64_t kGroupNormChunk = 4096;
// Floats per work-group of group_norm_partial_rows (whole channel rows; not a correctness constant).
constexpr int64_t kGroupNormRowsChunk = 8192;
// group_norm_nhwc (ops/group_norm/gpu.kern): work-group size GN1_WG (a correctness constant, also the widest
// group cpg = C/G it takes) and the largest group it handles in one launch. One work-group per (batch, group)
// sweeps its group three times, so its time grows with the group while the three launches of the two-stage
// path cost ~18-20 us whatever the size. Measured on the H200 (SD1.5 UNet b1, BENCHMARKS.md): one launch
// 7.5 us vs 19.5 at 8x8x1280 (2560 floats per group), 10.9 vs 17.9 at 16x16x1280 (10240), but 20.5 vs 18.2 at
// 32x32x640 (20480) and 35.4 vs 20.8 at 64x64x320 (40960): one launch up to 16384 floats.
constexpr size_t kGroupNormNhwcWg = 512;
constexpr int64_t kGroupNormNhwcMax = 16384;

constexpr int kTiledMaxHeadDim = 512;  // ATT_DYN_MAXD

// The element offset of a float32 buffer the kernels index directly (gamma, beta as float32_inputs_, the GroupNorm
// norm table): in floats whatever the activation storage of the partition.
int FloatOffset(const TensorRef& r) { return r.elem_offset(sizeof(float)); }

// A constant's values copied into the op's output at every invoke (unary_f32 mode 0): the DEQUANTIZE of a constant
// whose output leaves the partition. Its device copy is made at the first Enqueue, stored like the activations (half
// with activations_fp16: unary_f32 reads its input through ACT_LD).
class ConstantOp final : public GpuOp {
 public:
  Status Enqueue(const Device& dev, const std::vector<TensorRef>&, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    SDGPU_RETURN_IF_ERROR(data_->Ensure(dev));
    Args a;
    a.Buf(out).Buf(data_->operand().buffer, 0).Int(n_).Int(0);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  void CollectWeights(std::vector<PackedWeights*>* out) override { out->push_back(data_.get()); }

  const Kernel* k_ = nullptr;
  int n_ = 0;
  std::unique_ptr<PackedWeights> data_;
};

// dequant_f16(y, yo, x (half), xo (in halves), int n)
class DequantF16Op final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out).Buf(in[0].buffer, in[0].elem_offset(2)).Int(n_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  int n_ = 0;
};

// Gated SdGelu (GEGLU): x [rows, 2F] (value half, then gate half) -> y [rows, F], y = value * gelu(gate), one
// read of the projection output instead of SLICE + SLICE + GELU + MUL. Kernels (ops/gelu/gpu.kern):
//   gelu_gated_f32(y, yo, x, xo, int rows, int F, int mode)       any F, one work-item per output element;
//   gelu_gated_f32_v4(y, yo, x, xo, int rows, int F4, int mode)   F = 4 * F4 and both tensors aligned to four
//                                                                 elements (decided per launch), offsets in float4
//                                                                 units;
// mode = the unary_f32 GELU code (12 erf, 13 tanh, 14 quick). 2-D launches, dim 0 = column, dim 1 = row, in
// kWg1D-invocation groups whose width is the next power of two >= the columns (narrow rows fill the group
// with more rows instead of idle lanes).
class SdGeluGatedOp final : public GpuOp {
 public:
  SdGeluGatedOp(const Kernel* k, const Kernel* k4, int mode, int rows, int f)
      : k_(k), k4_(k4), mode_(mode), rows_(rows), f_(f) {
    device_inputs_ = {0};
  }
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const int yo = out.elem_offset(), xo = in[0].elem_offset();
    const bool vec = k4_ != nullptr && yo % 4 == 0 && xo % 4 == 0;
    const int cols = vec ? f_ / 4 : f_;
    Args a;
    a.Buf(out.buffer, vec ? out.vec4_offset() : yo).Buf(in[0].buffer, vec ? in[0].vec4_offset() : xo);
    a.Int(rows_).Int(cols).Int(mode_);
    size_t width = 1;
    while (width < kWg1D && width < static_cast<size_t>(cols)) width *= 2;
    return dev.Launch(vec ? *k4_ : *k_, a, {static_cast<size_t>(cols), static_cast<size_t>(rows_), 1},
                      {width, kWg1D / width, 1}, timings);
  }

 private:
  const Kernel* k_;
  const Kernel* k4_;  // null: F % 4 != 0, or no float4 variant on this backend
  int mode_ = 12, rows_ = 0, f_ = 0;
};

// The LayerNorm view (groups == 1, x [R, 1, C], C % 4 == 0, C <= kLayerNormRowsMaxC, float4-aligned):
//   layer_norm_rows(y, yo, x, xo, gamma, go, beta, bo, int C4, float eps, int silu), one kLayerNormRowsWg-wide
//   work-group per row, the row held in registers (one read, one write); y/x offsets in float4 units.
// One kernel, channels last (B == 1, C/G <= kGroupNormNhwcWg, groups of <= kGroupNormNhwcMax elements):
//   group_norm_nhwc(y, yo, x, xo, gamma, go, beta, bo, int A, int C, int G, float eps, int silu);
//   one kGroupNormNhwcWg-wide work-group per (batch, group).
// One kernel (groups of <= kGroupNormChunk elements, or a backend without the two-stage kernels):
//   group_norm_f32(y, yo, x, xo, gamma, go, beta, bo, int A, int C, int B, int G, float eps, int silu);
//   one kGroupNormWg-wide work-group per (batch, group).
// Two-stage (large groups; ops/group_norm/gpu.kern documents the kernels): group_norm_partial over
// (batch, group, chunk) -- or, channels-last with C % 4 == 0 and a 16-byte aligned input,
// group_norm_partial_rows over (batch, chunk of whole rows) -- -> group_norm_finalize per (batch, group)
// -> group_norm_apply[4] per element; chunk partials and the per-group (mean, rstd) live in the op's
// arena scratch.
// Norm-table mode (EmitNormTable, the Winograd input-norm prologue): group_norm_nhwc_affine, or the two-stage
// partials then group_norm_finalize_affine, write [N][C] x (scale, shift) as the output; no apply launch.
class SdGroupNormOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::float32_inputs_;
  using GpuOp::scratch_bytes_;
  bool LayerNormEps(float* eps) const override {
    if (g_.groups != 1 || g_.a != 1 || g_.b != 1 || silu_ != 0 || table_) return false;
    *eps = eps_;
    return true;
  }
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef& scratch,
                 Timings* timings) override {
    const int A = static_cast<int>(g_.a), C = static_cast<int>(g_.c), B = static_cast<int>(g_.b);
    const int G = static_cast<int>(g_.groups);
    const size_t ngroups = static_cast<size_t>(g_.n * g_.groups);
    if (stats_chunks_ > 0) return EnqueueFromPartials(dev, in, out, scratch, timings);
    if (rows_kernel_ != nullptr && out.elem_offset() % 4 == 0 && in[0].elem_offset() % 4 == 0) {
      Args a;
      a.Buf(out.buffer, out.vec4_offset(), 4 * out.elem_bytes).Buf(in[0].buffer, in[0].vec4_offset(), 4 * in[0].elem_bytes);
      a.Buf(in[1].buffer, FloatOffset(in[1])).Buf(in[2].buffer, FloatOffset(in[2]));
      a.Int(C / 4).Float(eps_).Int(silu_);
      return dev.Launch(*rows_kernel_, a, {static_cast<size_t>(g_.n) * kLayerNormRowsWg, 1, 1},
                        {kLayerNormRowsWg, 1, 1}, timings);
    }
    if (nhwc_ != nullptr) {
      Args a;  // table mode: the output holds the float32 norm table
      a.Buf(out.buffer, table_ ? FloatOffset(out) : out.elem_offset()).Buf(in[0]);
      a.Buf(in[1].buffer, FloatOffset(in[1])).Buf(in[2].buffer, FloatOffset(in[2]));
      a.Int(A).Int(C).Int(G).Float(eps_);
      if (!table_) a.Int(silu_);
      return dev.Launch(table_ ? *nhwc_affine_ : *nhwc_, a, {ngroups * kGroupNormNhwcWg, 1, 1},
                        {kGroupNormNhwcWg, 1, 1}, timings);
    }
    if (partial_ == nullptr) {
      Args a;
      a.Buf(out).Buf(in[0]);
      a.Buf(in[1].buffer, FloatOffset(in[1])).Buf(in[2].buffer, FloatOffset(in[2]));
      a.Int(A).Int(C).Int(B).Int(G).Float(eps_).Int(silu_);
      return dev.Launch(*single_, a, {ngroups * kGroupNormWg, 1, 1}, {kGroupNormWg, 1, 1}, timings);
    }
    const int parts = scratch.elem_offset();
    const int stats = parts + static_cast<int>(3 * ngroups * std::max(nchunks_, row_chunks_));
    const bool by_rows = partial_rows_ != nullptr && in[0].elem_offset() % 4 == 0;
    const int nchunks = by_rows ? row_chunks_ : nchunks_;
    Args p;
    if (by_rows) {
      p.Buf(scratch.buffer, parts).Buf(in[0].buffer, in[0].vec4_offset(), 4 * in[0].elem_bytes).Int(A).Int(C).Int(G).Int(rows_);
      p.Int(nchunks);
      SDGPU_RETURN_IF_ERROR(dev.Launch(*partial_rows_, p, {static_cast<size_t>(g_.n) * nchunks * kGroupNormWg2, 1, 1},
                                       {kGroupNormWg2, 1, 1}, timings));
    } else {
      p.Buf(scratch.buffer, parts).Buf(in[0]).Int(A).Int(C).Int(B).Int(G).Int(nchunks);
      SDGPU_RETURN_IF_ERROR(dev.Launch(*partial_, p, {ngroups * nchunks * kGroupNormWg2, 1, 1},
                                       {kGroupNormWg2, 1, 1}, timings));
    }
    Args f;
    if (table_) {  // the norm table straight from the partials; the consumer applies it (no apply launch)
      f.Buf(out.buffer, FloatOffset(out)).Buf(scratch.buffer, parts).Int(nchunks).Int(static_cast<int>(count_));
      f.Float(eps_).Buf(in[1].buffer, FloatOffset(in[1])).Buf(in[2].buffer, FloatOffset(in[2])).Int(C).Int(G);
      return dev.Launch(*finalize_affine_, f, {ngroups * kGroupNormWg, 1, 1}, {kGroupNormWg, 1, 1}, timings);
    }
    f.Buf(scratch.buffer, stats).Buf(scratch.buffer, parts).Int(nchunks).Int(static_cast<int>(count_)).Float(eps_);
    SDGPU_RETURN_IF_ERROR(dev.Launch(*finalize_, f, {ngroups * kGroupNormWg, 1, 1}, {kGroupNormWg, 1, 1}, timings));
    // float4 apply when four neighbours share a channel or are four channels, and both tensors are 16-byte aligned.
    const bool vec = apply4_ != nullptr && out.elem_offset() % 4 == 0 && in[0].elem_offset() % 4 == 0;
    const int n = static_cast<int>(g_.n * A * C * B);
    Args a;
    a.Buf(out.buffer, vec ? out.vec4_offset() : out.elem_offset());
    a.Buf(in[0].buffer, vec ? in[0].vec4_offset() : in[0].elem_offset());
    a.Buf(in[1].buffer, FloatOffset(in[1])).Buf(in[2].buffer, FloatOffset(in[2])).Buf(scratch.buffer, stats);
    a.Int(A).Int(C).Int(B).Int(G).Int(silu_).Int(vec ? n / 4 : n);
    if (vec) a.Int(B == 1 ? 1 : 0);
    return Launch1D(dev, vec ? *apply4_ : *apply_, a, vec ? n / 4 : n, timings);
  }

  // The input-norm prologue's producer side (gpu/ops.h): channels-last groups (B == 1) on the one-launch or two-stage
  // path, whose affine kernel MakeSdGroupNorm fetched; the table is [N][C] x (scale, shift).
  size_t NormTableBytes(const Device&) const override {
    // (finalize_affine_ is fetched for the statistics epilogue too: the table needs the two-stage path's partials)
    const Kernel* affine = nhwc_ != nullptr ? nhwc_affine_ : partial_ != nullptr ? finalize_affine_ : nullptr;
    if (affine == nullptr || g_.b != 1 || rows_kernel_ != nullptr) return 0;
    return static_cast<size_t>(g_.n * g_.c) * 2 * sizeof(float);
  }
  void EmitNormTable() override { table_ = true; }

  bool GroupStatsGeometry(int64_t* n, int64_t* positions, int64_t* channels, int* groups) const override {
    if (!stats_kernels_ || g_.b != 1 || rows_kernel_ != nullptr || g_.groups > INT_MAX) return false;
    *n = g_.n;
    *positions = g_.a;
    *channels = g_.c;
    *groups = static_cast<int>(g_.groups);
    return true;
  }
  void TakeGroupStats(int chunks) override {
    stats_chunks_ = chunks;
    if (!table_) scratch_bytes_ = std::max(scratch_bytes_, static_cast<size_t>(2 * g_.n * g_.groups) * sizeof(float));
  }

  const Kernel* single_ = nullptr;
  const Kernel* rows_kernel_ = nullptr;  // layer_norm_rows: the LayerNorm view (see MakeSdGroupNorm)
  const Kernel* nhwc_ = nullptr;  // group_norm_nhwc: channels-last groups that fit one launch
  const Kernel* partial_ = nullptr;  // null: one-kernel path
  const Kernel* partial_rows_ = nullptr;  // null: not channels-last with C % 4 == 0
  const Kernel* finalize_ = nullptr;
  const Kernel* apply_ = nullptr;
  const Kernel* apply4_ = nullptr;  // null: shape not vectorisable
  GroupNormGeometry g_;
  int64_t count_ = 0;  // elements per group
  int nchunks_ = 0;     // group_norm_partial chunks per group
  int rows_ = 0, row_chunks_ = 0;  // group_norm_partial_rows: positions per chunk, chunks per batch
  float eps_ = 1e-5f;
  int silu_ = 0;
  bool table_ = false;  // EmitNormTable: write the norm table, not the normalised tensor
  const Kernel* nhwc_affine_ = nullptr;      // group_norm_nhwc_affine (null: the backend lacks it)
  const Kernel* finalize_affine_ = nullptr;  // group_norm_finalize_affine (null: the backend lacks it)
  // The statistics epilogue (TakeGroupStats; channels-last): the partials come from the producer, so only
  // finalize_affine_ (table mode) or finalize_ + apply[4]_ run, whatever path the shape picked otherwise;
  // MakeSdGroupNorm fetched those for every channels-last op.
  bool stats_kernels_ = false;
  int stats_chunks_ = 0;  // > 0: partials per (image, group) in stats_buffer_ (TakeGroupStats)

 private:
  Status EnqueueFromPartials(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out,
                             const TensorRef& scratch, Timings* timings) {
    const int C = static_cast<int>(g_.c), G = static_cast<int>(g_.groups), A = static_cast<int>(g_.a);
    const size_t ngroups = static_cast<size_t>(g_.n * g_.groups);
    const TensorRef& part = stats_buffer_;
    Args f;
    if (table_) {
      f.Buf(out.buffer, FloatOffset(out)).Buf(part).Int(stats_chunks_);
      f.Int(static_cast<int>(count_)).Float(eps_).Buf(in[1].buffer, FloatOffset(in[1]));
      f.Buf(in[2].buffer, FloatOffset(in[2])).Int(C).Int(G);
      return dev.Launch(*finalize_affine_, f, {ngroups * kGroupNormWg, 1, 1}, {kGroupNormWg, 1, 1}, timings);
    }
    f.Buf(scratch).Buf(part).Int(stats_chunks_);
    f.Int(static_cast<int>(count_)).Float(eps_);
    SDGPU_RETURN_IF_ERROR(dev.Launch(*finalize_, f, {ngroups * kGroupNormWg, 1, 1}, {kGroupNormWg, 1, 1}, timings));
    const bool vec = apply4_ != nullptr && out.elem_offset() % 4 == 0 && in[0].elem_offset() % 4 == 0;
    const int n = static_cast<int>(g_.n * A * C);
    Args a;
    a.Buf(out.buffer, vec ? out.vec4_offset() : out.elem_offset());
    a.Buf(in[0].buffer, vec ? in[0].vec4_offset() : in[0].elem_offset());
    a.Buf(in[1].buffer, FloatOffset(in[1])).Buf(in[2].buffer, FloatOffset(in[2]));
    a.Buf(scratch).Int(A).Int(C).Int(1).Int(G).Int(silu_).Int(vec ? n / 4 : n);
    if (vec) a.Int(1);
    return Launch1D(dev, vec ? *apply4_ : *apply_, a, vec ? n / 4 : n, timings);
  }
};

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

// x: the gated input [..., 2F] (shape already checked by InferGeluShape: last dim even).
Status MakeSdGeluGated(const Device& dev, int mode, const Dims& x, std::unique_ptr<GpuOp>* out) {
  const int64_t n = NumElements(x);
  if (n >= (int64_t{1} << 31)) {
    return Status::Error("gated input of " + std::to_string(n) + " elements above the 2^31 - 1 limit");
  }
  const int64_t f = x.empty() ? 0 : x.back() / 2;
  const int64_t rows = f == 0 ? 0 : n / (2 * f);
  const Kernel* k = nullptr;
  const Kernel* k4 = nullptr;
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("gelu_gated_f32", &k));
  if (f % 4 != 0 || !dev.GetKernel("gelu_gated_f32_v4", &k4).ok()) k4 = nullptr;
  *out = std::make_unique<SdGeluGatedOp>(k, k4, mode, static_cast<int>(rows), static_cast<int>(f));
  return Status::Ok();
}

Status MakeSdGroupNorm(const Device& dev, const GroupNormAttrs& attrs, const Dims& x, std::unique_ptr<GpuOp>* out) {
  auto u = std::make_unique<SdGroupNormOp>();
  u->g_ = GroupNormGeometryFor(attrs, x);
  const GroupNormGeometry& g = u->g_;
  u->eps_ = attrs.eps;
  u->silu_ = attrs.activation == GroupNormActivation::kSilu ? 1 : 0;
  u->device_inputs_ = {0, 1, 2};
  u->float32_inputs_ = {1, 2};  // gamma, beta: read as float32 (x and y are activation storage)
  u->count_ = g.a * (g.c / g.groups) * g.b;
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("group_norm_f32", &u->single_));
  // the statistics epilogue's kernels (GroupStatsGeometry): channels-last groups
  u->stats_kernels_ = g.b == 1 && g.n * g.a * g.c <= INT_MAX &&
                      dev.GetKernel("group_norm_finalize", &u->finalize_).ok() &&
                      dev.GetKernel("group_norm_finalize_affine", &u->finalize_affine_).ok() &&
                      dev.GetKernel("group_norm_apply", &u->apply_).ok();
  if (u->stats_kernels_ && (g.c % 4 != 0 || !dev.GetKernel("group_norm_apply4", &u->apply4_).ok())) {
    u->apply4_ = nullptr;
  }
  // The LayerNorm view ([R, 1, C], one group): one work-group per row, the row in registers (row kernel when
  // the backend has it and C fits; float4-aligned tensors are checked per launch).
  if (g.groups == 1 && g.a == 1 && g.b == 1 && g.c % 4 == 0 && g.c <= kLayerNormRowsMaxC &&
      dev.max_work_group_size() >= kLayerNormRowsWg && !dev.GetKernel("layer_norm_rows", &u->rows_kernel_).ok()) {
    u->rows_kernel_ = nullptr;
  }
  if (u->rows_kernel_ == nullptr && g.b == 1 && g.c / g.groups <= static_cast<int64_t>(kGroupNormNhwcWg) &&
      u->count_ <= kGroupNormNhwcMax && dev.max_work_group_size() >= kGroupNormNhwcWg &&
      dev.GetKernel("group_norm_nhwc", &u->nhwc_).ok()) {
    if (!dev.GetKernel("group_norm_nhwc_affine", &u->nhwc_affine_).ok()) {
      u->nhwc_affine_ = nullptr;
    }
    *out = std::move(u);
    return Status::Ok();
  }
  u->nhwc_ = nullptr;
  if (u->count_ > kGroupNormChunk && dev.max_work_group_size() >= kGroupNormWg2 &&
      dev.GetKernel("group_norm_partial", &u->partial_).ok() &&
      dev.GetKernel("group_norm_finalize", &u->finalize_).ok() &&
      dev.GetKernel("group_norm_apply", &u->apply_).ok()) {
    u->nchunks_ = static_cast<int>((u->count_ + kGroupNormChunk - 1) / kGroupNormChunk);
    if (g.b == 1 && g.c % 4 == 0 && g.c <= 4 * static_cast<int64_t>(kGroupNormWg2) &&
        g.groups <= static_cast<int64_t>(kGroupNormWg2) &&
        dev.GetKernel("group_norm_partial_rows", &u->partial_rows_).ok()) {
      u->rows_ = static_cast<int>(std::max<int64_t>(1, kGroupNormRowsChunk / g.c));
      u->row_chunks_ = static_cast<int>((g.a + u->rows_ - 1) / u->rows_);
    } else {
      u->partial_rows_ = nullptr;
    }
    const size_t ngroups = static_cast<size_t>(g.n * g.groups);
    u->scratch_bytes_ = (3 * ngroups * std::max(u->nchunks_, u->row_chunks_) + 2 * ngroups) * sizeof(float);
    if (!dev.GetKernel("group_norm_finalize_affine", &u->finalize_affine_).ok()) {
      u->finalize_affine_ = nullptr;
    }
    const bool vec4 = g.b % 4 == 0 || (g.b == 1 && g.c % 4 == 0);
    if (!vec4 || !dev.GetKernel("group_norm_apply4", &u->apply4_).ok()) u->apply4_ = nullptr;
  } else {
    u->partial_ = nullptr;
  }
  *out = std::move(u);
  return Status::Ok();
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
  // (the vendor kernels, inline PTX and tensor cores, keep float32 storage: none with activations_fp16)
  const std::vector<AttnTiling> vendor = dev.act_half() ? std::vector<AttnTiling>{} : dev.vendor_attention_tilings();
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
      const bool fits = scratch_elems <= INT_MAX;                                    // kernel offsets are int32
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
    // The limit of what this device could run: the any-head-dim tiled kernels when it has them and takes them.
    const AttnTiling* dyn = *std::find_if(table.begin(), table.end(), [](const AttnTiling* t) {
      return std::strcmp(t->suffix, "dyn") == 0;
    });  // the any-head-dim tiling (AttnTilingTable has it)
    const bool has_tiled = !legacy_only && dev.HasKernel("attn_flash_dyn");
    const bool tiled = has_tiled && AttnTilingFits(dev, *dyn, flash);
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

}  // namespace

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

Status DequantizeConstant(const abi::TfLiteTensor* in, int64_t n, float* v) {
  if (!IsConstant(in)) return Status::Error("not a constant tensor");
  if (in->type == abi::kTfLiteFloat16) {
    if (in->bytes != static_cast<size_t>(n) * 2) return Status::Error("fp16 constant of the wrong size");
    if (v == nullptr) return Status::Ok();
    const auto* h = reinterpret_cast<const uint16_t*>(in->data.raw);
    for (int64_t i = 0; i < n; ++i) v[i] = FloatFromHalf(h[i]);
    return Status::Ok();
  }
  if (in->type != abi::kTfLiteInt8 && in->type != abi::kTfLiteUInt8) return Status::Error("unsupported input type");
  if (in->bytes != static_cast<size_t>(n)) return Status::Error("int8 constant of the wrong size");
  const Dims d = DimsOf(in);
  const auto* q =
      in->quantization.type == 1 ? static_cast<const AffineQuantization*>(in->quantization.params) : nullptr;
  if (q == nullptr || q->scale == nullptr || q->scale->size < 1) {
    return Status::Error("int8 weights without affine quantization");
  }
  const int qd = q->quantized_dimension;
  if (q->scale->size > 1 && (qd < 0 || qd >= static_cast<int>(d.size()) || d[qd] != q->scale->size)) {
    return Status::Error("per-channel scales that do not match the quantized dimension");
  }
  if (v == nullptr) return Status::Ok();
  int64_t inner = 1;
  for (size_t k = qd + 1; k < d.size(); ++k) inner *= d[k];
  for (int64_t i = 0; i < n; ++i) {
    const int c = q->scale->size == 1 ? 0 : static_cast<int>((i / inner) % d[qd]);
    const int zp = q->zero_point != nullptr && q->zero_point->size > c ? q->zero_point->data[c] : 0;
    const int raw = in->type == abi::kTfLiteInt8 ? static_cast<int>(reinterpret_cast<const int8_t*>(in->data.raw)[i])
                                                : static_cast<int>(in->data.uint8[i]);
    v[i] = static_cast<float>(raw - zp) * q->scale->data[c];
  }
  return Status::Ok();
}

Status MakeDequantize(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const abi::TfLiteTensor* in = node.inputs[0];
  const int64_t n = NumElements(DimsOf(node.outputs[0]));
  if (node.outputs[0]->type != abi::kTfLiteFloat32) return Status::Error("output must be float32");
  if (in->type == abi::kTfLiteFloat16 && !IsConstant(in)) {
    auto u = std::make_unique<DequantF16Op>();
    u->n_ = static_cast<int>(n);
    u->device_inputs_ = {0};
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("dequant_f16", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  if (!IsConstant(in)) return Status::Error("only fp16 activations or constant weights can be dequantized");
  // Checked now (the graph is validated by building every op), converted and uploaded at the first Enqueue like
  // every packed weight (PackedWeights): the validation build uploads nothing. A DEQUANTIZE whose output stays
  // inside its partition never gets here: the partition folds it into a host constant its readers see as float32
  // weights (GpuPartition::FoldConstantDequantizes); this op is for one whose output leaves the partition.
  SDGPU_RETURN_IF_ERROR(DequantizeConstant(in, n, nullptr));
  auto u = std::make_unique<ConstantOp>();
  u->n_ = static_cast<int>(n);
  u->data_ = std::make_unique<PackedWeights>(static_cast<size_t>(n), dev.act_half(), [in, n](float* dst) {
    (void)DequantizeConstant(in, n, dst);  // checked above
  });
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("unary_f32", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

int GeluKernelCode(const GeluAttrs& attrs) {
  return attrs.approximate == GeluApproximation::kTanh    ? kGeluKernelErf + 1
         : attrs.approximate == GeluApproximation::kQuick ? kGeluKernelErf + 2
                                                          : kGeluKernelErf;
}

Status MakeSdOp(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const ParsedOp& op = *node.sd_op;
  const Dims x = DimsOf(node.inputs[0]);
  switch (op.def->kind) {
    case OpKind::kGelu: {
      const auto& a = std::get<GeluAttrs>(op.attrs);
      const int code = GeluKernelCode(a);
      if (a.gated) return MakeSdGeluGated(dev, code, x, out);
      return MakeUnary(dev, code, NumElements(x), out);
    }
    case OpKind::kGroupNorm:
      return MakeSdGroupNorm(dev, std::get<GroupNormAttrs>(op.attrs), x, out);
    case OpKind::kAttention:
      return MakeSdAttention(dev, std::get<AttentionAttrs>(op.attrs), x, DimsOf(node.inputs[1]),
                             node.attention_key_splits, out);
    case OpKind::kConv2DWinograd:
      return MakeWinogradConv(dev, node, out);  // gpu/winograd_ops.cc
  }
  return Status::Error("unhandled Sd* op");
}

}  // namespace sdgpu::gpu
