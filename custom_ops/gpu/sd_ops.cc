// DEQUANTIZE and the dispatch of the Sd* fused ops to their GPU host code, which lives next to each op's kernels and
// CPU reference (ops/<op>/gpu.cc; the Winograd conv: ops/conv2d_winograd/gpu.cc).
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "common/half.h"
#include "gpu/builtin_params.h"
#include "gpu/matmul_ops.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

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

}  // namespace

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
      return MakeWinogradConv(dev, node, out);  // ops/conv2d_winograd/gpu.cc
  }
  return Status::Error("unhandled Sd* op");
}

}  // namespace sdgpu::gpu
