// Builtin TFLite ops on OpenCL. Each op is validated against what its kernel
// implements; anything else returns a one-line reason (the node then stays on
// the CPU runtime). Shapes come from the interpreter's tensors (static shapes).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "abi/int_array.h"
#include "backends/opencl/builtin_params.h"
#include "backends/opencl/cl_ops.h"
#include "backends/opencl/sd_ops.h"

namespace sdgpu::ocl {
namespace {

constexpr int kMaxRank = 6;  // MAXR in the kernels
constexpr int kWg = 64;      // reduction work-group size (power of two)
constexpr int kTile = 16;    // TS in gemm.cl

Dims DimsOf(const abi::TfLiteTensor* t) {
  Dims d;
  if (t != nullptr && t->dims != nullptr) {
    for (int i = 0; i < t->dims->size; ++i) d.push_back(t->dims->data[i]);
  }
  return d;
}

Dims StridesOf(const Dims& d) {
  Dims s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

std::vector<int32_t> ConstInts(const abi::TfLiteTensor* t) {
  std::vector<int32_t> v;
  if (t == nullptr || t->data.raw == nullptr) return v;
  if (t->type == abi::kTfLiteInt32) {
    v.assign(t->data.i32, t->data.i32 + t->bytes / 4);
  } else if (t->type == abi::kTfLiteInt64) {
    for (size_t i = 0; i < t->bytes / 8; ++i) v.push_back(static_cast<int32_t>(t->data.i64[i]));
  }
  return v;
}

bool Is4Byte(const abi::TfLiteTensor* t) { return t->type == abi::kTfLiteFloat32 || t->type == abi::kTfLiteInt32; }

Status Need(bool ok, const std::string& why) { return ok ? Status::Ok() : Status::Error(why); }

// Launch helper shared by the ops: global size n, 1-D, 64-wide groups.
Status Launch1D(const ClRuntime& rt, cl_kernel k, size_t n, ClEventHandle* ev) {
  return rt.Launch(k, {n}, {64}, ev);
}

class MetaBuffer {
 public:
  Status Upload(const ClRuntime& rt, const std::vector<int32_t>& meta) {
    SDGPU_RETURN_IF_ERROR(rt.CreateBuffer(meta.size() * 4, &mem_));
    return rt.Upload(mem_.get(), 0, meta.size() * 4, meta.data(), true);
  }
  cl_mem get() const { return mem_.get(); }

 private:
  ClMemHandle mem_;
};

// Broadcast strides of `in` against `out` (right-aligned), padded to out rank.
Dims BroadcastStrides(const Dims& in, const Dims& out) {
  Dims s(out.size(), 0);
  const Dims is = StridesOf(in);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[off + i] = in[i] == 1 ? 0 : is[i];
  return s;
}

bool CanBroadcast(const Dims& in, const Dims& out) {
  if (in.size() > out.size()) return false;
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != 1 && in[i] != out[off + i]) return false;
  }
  return true;
}

// ---- elementwise ------------------------------------------------------------

class UnaryOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, int op, int64_t n, std::unique_ptr<ClOp>* out) {
    auto u = std::make_unique<UnaryOp>();
    u->op_ = op;
    u->n_ = static_cast<int>(n);
    u->device_inputs_ = {0};
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("unary_f32", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset())(n_)(op_);
    SDGPU_RETURN_IF_ERROR(a.status());
    return Launch1D(rt, k_.get(), n_, ev);
  }

 private:
  int op_ = 0, n_ = 0;
  ClKernelHandle k_;
};

class BinaryOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const ClNodeDesc& node, int op, int act, std::unique_ptr<ClOp>* out) {
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
    SDGPU_RETURN_IF_ERROR(u->meta_.Upload(rt, meta));
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("binary_f32", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset())(in[1].mem)(in[1].elem_offset());
    cl_mem m = meta_.get();
    a(m)(n_)(op_)(act_);
    SDGPU_RETURN_IF_ERROR(a.status());
    return Launch1D(rt, k_.get(), n_, ev);
  }

 private:
  int op_ = 0, act_ = 0, n_ = 0;
  MetaBuffer meta_;
  ClKernelHandle k_;
};

class SelectOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
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
    SDGPU_RETURN_IF_ERROR(u->meta_.Upload(rt, meta));
    // The bool condition is folded to float once (1 byte -> 4 bytes) so the kernel stays fp32-only.
    std::vector<float> cond(static_cast<size_t>(NumElements(d[0])));
    for (size_t i = 0; i < cond.size(); ++i) cond[i] = c->data.raw[i] != 0 ? 1.0f : 0.0f;
    SDGPU_RETURN_IF_ERROR(rt.CreateBuffer(cond.size() * 4, &u->cond_));
    SDGPU_RETURN_IF_ERROR(rt.Upload(u->cond_.get(), 0, cond.size() * 4, cond.data(), true));
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("select_f32", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    cl_mem c = cond_.get(), m = meta_.get();
    const int zero = 0;
    a(out.mem)(out.elem_offset())(c)(zero)(in[1].mem)(in[1].elem_offset())(in[2].mem)(in[2].elem_offset())(m)(n_);
    SDGPU_RETURN_IF_ERROR(a.status());
    return Launch1D(rt, k_.get(), n_, ev);
  }

 private:
  int n_ = 0;
  MetaBuffer meta_;
  ClMemHandle cond_;
  ClKernelHandle k_;
};

// ---- layout: one strided N-d copy -------------------------------------------

// A copy from `src` into (a region of) `dst`, described in output coordinates.
struct CopyPlan {
  Dims out_dims;      // iteration shape
  Dims src_strides;   // per iteration dim
  Dims lo;            // zero padding before (PAD)
  Dims src_dims;      // bounds for PAD (defaults to out_dims)
  Dims dst_strides;   // per iteration dim
  int64_t src_base = 0, dst_base = 0;  // elements
};

class CopyOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, std::vector<CopyPlan> plans, std::vector<int> inputs,
                       std::unique_ptr<ClOp>* out) {
    auto u = std::make_unique<CopyOp>();
    for (CopyPlan& p : plans) {
      SDGPU_RETURN_IF_ERROR(Need(p.out_dims.size() <= kMaxRank, "rank above 6"));
      if (p.out_dims.empty()) {
        p.out_dims = {1};
        p.src_strides = {1};
        p.dst_strides = {1};
      }
      if (p.lo.empty()) p.lo.assign(p.out_dims.size(), 0);
      if (p.src_dims.empty()) p.src_dims = p.out_dims;
      std::vector<int32_t> meta(1 + 5 * kMaxRank, 0);
      meta[0] = static_cast<int32_t>(p.out_dims.size());
      for (size_t d = 0; d < p.out_dims.size(); ++d) {
        meta[1 + d] = static_cast<int32_t>(p.out_dims[d]);
        meta[1 + kMaxRank + d] = static_cast<int32_t>(p.src_strides[d]);
        meta[1 + 2 * kMaxRank + d] = static_cast<int32_t>(p.lo[d]);
        meta[1 + 3 * kMaxRank + d] = static_cast<int32_t>(p.src_dims[d]);
        meta[1 + 4 * kMaxRank + d] = static_cast<int32_t>(p.dst_strides[d]);
      }
      Part part;
      part.n = static_cast<int>(NumElements(p.out_dims));
      part.src_base = static_cast<int>(p.src_base);
      part.dst_base = static_cast<int>(p.dst_base);
      SDGPU_RETURN_IF_ERROR(part.meta.Upload(rt, meta));
      SDGPU_RETURN_IF_ERROR(rt.CreateKernel("copy_nd", &part.k));
      u->parts_.push_back(std::move(part));
    }
    u->device_inputs_ = std::move(inputs);
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      Part& p = parts_[i];
      const ClTensorRef& src = in[device_inputs_[i]];
      ArgSetter a(rt.api(), p.k.get());
      cl_mem m = p.meta.get();
      a(out.mem)(out.elem_offset() + p.dst_base)(src.mem)(src.elem_offset() + p.src_base)(m)(p.n);
      SDGPU_RETURN_IF_ERROR(a.status());
      SDGPU_RETURN_IF_ERROR(Launch1D(rt, p.k.get(), p.n, ev));
    }
    return Status::Ok();
  }

 private:
  struct Part {
    int n = 0, src_base = 0, dst_base = 0;
    MetaBuffer meta;
    ClKernelHandle k;
  };
  std::vector<Part> parts_;
};

CopyPlan Contiguous(const Dims& out) {
  CopyPlan p;
  p.out_dims = out;
  p.src_strides = StridesOf(out);
  p.dst_strides = StridesOf(out);
  return p;
}

Status MakeReshape(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  const int64_t n = NumElements(DimsOf(node.outputs[0]));
  SDGPU_RETURN_IF_ERROR(Need(n == NumElements(DimsOf(node.inputs[0])), "element count mismatch"));
  return CopyOp::Create(rt, {Contiguous({n})}, {0}, out);
}

Status MakeTranspose(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  SDGPU_RETURN_IF_ERROR(Need(IsConstant(node.inputs[1]), "permutation must be constant"));
  const std::vector<int32_t> perm = ConstInts(node.inputs[1]);
  const Dims in = DimsOf(node.inputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(perm.size() == in.size(), "permutation rank mismatch"));
  const Dims is = StridesOf(in);
  CopyPlan p = Contiguous(DimsOf(node.outputs[0]));
  for (size_t d = 0; d < perm.size(); ++d) {
    SDGPU_RETURN_IF_ERROR(Need(perm[d] >= 0 && perm[d] < static_cast<int>(in.size()), "bad permutation"));
    p.src_strides[d] = is[perm[d]];
  }
  return CopyOp::Create(rt, {p}, {0}, out);
}

Status MakeBroadcastTo(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  const Dims in = DimsOf(node.inputs[0]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(CanBroadcast(in, o), "not broadcastable"));
  CopyPlan p = Contiguous(o);
  p.src_strides = BroadcastStrides(in, o);
  return CopyOp::Create(rt, {p}, {0}, out);
}

Status MakeSlice(const ClRuntime& rt, const ClNodeDesc& node, bool strided, std::unique_ptr<ClOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  const Dims in = DimsOf(node.inputs[0]), o = DimsOf(node.outputs[0]);
  for (size_t i = 1; i < node.inputs.size(); ++i) {
    SDGPU_RETURN_IF_ERROR(Need(IsConstant(node.inputs[i]), "begin/size/strides must be constant"));
  }
  const std::vector<int32_t> begin = ConstInts(node.inputs[1]);
  SDGPU_RETURN_IF_ERROR(Need(begin.size() == in.size(), "begin rank mismatch"));
  std::vector<int32_t> step(in.size(), 1);
  if (strided) {
    const auto* prm = static_cast<const StridedSliceParams*>(node.builtin_data);
    SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && prm->ellipsis_mask == 0 && prm->new_axis_mask == 0 &&
                                   prm->shrink_axis_mask == 0 && !prm->offset,
                               "only plain strided slices (no ellipsis/new-axis/shrink masks) are supported"));
    step = ConstInts(node.inputs[3]);
    SDGPU_RETURN_IF_ERROR(Need(step.size() == in.size(), "strides rank mismatch"));
    std::vector<int32_t> b = begin;
    for (size_t d = 0; d < in.size(); ++d) {
      if (prm->begin_mask & (1 << d)) b[d] = step[d] > 0 ? 0 : static_cast<int32_t>(in[d]) - 1;
      else if (b[d] < 0) b[d] += static_cast<int32_t>(in[d]);
      SDGPU_RETURN_IF_ERROR(Need(step[d] > 0, "negative strides are not supported"));
    }
    SDGPU_RETURN_IF_ERROR(Need(o.size() == in.size(), "rank-changing strided slice"));
    const Dims is = StridesOf(in);
    CopyPlan p = Contiguous(o);
    for (size_t d = 0; d < in.size(); ++d) {
      p.src_strides[d] = is[d] * step[d];
      p.src_base += b[d] * is[d];
    }
    return CopyOp::Create(rt, {p}, {0}, out);
  }
  SDGPU_RETURN_IF_ERROR(Need(o.size() == in.size(), "rank mismatch"));
  const Dims is = StridesOf(in);
  CopyPlan p = Contiguous(o);
  for (size_t d = 0; d < in.size(); ++d) {
    SDGPU_RETURN_IF_ERROR(Need(begin[d] >= 0 && begin[d] + o[d] <= in[d], "slice out of range"));
    p.src_strides[d] = is[d];
    p.src_base += begin[d] * is[d];
  }
  return CopyOp::Create(rt, {p}, {0}, out);
}

Status MakePad(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  SDGPU_RETURN_IF_ERROR(Need(node.inputs.size() == 2, "PADV2 constant values are not supported"));
  SDGPU_RETURN_IF_ERROR(Need(IsConstant(node.inputs[1]), "paddings must be constant"));
  const std::vector<int32_t> pads = ConstInts(node.inputs[1]);
  const Dims in = DimsOf(node.inputs[0]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(pads.size() == 2 * in.size() && o.size() == in.size(), "paddings shape mismatch"));
  CopyPlan p = Contiguous(o);
  p.src_strides = StridesOf(in);
  p.src_dims = in;
  p.lo.resize(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    SDGPU_RETURN_IF_ERROR(Need(pads[2 * d] >= 0 && pads[2 * d + 1] >= 0, "negative padding"));
    p.lo[d] = pads[2 * d];
  }
  return CopyOp::Create(rt, {p}, {0}, out);
}

Status MakeConcat(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  const auto* prm = static_cast<const ConcatenationParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && prm->activation == 0, "fused activation on CONCATENATION"));
  const Dims o = DimsOf(node.outputs[0]);
  const int axis = prm->axis < 0 ? prm->axis + static_cast<int>(o.size()) : prm->axis;
  SDGPU_RETURN_IF_ERROR(Need(axis >= 0 && axis < static_cast<int>(o.size()), "bad axis"));
  const Dims os = StridesOf(o);
  std::vector<CopyPlan> plans;
  std::vector<int> inputs;
  int64_t at = 0;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[i]), "only 4-byte element types are supported"));
    const Dims in = DimsOf(node.inputs[i]);
    CopyPlan p = Contiguous(in);
    p.dst_strides = os;
    p.dst_base = at * os[axis];
    at += in[axis];
    plans.push_back(p);
    inputs.push_back(static_cast<int>(i));
  }
  SDGPU_RETURN_IF_ERROR(Need(at == o[axis], "concatenated size mismatch"));
  return CopyOp::Create(rt, plans, inputs, out);
}

class GatherOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const ClNodeDesc& node, int params_input, int axis,
                       std::unique_ptr<ClOp>* out) {
    const abi::TfLiteTensor* p = node.inputs[params_input];
    const abi::TfLiteTensor* idx = node.inputs[1 - params_input];
    SDGPU_RETURN_IF_ERROR(Need(Is4Byte(p) && idx->type == abi::kTfLiteInt32, "only 4-byte params and int32 indices"));
    const Dims pd = DimsOf(p);
    if (axis < 0) axis += static_cast<int>(pd.size());
    SDGPU_RETURN_IF_ERROR(Need(axis >= 0 && axis < static_cast<int>(pd.size()), "bad axis"));
    auto u = std::make_unique<GatherOp>();
    u->outer_ = 1;
    for (int d = 0; d < axis; ++d) u->outer_ *= static_cast<int>(pd[d]);
    u->axis_dim_ = static_cast<int>(pd[axis]);
    u->inner_ = 1;
    for (size_t d = axis + 1; d < pd.size(); ++d) u->inner_ *= static_cast<int>(pd[d]);
    u->nidx_ = static_cast<int>(NumElements(DimsOf(idx)));
    u->n_ = u->outer_ * u->nidx_ * u->inner_;
    SDGPU_RETURN_IF_ERROR(Need(u->n_ == NumElements(DimsOf(node.outputs[0])), "output size mismatch"));
    u->params_ = params_input;
    u->device_inputs_ = {0, 1};
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("gather_rows", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    const ClTensorRef& p = in[params_];
    const ClTensorRef& i = in[1 - params_];
    ArgSetter a(rt.api(), k_.get());
    a(out.mem)(out.elem_offset())(p.mem)(p.elem_offset())(i.mem)(i.elem_offset())(axis_dim_)(nidx_)(inner_)(n_);
    SDGPU_RETURN_IF_ERROR(a.status());
    return Launch1D(rt, k_.get(), n_, ev);
  }

 private:
  int params_ = 0, outer_ = 1, axis_dim_ = 1, inner_ = 1, nidx_ = 0, n_ = 0;
  ClKernelHandle k_;
};

class ResizeNearestOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
    const auto* prm = static_cast<const ResizeNearestParams*>(node.builtin_data);
    const Dims in = DimsOf(node.inputs[0]), o = DimsOf(node.outputs[0]);
    SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && in.size() == 4 && o.size() == 4 && in[0] == o[0] && in[3] == o[3] &&
                                   Is4Byte(node.inputs[0]),
                               "expects NHWC 4-byte input"));
    auto u = std::make_unique<ResizeNearestOp>();
    u->v_ = {static_cast<int>(in[1]), static_cast<int>(in[2]), static_cast<int>(in[3]), static_cast<int>(o[1]),
             static_cast<int>(o[2]), prm->align_corners ? 1 : 0, prm->half_pixel_centers ? 1 : 0,
             static_cast<int>(NumElements(o))};
    u->device_inputs_ = {0};
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("resize_nearest", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset());
    for (int v : v_) a(v);
    SDGPU_RETURN_IF_ERROR(a.status());
    return Launch1D(rt, k_.get(), v_.back(), ev);
  }

 private:
  std::vector<int> v_;
  ClKernelHandle k_;
};

// ---- reductions ---------------------------------------------------------------

class ReduceOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const ClNodeDesc& node, int mode, std::unique_ptr<ClOp>* out) {
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
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("reduce_f32", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset())(red_)(inner_)(mode_).Local(kWg * sizeof(float));
    SDGPU_RETURN_IF_ERROR(a.status());
    return rt.Launch(k_.get(), {static_cast<size_t>(outer_) * inner_ * kWg}, {static_cast<size_t>(kWg)}, ev);
  }

 private:
  int outer_ = 1, red_ = 1, inner_ = 1, mode_ = 0;
  ClKernelHandle k_;
};

class SoftmaxOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
    const auto* prm = static_cast<const SoftmaxParams*>(node.builtin_data);
    SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && node.inputs[0]->type == abi::kTfLiteFloat32, "only float32"));
    const Dims in = DimsOf(node.inputs[0]);
    SDGPU_RETURN_IF_ERROR(Need(!in.empty(), "scalar softmax"));
    auto u = std::make_unique<SoftmaxOp>();
    u->cols_ = static_cast<int>(in.back());
    u->rows_ = static_cast<int>(NumElements(in) / std::max<int64_t>(1, in.back()));
    u->beta_ = prm->beta;
    u->device_inputs_ = {0};
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("softmax_f32", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset())(cols_)(beta_).Local(kWg * sizeof(float));
    SDGPU_RETURN_IF_ERROR(a.status());
    return rt.Launch(k_.get(), {static_cast<size_t>(rows_) * kWg}, {static_cast<size_t>(kWg)}, ev);
  }

 private:
  int rows_ = 0, cols_ = 0;
  float beta_ = 1.0f;
  ClKernelHandle k_;
};

}  // namespace

// ---- GEMM (shared with the Sd* ops through sd_ops.h) --------------------------

Status GemmOp::Create(const ClRuntime& rt, const GemmShape& s, std::vector<int> inputs, std::unique_ptr<ClOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(rt.max_work_group_size() >= kTile * kTile, "device work-group limit below 256"));
  auto u = std::make_unique<GemmOp>();
  u->s_ = s;
  u->device_inputs_ = std::move(inputs);
  SDGPU_RETURN_IF_ERROR(rt.CreateKernel("gemm_f32", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

Status GemmOp::Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out,
                       const ClTensorRef&, ClEventHandle* ev) {
  const ClTensorRef& A = in[s_.a_input];
  const ClTensorRef& B = in[s_.b_input];
  const bool has_bias = s_.bias_input >= 0;
  const ClTensorRef& bias = has_bias ? in[s_.bias_input] : A;
  ArgSetter a(rt.api(), k_.get());
  const int hb = has_bias ? 1 : 0;
  a(out.mem)(out.elem_offset())(s_.scb)(s_.scm)(A.mem)(A.elem_offset())(s_.sab)(s_.sam)(s_.sak);
  a(B.mem)(B.elem_offset())(s_.sbb)(s_.sbk)(s_.sbn)(bias.mem)(bias.elem_offset())(hb)(s_.M)(s_.N)(s_.K)(s_.alpha)(s_.act);
  SDGPU_RETURN_IF_ERROR(a.status());
  return rt.Launch(k_.get(), {static_cast<size_t>(s_.N), static_cast<size_t>(s_.M), static_cast<size_t>(s_.batch)},
                   {kTile, kTile, 1}, ev);
}

Status ConvOp::Create(const ClRuntime& rt, const ConvShape& s, std::unique_ptr<ClOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(rt.max_work_group_size() >= kTile * kTile, "device work-group limit below 256"));
  auto u = std::make_unique<ConvOp>();
  u->s_ = s;
  u->device_inputs_ = s.has_bias ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
  SDGPU_RETURN_IF_ERROR(rt.CreateKernel("conv2d_igemm", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

Status ConvOp::Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out,
                       const ClTensorRef&, ClEventHandle* ev) {
  const ClTensorRef& bias = s_.has_bias ? in[2] : in[1];
  const int hb = s_.has_bias ? 1 : 0;
  const int M = s_.n * s_.oh * s_.ow;
  ArgSetter a(rt.api(), k_.get());
  a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset())(in[1].mem)(in[1].elem_offset())(bias.mem)(
      bias.elem_offset())(hb);
  a(s_.h)(s_.w)(s_.ci)(s_.oh)(s_.ow)(s_.co)(s_.kh)(s_.kw)(s_.sh)(s_.sw)(s_.dh)(s_.dw)(s_.ph)(s_.pw)(M)(s_.act);
  SDGPU_RETURN_IF_ERROR(a.status());
  return rt.Launch(k_.get(), {static_cast<size_t>(s_.co), static_cast<size_t>(M)}, {kTile, kTile}, ev);
}

namespace {

Status MakeFullyConnected(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  const auto* prm = static_cast<const FullyConnectedParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && prm->weights_format == 0, "only default weights format"));
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] != nullptr) SDGPU_RETURN_IF_ERROR(Need(node.inputs[i]->type == abi::kTfLiteFloat32, "only float32 operands (dequantize weights first)"));
  }
  const Dims x = DimsOf(node.inputs[0]), w = DimsOf(node.inputs[1]);
  SDGPU_RETURN_IF_ERROR(Need(w.size() == 2, "weights must be 2-D"));
  GemmShape s;
  s.K = static_cast<int>(w[1]);
  s.N = static_cast<int>(w[0]);
  s.M = static_cast<int>(NumElements(x) / s.K);
  SDGPU_RETURN_IF_ERROR(Need(static_cast<int64_t>(s.M) * s.K == NumElements(x), "input size not a multiple of K"));
  SDGPU_RETURN_IF_ERROR(Need(NumElements(DimsOf(node.outputs[0])) == static_cast<int64_t>(s.M) * s.N, "output size mismatch"));
  s.sam = s.K; s.sak = 1;
  s.sbk = 1; s.sbn = s.K;
  s.scm = s.N;
  s.a_input = 0; s.b_input = 1;
  s.act = prm->activation;
  std::vector<int> inputs = {0, 1};
  if (node.inputs.size() > 2 && node.inputs[2] != nullptr) {
    s.bias_input = 2;
    inputs.push_back(2);
  }
  return GemmOp::Create(rt, s, inputs, out);
}

Status MakeBatchMatMul(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  const auto* prm = static_cast<const BatchMatMulParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && node.inputs[0]->type == abi::kTfLiteFloat32 &&
                                 node.inputs[1]->type == abi::kTfLiteFloat32,
                             "only float32"));
  const Dims a = DimsOf(node.inputs[0]), b = DimsOf(node.inputs[1]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(a.size() >= 2 && b.size() >= 2 && o.size() >= 2, "rank below 2"));
  GemmShape s;
  const int64_t ar = a[a.size() - 2], ac = a.back(), br = b[b.size() - 2], bc = b.back();
  s.M = static_cast<int>(prm->adj_x ? ac : ar);
  s.K = static_cast<int>(prm->adj_x ? ar : ac);
  s.N = static_cast<int>(prm->adj_y ? br : bc);
  SDGPU_RETURN_IF_ERROR(Need((prm->adj_y ? bc : br) == s.K, "inner dimensions differ"));
  s.sam = prm->adj_x ? 1 : static_cast<int>(ac);
  s.sak = prm->adj_x ? static_cast<int>(ac) : 1;
  s.sbk = prm->adj_y ? 1 : static_cast<int>(bc);
  s.sbn = prm->adj_y ? static_cast<int>(bc) : 1;
  s.scm = s.N;
  const int64_t ba = NumElements(a) / (ar * ac), bb = NumElements(b) / (br * bc), bo = NumElements(o) / (s.M * s.N);
  SDGPU_RETURN_IF_ERROR(Need((ba == bo || ba == 1) && (bb == bo || bb == 1), "only equal or single batches broadcast"));
  s.batch = static_cast<int>(bo);
  s.sab = ba == 1 ? 0 : static_cast<int>(ar * ac);
  s.sbb = bb == 1 ? 0 : static_cast<int>(br * bc);
  s.scb = s.M * s.N;
  s.a_input = 0;
  s.b_input = 1;
  return GemmOp::Create(rt, s, {0, 1}, out);
}

Status MakeConv2D(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  const auto* prm = static_cast<const ConvParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr, "missing params"));
  for (const abi::TfLiteTensor* t : node.inputs) {
    if (t != nullptr) SDGPU_RETURN_IF_ERROR(Need(t->type == abi::kTfLiteFloat32, "only float32 operands"));
  }
  const Dims x = DimsOf(node.inputs[0]), w = DimsOf(node.inputs[1]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(x.size() == 4 && w.size() == 4 && o.size() == 4, "expects NHWC x OHWI"));
  SDGPU_RETURN_IF_ERROR(Need(w[3] == x[3], "grouped convolution is not supported"));
  ConvShape s;
  s.n = static_cast<int>(x[0]); s.h = static_cast<int>(x[1]); s.w = static_cast<int>(x[2]); s.ci = static_cast<int>(x[3]);
  s.co = static_cast<int>(w[0]); s.kh = static_cast<int>(w[1]); s.kw = static_cast<int>(w[2]);
  s.oh = static_cast<int>(o[1]); s.ow = static_cast<int>(o[2]);
  s.sh = prm->stride_height; s.sw = prm->stride_width;
  s.dh = std::max(1, prm->dilation_height); s.dw = std::max(1, prm->dilation_width);
  if (prm->padding == kPaddingSame) {
    const int th = std::max(0, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1 - s.h);
    const int tw = std::max(0, (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w);
    s.ph = th / 2;
    s.pw = tw / 2;
  }
  s.act = prm->activation;
  s.has_bias = node.inputs.size() > 2 && node.inputs[2] != nullptr;
  return ConvOp::Create(rt, s, out);
}

int ActivationOf(const ClNodeDesc& node) {
  const auto* p = static_cast<const ActivationParams*>(node.builtin_data);
  return p != nullptr ? p->activation : 0;
}

}  // namespace

bool IsConstant(const abi::TfLiteTensor* t) {
  return t != nullptr && t->data.raw != nullptr &&
         (t->allocation_type == abi::kTfLiteMmapRo || t->allocation_type == abi::kTfLitePersistentRo);
}

std::string BuiltinName(int code) {
  switch (code) {
#define N(c, s) \
  case c:       \
    return s;
    N(kAdd, "ADD") N(kConcatenation, "CONCATENATION") N(kConv2D, "CONV_2D") N(kDequantize, "DEQUANTIZE")
    N(kEmbeddingLookup, "EMBEDDING_LOOKUP") N(kFullyConnected, "FULLY_CONNECTED") N(kLogistic, "LOGISTIC")
    N(kMul, "MUL") N(kRelu, "RELU") N(kReshape, "RESHAPE") N(kSoftmax, "SOFTMAX") N(kTanh, "TANH") N(kPad, "PAD")
    N(kGather, "GATHER") N(kTranspose, "TRANSPOSE") N(kMean, "MEAN") N(kSub, "SUB") N(kDiv, "DIV")
    N(kSqueeze, "SQUEEZE") N(kStridedSlice, "STRIDED_SLICE") N(kExp, "EXP") N(kMaximum, "MAXIMUM")
    N(kMinimum, "MINIMUM") N(kNeg, "NEG") N(kSlice, "SLICE") N(kSin, "SIN") N(kExpandDims, "EXPAND_DIMS")
    N(kLog, "LOG") N(kSum, "SUM") N(kSqrt, "SQRT") N(kRsqrt, "RSQRT") N(kPow, "POW") N(kReduceMax, "REDUCE_MAX")
    N(kSquare, "SQUARE") N(kResizeNearestNeighbor, "RESIZE_NEAREST_NEIGHBOR")
    N(kSquaredDifference, "SQUARED_DIFFERENCE") N(kAbs, "ABS") N(kCos, "COS") N(kSelectV2, "SELECT_V2")
    N(kBatchMatMul, "BATCH_MATMUL") N(kBroadcastTo, "BROADCAST_TO") N(kGelu, "GELU")
#undef N
    default:
      return "BUILTIN_" + std::to_string(code);
  }
}

Status CreateClOp(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  if (node.builtin_code == kCustom) {
    if (node.sd_op == nullptr) return Status::Error("custom op is not one of the Sd* ops");
    return CreateSdOp(rt, node, out);
  }
  SDGPU_RETURN_IF_ERROR(Need(node.outputs.size() == 1, "multiple outputs are not supported"));
  SDGPU_RETURN_IF_ERROR(Need(!node.inputs.empty() && node.inputs[0] != nullptr, "missing input"));
  const int64_t n = NumElements(DimsOf(node.outputs[0]));
  auto unary = [&](int op) -> Status {
    SDGPU_RETURN_IF_ERROR(Need(node.inputs[0]->type == abi::kTfLiteFloat32, "only float32"));
    SDGPU_RETURN_IF_ERROR(Need(NumElements(DimsOf(node.inputs[0])) == n, "shape mismatch"));
    return UnaryOp::Create(rt, op, n, out);
  };
  switch (node.builtin_code) {
    case kAdd: return BinaryOp::Create(rt, node, 0, ActivationOf(node), out);
    case kSub: return BinaryOp::Create(rt, node, 1, ActivationOf(node), out);
    case kMul: return BinaryOp::Create(rt, node, 2, ActivationOf(node), out);
    case kDiv: return BinaryOp::Create(rt, node, 3, ActivationOf(node), out);
    case kSquaredDifference: return BinaryOp::Create(rt, node, 4, 0, out);
    case kMaximum: return BinaryOp::Create(rt, node, 5, 0, out);
    case kMinimum: return BinaryOp::Create(rt, node, 6, 0, out);
    case kPow: return BinaryOp::Create(rt, node, 7, 0, out);
    case kLogistic: return unary(1);
    case kRsqrt: return unary(2);
    case kSin: return unary(3);
    case kCos: return unary(4);
    case kExp: return unary(5);
    case kLog: return unary(6);
    case kSqrt: return unary(7);
    case kNeg: return unary(8);
    case kAbs: return unary(9);
    case kTanh: return unary(10);
    case kSquare: return unary(11);
    case kRelu: return unary(15);
    case kGelu: {
      const auto* p = static_cast<const GeluParams*>(node.builtin_data);
      return unary(p != nullptr && p->approximate ? 13 : 12);
    }
    case kSelectV2: return SelectOp::Create(rt, node, out);
    case kReshape:
    case kSqueeze:
    case kExpandDims: return MakeReshape(rt, node, out);
    case kTranspose: return MakeTranspose(rt, node, out);
    case kBroadcastTo: return MakeBroadcastTo(rt, node, out);
    case kSlice: return MakeSlice(rt, node, false, out);
    case kStridedSlice: return MakeSlice(rt, node, true, out);
    case kPad: return MakePad(rt, node, out);
    case kConcatenation: return MakeConcat(rt, node, out);
    case kGather: {
      const auto* p = static_cast<const GatherParams*>(node.builtin_data);
      SDGPU_RETURN_IF_ERROR(Need(p != nullptr && p->batch_dims == 0, "batch_dims != 0"));
      return GatherOp::Create(rt, node, 0, p->axis, out);
    }
    case kEmbeddingLookup: return GatherOp::Create(rt, node, 1, 0, out);
    case kResizeNearestNeighbor: return ResizeNearestOp::Create(rt, node, out);
    case kMean: return ReduceOp::Create(rt, node, 0, out);
    case kSum: return ReduceOp::Create(rt, node, 1, out);
    case kReduceMax: return ReduceOp::Create(rt, node, 2, out);
    case kSoftmax: return SoftmaxOp::Create(rt, node, out);
    case kFullyConnected: return MakeFullyConnected(rt, node, out);
    case kBatchMatMul: return MakeBatchMatMul(rt, node, out);
    case kConv2D: return MakeConv2D(rt, node, out);
    case kDequantize: return MakeDequantize(rt, node, out);
    default:
      return Status::Error("op not implemented by the opencl backend");
  }
}

}  // namespace sdgpu::ocl
