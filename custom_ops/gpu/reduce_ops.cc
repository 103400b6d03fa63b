// Reductions (kernels in backends/<backend>/kernels/reduce.*): MEAN/SUM/
// REDUCE_MAX over adjacent axes and row SOFTMAX, one work-group per output
// (row) with a shared-memory tree; few outputs over long contiguous rows go
// through two stages (chunk partials in scratch, then the per-row tree). Tensors are in activation storage
// (ACT_*, elem_offset()); the partials stay float.
#include <algorithm>

#include "gpu/builtin_params.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// Work-group size of reduce_f32 / softmax_f32. Correctness constant: the
// kernels size their shared tree by RED_WG (= this) at compile time.
constexpr size_t kReduceWg = 64;
// Two-stage reductions: elements per reduce_partial work-group, and when to use them (rows of at least
// two chunks, and few enough outputs that one work-group per output would leave the device idle).
constexpr int kReduceChunk = 4096;
constexpr int kTwoStageMaxOutputs = 2048;

// reduce_f32(y, yo, x, xo, int red, int inner, int mode); x viewed as [outer, red, inner].
// Two-stage (inner == 1): reduce_partial(part, po, x, xo, int red, int chunk, int nchunks, int mode, float scale)
// over (row, chunk) into the op's scratch (float), then reduce_f32_part (reduce_f32 reading float x) over the
// partials ([outer, nchunks, 1], sum or max).
class ReduceOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::scratch_bytes_;
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef& scratch,
                 Timings* timings) override {
    const size_t outputs = static_cast<size_t>(outer_) * inner_;
    if (partial_ == nullptr) {
      Args a;
      a.Buf(out).Buf(in[0]).Int(red_).Int(inner_).Int(mode_);
      return dev.Launch(*k_, a, {outputs * kReduceWg, 1, 1}, {kReduceWg, 1, 1}, timings);
    }
    Args p;
    const int po = scratch.elem_offset(sizeof(float));  // float partials
    p.Buf(scratch.buffer, po).Buf(in[0]).Int(red_).Int(kReduceChunk);
    p.Int(nchunks_).Int(mode_).Float(mode_ == 0 ? 1.0f / static_cast<float>(red_) : 1.0f);
    SDGPU_RETURN_IF_ERROR(
        dev.Launch(*partial_, p, {outputs * nchunks_ * kReduceWg, 1, 1}, {kReduceWg, 1, 1}, timings));
    Args a;
    a.Buf(out).Buf(scratch.buffer, po).Int(nchunks_).Int(1);
    a.Int(mode_ == 2 ? 2 : 1);
    return dev.Launch(*sum_parts_, a, {outputs * kReduceWg, 1, 1}, {kReduceWg, 1, 1}, timings);
  }

  const Kernel* k_ = nullptr;
  const Kernel* partial_ = nullptr;    // null: one stage
  const Kernel* sum_parts_ = nullptr;  // reduce_f32_part (two stages)
  int outer_ = 1, red_ = 1, inner_ = 1, mode_ = 0, nchunks_ = 0;
};

// softmax_f32(y, yo, x, xo, int cols, float beta)
class SoftmaxOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out).Buf(in[0]).Int(cols_).Float(beta_);
    return dev.Launch(*k_, a, {static_cast<size_t>(rows_) * kReduceWg, 1, 1}, {kReduceWg, 1, 1}, timings);
  }

  const Kernel* k_ = nullptr;
  int rows_ = 0, cols_ = 0;
  float beta_ = 1.0f;
};

}  // namespace

Status MakeReduce(const Device& dev, const NodeDesc& node, int mode, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(node.inputs[0]->type == abi::kTfLiteFloat32, "only float32"));
  SDGPU_RETURN_IF_ERROR(Need(IsConstant(node.inputs[1]), "axes must be constant"));
  const Dims in = DimsOf(node.inputs[0]);
  const int rank = static_cast<int>(in.size());
  std::vector<bool> red(rank, false);
  for (int32_t a : ConstInts(node.inputs[1])) {
    const int ax = a < 0 ? a + rank : a;
    SDGPU_RETURN_IF_ERROR(Need(ax >= 0 && ax < rank, "bad axis"));
    red[ax] = true;
  }
  int first = rank, last = -1;
  for (int d = 0; d < rank; ++d) {
    if (red[d] && in[d] != 1) {
      first = std::min(first, d);
      last = std::max(last, d);
    }
  }
  auto u = std::make_unique<ReduceOp>();
  u->outer_ = 1;
  u->red_ = 1;
  u->inner_ = 1;
  if (last >= 0) {
    for (int d = first; d <= last; ++d) {
      SDGPU_RETURN_IF_ERROR(Need(red[d] || in[d] == 1, "reduced axes must be adjacent"));
    }
    for (int d = 0; d < first; ++d) u->outer_ *= static_cast<int>(in[d]);
    for (int d = first; d <= last; ++d) u->red_ *= static_cast<int>(in[d]);
    for (int d = last + 1; d < rank; ++d) u->inner_ *= static_cast<int>(in[d]);
  } else {
    u->outer_ = static_cast<int>(NumElements(in));
  }
  u->mode_ = mode;
  u->device_inputs_ = {0};
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("reduce_f32", &u->k_));
  if (u->inner_ == 1 && u->red_ >= 2 * kReduceChunk && u->outer_ <= kTwoStageMaxOutputs &&
      dev.GetKernel("reduce_partial", &u->partial_).ok() && dev.GetKernel("reduce_f32_part", &u->sum_parts_).ok()) {
    u->nchunks_ = (u->red_ + kReduceChunk - 1) / kReduceChunk;
    u->scratch_bytes_ = static_cast<size_t>(u->outer_) * u->nchunks_ * sizeof(float);
  } else {
    u->partial_ = nullptr;
  }
  *out = std::move(u);
  return Status::Ok();
}

Status MakeSoftmax(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto* prm = static_cast<const SoftmaxParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && node.inputs[0]->type == abi::kTfLiteFloat32, "only float32"));
  const Dims in = DimsOf(node.inputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(!in.empty(), "scalar softmax"));
  auto u = std::make_unique<SoftmaxOp>();
  u->cols_ = static_cast<int>(in.back());
  u->rows_ = static_cast<int>(NumElements(in) / std::max<int64_t>(1, in.back()));
  u->beta_ = prm->beta;
  u->device_inputs_ = {0};
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("softmax_f32", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

}  // namespace sdgpu::gpu
