// SdGroupNorm on the GPU backends (kernels: ops/group_norm/gpu.kern): the one-kernel, LayerNorm-row, channels-last
// and two-stage paths, and the norm-table mode of the Winograd input-norm prologue.
#include <algorithm>
#include <memory>
#include <string>

#include "gpu/matmul_ops.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// Work-group size of group_norm_f32 / group_norm_finalize (GN_WG in their source): a correctness constant, the
// kernels size shared arrays by it.
constexpr size_t kGroupNormWg = 64;
// The two-stage group-norm kernels: the widest work-group of group_norm_partial[_rows] (GN_WG2, a correctness
// constant: their local arrays) and elements per group_norm_partial work-group (GN_CHUNK). Groups of at most one
// chunk keep the one-kernel path. A device with fewer invocations (GL ES 3.1 guarantees 128) runs them on the
// largest power of two it allows, down to kGroupNormWg2Min; below that the one-kernel path takes every group.
constexpr size_t kGroupNormWg2 = 256;
constexpr size_t kGroupNormWg2Min = 64;
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

// The element offset of a float32 buffer the kernels index directly (gamma, beta as float32_inputs_, the GroupNorm
// norm table): in floats whatever the activation storage of the partition.
int FloatOffset(const TensorRef& r) { return r.elem_offset(sizeof(float)); }

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
      SDGPU_RETURN_IF_ERROR(dev.Launch(*partial_rows_, p, {static_cast<size_t>(g_.n) * nchunks * wg2_, 1, 1},
                                       {wg2_, 1, 1}, timings));
    } else {
      p.Buf(scratch.buffer, parts).Buf(in[0]).Int(A).Int(C).Int(B).Int(G).Int(nchunks);
      SDGPU_RETURN_IF_ERROR(dev.Launch(*partial_, p, {ngroups * nchunks * wg2_, 1, 1}, {wg2_, 1, 1}, timings));
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
  size_t wg2_ = kGroupNormWg2;  // local size of group_norm_partial[_rows] on this device (a power of two)
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

}  // namespace

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
  while (u->wg2_ > dev.max_work_group_size()) u->wg2_ /= 2;
  if (u->count_ > kGroupNormChunk && u->wg2_ >= kGroupNormWg2Min &&
      dev.GetKernel("group_norm_partial", &u->partial_).ok() &&
      dev.GetKernel("group_norm_finalize", &u->finalize_).ok() &&
      dev.GetKernel("group_norm_apply", &u->apply_).ok()) {
    u->nchunks_ = static_cast<int>((u->count_ + kGroupNormChunk - 1) / kGroupNormChunk);
    if (g.b == 1 && g.c % 4 == 0 && g.c <= 4 * static_cast<int64_t>(u->wg2_) &&
        g.groups <= static_cast<int64_t>(u->wg2_) &&
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

}  // namespace sdgpu::gpu
