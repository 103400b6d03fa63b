// Elementwise ops (kernels in backends/<backend>/kernels/elementwise.*):
// unary math, broadcasting binary math with a fused activation, SELECT_V2.
#include <algorithm>

#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// unary_f32(y, yo, x, xo, int n, int op)
class UnaryOp final : public GpuOp {
 public:
  UnaryOp(const Kernel* k, int op, int n) : k_(k), op_(op), n_(n) { device_inputs_ = {0}; }
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Buf(in[0].buffer, in[0].elem_offset()).Int(n_).Int(op_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

 private:
  const Kernel* k_;
  int op_ = 0, n_ = 0;
};

// binary_f32(y, yo, a, ao, b, bo, meta, mo, int n, int op, int act)
// meta: [rank, out_dims[MAXR], a_strides[MAXR], b_strides[MAXR]]
class BinaryOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Buf(in[0].buffer, in[0].elem_offset()).Buf(in[1].buffer, in[1].elem_offset());
    a.Buf(meta_.get(), 0).Int(n_).Int(op_).Int(act_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  int op_ = 0, act_ = 0, n_ = 0;
  std::unique_ptr<Buffer> meta_;
};

// select_f32(y, yo, cond, co, a, ao, b, bo, meta, mo, int n)
// meta: [rank, out_dims[MAXR], cond_strides[MAXR], a_strides[MAXR], b_strides[MAXR]]
class SelectOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Buf(cond_.get(), 0);
    a.Buf(in[1].buffer, in[1].elem_offset()).Buf(in[2].buffer, in[2].elem_offset()).Buf(meta_.get(), 0).Int(n_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  int n_ = 0;
  std::unique_ptr<Buffer> meta_, cond_;
};

}  // namespace

Status MakeUnary(const Device& dev, int op, int64_t n, std::unique_ptr<GpuOp>* out) {
  const Kernel* k = nullptr;
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("unary_f32", &k));
  *out = std::make_unique<UnaryOp>(k, op, static_cast<int>(n));
  return Status::Ok();
}

Status MakeBinary(const Device& dev, const NodeDesc& node, int op, int act, std::unique_ptr<GpuOp>* out) {
  const Dims a = DimsOf(node.inputs[0]), b = DimsOf(node.inputs[1]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(node.inputs[0]->type == abi::kTfLiteFloat32 && node.inputs[1]->type == abi::kTfLiteFloat32,
                             "only float32 operands are supported"));
  SDGPU_RETURN_IF_ERROR(Need(o.size() <= kMaxRank && CanBroadcast(a, o) && CanBroadcast(b, o),
                             "unsupported broadcast " + DimsToString(a) + " x " + DimsToString(b)));
  auto u = std::make_unique<BinaryOp>();
  u->op_ = op;
  u->act_ = act;
  u->n_ = static_cast<int>(NumElements(o));
  u->device_inputs_ = {0, 1};
  std::vector<int32_t> meta(1 + 3 * kMaxRank, 0);
  meta[0] = static_cast<int32_t>(o.size());
  const Dims sa = BroadcastStrides(a, o), sb = BroadcastStrides(b, o);
  for (size_t d = 0; d < o.size(); ++d) {
    meta[1 + d] = static_cast<int32_t>(o[d]);
    meta[1 + kMaxRank + d] = static_cast<int32_t>(sa[d]);
    meta[1 + 2 * kMaxRank + d] = static_cast<int32_t>(sb[d]);
  }
  if (o.empty()) {  // scalar
    meta[0] = 1;
    meta[1] = 1;
  }
  SDGPU_RETURN_IF_ERROR(UploadConstant(dev, meta.data(), meta.size() * 4, &u->meta_));
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("binary_f32", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

Status MakeSelect(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const abi::TfLiteTensor* c = node.inputs[0];
  SDGPU_RETURN_IF_ERROR(Need(IsConstant(c) && c->type == abi::kTfLiteBool, "condition must be a constant bool tensor"));
  SDGPU_RETURN_IF_ERROR(Need(node.inputs[1]->type == abi::kTfLiteFloat32 && node.inputs[2]->type == abi::kTfLiteFloat32,
                             "only float32 values are supported"));
  const Dims o = DimsOf(node.outputs[0]);
  Dims d[3] = {DimsOf(c), DimsOf(node.inputs[1]), DimsOf(node.inputs[2])};
  for (const Dims& x : d) SDGPU_RETURN_IF_ERROR(Need(o.size() <= kMaxRank && CanBroadcast(x, o), "unsupported broadcast"));
  auto u = std::make_unique<SelectOp>();
  u->n_ = static_cast<int>(NumElements(o));
  u->device_inputs_ = {1, 2};
  std::vector<int32_t> meta(1 + 4 * kMaxRank, 0);
  meta[0] = std::max<int32_t>(1, static_cast<int32_t>(o.size()));
  meta[1] = 1;
  for (size_t k = 0; k < o.size(); ++k) meta[1 + k] = static_cast<int32_t>(o[k]);
  for (int t = 0; t < 3; ++t) {
    const Dims s = BroadcastStrides(d[t], o);
    for (size_t k = 0; k < o.size(); ++k) meta[1 + (t + 1) * kMaxRank + k] = static_cast<int32_t>(s[k]);
  }
  SDGPU_RETURN_IF_ERROR(UploadConstant(dev, meta.data(), meta.size() * 4, &u->meta_));
  // The bool condition is folded to float once (1 byte -> 4 bytes) so the kernel stays fp32-only.
  std::vector<float> cond(static_cast<size_t>(NumElements(d[0])));
  for (size_t i = 0; i < cond.size(); ++i) cond[i] = c->data.raw[i] != 0 ? 1.0f : 0.0f;
  SDGPU_RETURN_IF_ERROR(UploadConstant(dev, cond.data(), cond.size() * 4, &u->cond_));
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("select_f32", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

}  // namespace sdgpu::gpu
