// Elementwise ops (kernels in backends/<backend>/kernels/elementwise.*):
// unary math, broadcasting binary math with a fused activation, SELECT_V2.
// Fast paths (when the backend has the kernels): float4 variants (*_v4) for
// 16-byte aligned tensors whose innermost extent is a multiple of 4; binary
// shapes are collapsed first (adjacent dims that every operand walks
// contiguously, or broadcasts together, merge), so the per-element index
// arithmetic runs over 1-3 dims instead of up to 6.
#include <algorithm>

#include "gpu/builtin_params.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// unary_f32(y, yo, x, xo, int n, int op); unary_f32_v4(same, offsets and n in float4 units) when n % 4 == 0
// and both offsets are multiples of 4 floats (decided per launch: offsets are only known then).
class UnaryOp final : public GpuOp {
 public:
  UnaryOp(const Kernel* k, const Kernel* k4, int op, int n) : k_(k), k4_(k4), op_(op), n_(n) { device_inputs_ = {0}; }
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const int yo = out.elem_offset(), xo = in[0].elem_offset();
    Args a;
    if (k4_ != nullptr && n_ % 4 == 0 && yo % 4 == 0 && xo % 4 == 0) {
      a.Buf(out.buffer, yo / 4).Buf(in[0].buffer, xo / 4).Int(n_ / 4).Int(op_);
      return Launch1D(dev, *k4_, a, n_ / 4, timings);
    }
    a.Buf(out.buffer, yo).Buf(in[0].buffer, xo).Int(n_).Int(op_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

 private:
  const Kernel* k_;
  const Kernel* k4_;  // null: no float4 variant on this backend
  int op_ = 0, n_ = 0;
};

// binary_f32(y, yo, a, ao, b, bo, meta, mo, int n, int op, int act)
// meta: [rank, out_dims[MAXR], a_strides[MAXR], b_strides[MAXR]] (collapsed shape)
// binary_f32_v4(y, yo (float4 units), a, ao, b, bo, meta4, mo, int n4, int op, int act, int a_vec, int b_vec)
// with meta4 = the float4 grid (see elementwise.cl), when the collapsed innermost dim % 4 == 0, every operand
// walks it contiguously or broadcasts along it, and the offsets of vector operands and output are 4-aligned.
class BinaryOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const int yo = out.elem_offset(), ao = in[0].elem_offset(), bo = in[1].elem_offset();
    Args a;
    if (k4_ != nullptr && yo % 4 == 0 && (!a_vec_ || ao % 4 == 0) && (!b_vec_ || bo % 4 == 0)) {
      a.Buf(out.buffer, yo / 4).Buf(in[0].buffer, ao).Buf(in[1].buffer, bo).Buf(meta4_.get(), 0);
      a.Int(n_ / 4).Int(op_).Int(act_).Int(a_vec_).Int(b_vec_);
      return Launch1D(dev, *k4_, a, n_ / 4, timings);
    }
    a.Buf(out.buffer, yo).Buf(in[0].buffer, ao).Buf(in[1].buffer, bo);
    a.Buf(meta_.get(), 0).Int(n_).Int(op_).Int(act_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  const Kernel* k4_ = nullptr;  // null: no float4 path for this shape/backend
  int op_ = 0, act_ = 0, n_ = 0, a_vec_ = 0, b_vec_ = 0;
  std::unique_ptr<Buffer> meta_, meta4_;
};

// mul_unary_f32(y, yo, a, ao, b, bo, meta, mo, int n, int op): f(a * b) (MakeMulUnary); a and b are the MUL's inputs
// `a_` and `b_`, b the constant one, read as float32.
class MulUnaryOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::float32_inputs_;
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out).Buf(in[a_]).Buf(in[b_].buffer, in[b_].elem_offset(sizeof(float)));
    a.Buf(meta_.get(), 0).Int(n_).Int(op_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  int a_ = 0, b_ = 1, op_ = 0, n_ = 0;
  std::unique_ptr<Buffer> meta_;
};

// `out` with the broadcast strides of each operand, collapsed: size-1 dims dropped, and a dim merged into
// its inner neighbour when every operand's stride on it is (inner extent x inner stride) -- contiguous, or
// 0 = 0 for a broadcast shared by both dims. Never empty (a scalar becomes [1]).
void CollapseDims(const Dims& out, std::vector<Dims>* strides, Dims* dims) {
  Dims od;
  std::vector<Dims> os(strides->size());
  for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
    if (out[d] == 1) continue;
    bool merge = !od.empty();
    for (size_t k = 0; merge && k < strides->size(); ++k) {
      merge = (*strides)[k][d] == od.front() * os[k].front();
    }
    if (merge) {
      od.front() *= out[d];
      continue;
    }
    od.insert(od.begin(), out[d]);
    for (size_t k = 0; k < strides->size(); ++k) os[k].insert(os[k].begin(), (*strides)[k][d]);
  }
  if (od.empty()) {
    od = {1};
    for (Dims& s : os) s = {0};
  }
  *dims = od;
  *strides = os;
}

std::vector<int32_t> BinaryMeta(const Dims& dims, const Dims& sa, const Dims& sb) {
  std::vector<int32_t> meta(1 + 3 * kMaxRank, 0);
  meta[0] = static_cast<int32_t>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    meta[1 + d] = static_cast<int32_t>(dims[d]);
    meta[1 + kMaxRank + d] = static_cast<int32_t>(sa[d]);
    meta[1 + 2 * kMaxRank + d] = static_cast<int32_t>(sb[d]);
  }
  return meta;
}

// select_f32(y, yo, cond, co, a, ao, b, bo, meta, mo, int n)
// meta: [rank, out_dims[MAXR], cond_strides[MAXR], a_strides[MAXR], b_strides[MAXR]]
class SelectOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out).Buf(cond_.get(), 0);
    a.Buf(in[1]).Buf(in[2]).Buf(meta_.get(), 0).Int(n_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  int n_ = 0;
  std::unique_ptr<Buffer> meta_, cond_;
};

// binary_f32's broadcast table (BinaryMeta) of a x b -> o on the device: `dims` and `strides` as collapsed.
Status UploadBinaryMeta(const Device& dev, const Dims& a, const Dims& b, const Dims& o, std::unique_ptr<Buffer>* meta,
                        Dims* dims, std::vector<Dims>* strides) {
  *strides = {BroadcastStrides(a, o), BroadcastStrides(b, o)};
  CollapseDims(o, strides, dims);
  const std::vector<int32_t> table = BinaryMeta(*dims, (*strides)[0], (*strides)[1]);
  return UploadConstant(dev, table.data(), table.size() * 4, meta);
}

}  // namespace

Status MakeUnary(const Device& dev, int op, int64_t n, std::unique_ptr<GpuOp>* out) {
  const Kernel* k = nullptr;
  const Kernel* k4 = nullptr;
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("unary_f32", &k));
  if (n % 4 != 0 || !dev.GetKernel("unary_f32_v4", &k4).ok()) k4 = nullptr;
  *out = std::make_unique<UnaryOp>(k, k4, op, static_cast<int>(n));
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
  std::vector<Dims> strides;
  Dims dims;
  SDGPU_RETURN_IF_ERROR(UploadBinaryMeta(dev, a, b, o, &u->meta_, &dims, &strides));
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("binary_f32", &u->k_));
  const int64_t inner = dims.back(), ia = strides[0].back(), ib = strides[1].back();
  if (inner % 4 == 0 && ia <= 1 && ib <= 1 && dev.GetKernel("binary_f32_v4", &u->k4_).ok()) {
    Dims dims4 = dims;
    dims4.back() /= 4;
    strides[0].back() *= 4;  // one float4 step = 4 floats along a contiguous inner dim (0 stays 0)
    strides[1].back() *= 4;
    const std::vector<int32_t> meta4 = BinaryMeta(dims4, strides[0], strides[1]);
    SDGPU_RETURN_IF_ERROR(UploadConstant(dev, meta4.data(), meta4.size() * 4, &u->meta4_));
    u->a_vec_ = ia == 1 ? 1 : 0;
    u->b_vec_ = ib == 1 ? 1 : 0;
  } else {
    u->k4_ = nullptr;
  }
  *out = std::move(u);
  return Status::Ok();
}

Status MakeMulUnary(const Device& dev, const NodeDesc& mul, int op, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(mul.inputs.size() == 2 && mul.inputs[0] != nullptr && mul.inputs[1] != nullptr &&
                                 mul.inputs[0]->type == abi::kTfLiteFloat32 &&
                                 mul.inputs[1]->type == abi::kTfLiteFloat32,
                             "only float32 operands are supported"));
  const auto* prm = static_cast<const ActivationParams*>(mul.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm == nullptr || prm->activation == 0, "a fused activation"));
  auto u = std::make_unique<MulUnaryOp>();
  u->b_ = IsConstant(mul.inputs[1]) ? 1 : 0;
  u->a_ = 1 - u->b_;
  SDGPU_RETURN_IF_ERROR(Need(IsConstant(mul.inputs[u->b_]), "no constant operand"));
  const Dims a = DimsOf(mul.inputs[u->a_]), b = DimsOf(mul.inputs[u->b_]), o = DimsOf(mul.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(o.size() <= kMaxRank && CanBroadcast(a, o) && CanBroadcast(b, o),
                             "unsupported broadcast " + DimsToString(a) + " x " + DimsToString(b)));
  u->op_ = op;
  u->n_ = static_cast<int>(NumElements(o));
  u->device_inputs_ = {u->a_, u->b_};
  u->float32_inputs_ = {u->b_};
  std::vector<Dims> strides;
  Dims dims;
  SDGPU_RETURN_IF_ERROR(UploadBinaryMeta(dev, a, b, o, &u->meta_, &dims, &strides));
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("mul_unary_f32", &u->k_));
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
