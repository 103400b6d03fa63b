// Sd* fused ops and DEQUANTIZE on OpenCL (kernels in ops/<op>/opencl.cl).
#include "backends/opencl/sd_ops.h"

#include <cstring>

#include "abi/int_array.h"
#include "backends/opencl/builtin_params.h"

namespace sdgpu::ocl {
namespace {

constexpr int kWg = 64;

Dims DimsOfT(const abi::TfLiteTensor* t) {
  Dims d;
  if (t != nullptr && t->dims != nullptr) {
    for (int i = 0; i < t->dims->size; ++i) d.push_back(t->dims->data[i]);
  }
  return d;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Output = a device-resident constant computed on the host at prepare (folded
// DEQUANTIZE of constant weights): uploaded once, copied into the output per run.
class ConstantOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const std::vector<float>& values, std::unique_ptr<ClOp>* out) {
    auto u = std::make_unique<ConstantOp>();
    u->n_ = static_cast<int>(values.size());
    SDGPU_RETURN_IF_ERROR(rt.CreateBuffer(values.size() * 4, &u->data_));
    SDGPU_RETURN_IF_ERROR(rt.Upload(u->data_.get(), 0, values.size() * 4, values.data(), true));
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("unary_f32", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>&, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    cl_mem d = data_.get();
    const int zero = 0;
    a(out.mem)(out.elem_offset())(d)(zero)(n_)(zero);
    SDGPU_RETURN_IF_ERROR(a.status());
    return rt.Launch(k_.get(), {static_cast<size_t>(n_)}, {64}, ev);
  }

 private:
  int n_ = 0;
  ClMemHandle data_;
  ClKernelHandle k_;
};

class DequantF16Op final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, int n, std::unique_ptr<ClOp>* out) {
    auto u = std::make_unique<DequantF16Op>();
    u->n_ = n;
    u->device_inputs_ = {0};
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("dequant_f16", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset(2))(n_);
    SDGPU_RETURN_IF_ERROR(a.status());
    return rt.Launch(k_.get(), {static_cast<size_t>(n_)}, {64}, ev);
  }

 private:
  int n_ = 0;
  ClKernelHandle k_;
};

class SdGeluOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, int op, int n, std::unique_ptr<ClOp>* out) {
    auto u = std::make_unique<SdGeluOp>();
    u->op_ = op;
    u->n_ = n;
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
    return rt.Launch(k_.get(), {static_cast<size_t>(n_)}, {64}, ev);
  }

 private:
  int op_ = 12, n_ = 0;
  ClKernelHandle k_;
};

class SdGroupNormOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const GroupNormAttrs& attrs, const Dims& x, std::unique_ptr<ClOp>* out) {
    auto u = std::make_unique<SdGroupNormOp>();
    u->g_ = GroupNormGeometryFor(attrs, x);
    u->eps_ = attrs.eps;
    u->silu_ = attrs.activation == GroupNormActivation::kSilu ? 1 : 0;
    u->device_inputs_ = {0, 1, 2};
    SDGPU_RETURN_IF_ERROR(rt.CreateKernel("group_norm_f32", &u->k_));
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out, const ClTensorRef&,
                 ClEventHandle* ev) override {
    ArgSetter a(rt.api(), k_.get());
    const int A = static_cast<int>(g_.a), C = static_cast<int>(g_.c), B = static_cast<int>(g_.b),
              G = static_cast<int>(g_.groups);
    a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset())(in[1].mem)(in[1].elem_offset())(in[2].mem)(
        in[2].elem_offset());
    a(A)(C)(B)(G)(eps_)(silu_).Local(kWg * sizeof(float));
    SDGPU_RETURN_IF_ERROR(a.status());
    return rt.Launch(k_.get(), {static_cast<size_t>(g_.n * g_.groups) * kWg}, {kWg}, ev);
  }

 private:
  GroupNormGeometry g_;
  float eps_ = 1e-5f;
  int silu_ = 0;
  ClKernelHandle k_;
};

class SdAttentionOp final : public ClOp {
 public:
  static constexpr int kMaxHeadDim = 256;  // ATT_MAXD in ops/attention/opencl.cl
  static Status Create(const ClRuntime& rt, const AttentionAttrs& attrs, const Dims& q, const Dims& k,
                       std::unique_ptr<ClOp>* out) {
    if (attrs.head_dim > kMaxHeadDim) {
      return Status::Error("head_dim " + std::to_string(attrs.head_dim) + " above the kernel limit 256");
    }
    auto u = std::make_unique<SdAttentionOp>();
    u->attrs_ = attrs;
    u->n_ = static_cast<int>(q[0]);
    u->sq_ = static_cast<int>(q[1]);
    u->sk_ = static_cast<int>(k[1]);
    u->device_inputs_ = {0, 1, 2};
    u->rows_ = static_cast<size_t>(u->n_) * attrs.heads * u->sq_;
    if (attrs.variant == AttentionVariant::kFlash) {
      SDGPU_RETURN_IF_ERROR(rt.CreateKernel("attn_flash", &u->k1_));
    } else {
      u->scratch_bytes_ = u->rows_ * 2 * sizeof(float);  // the m and s vectors
      SDGPU_RETURN_IF_ERROR(rt.CreateKernel("attn_stats", &u->k1_));
      SDGPU_RETURN_IF_ERROR(rt.CreateKernel("attn_pv", &u->k2_));
    }
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out,
                 const ClTensorRef& scratch, ClEventHandle* ev) override {
    const int H = attrs_.heads, D = attrs_.head_dim, causal = attrs_.causal ? 1 : 0;
    const float scale = attrs_.scale;
    const std::vector<size_t> global = {rows_ * kWg}, local = {static_cast<size_t>(kWg)};
    if (attrs_.variant == AttentionVariant::kFlash) {
      ArgSetter a(rt.api(), k1_.get());
      a(out.mem)(out.elem_offset())(in[0].mem)(in[0].elem_offset())(in[1].mem)(in[1].elem_offset())(in[2].mem)(
          in[2].elem_offset())(sq_)(sk_)(H)(D)(scale)(causal);
      SDGPU_RETURN_IF_ERROR(a.status());
      return rt.Launch(k1_.get(), global, local, ev);
    }
    {
      ArgSetter a(rt.api(), k1_.get());
      a(scratch.mem)(scratch.elem_offset())(in[0].mem)(in[0].elem_offset())(in[1].mem)(in[1].elem_offset())(sq_)(sk_)(H)(D)(scale)(causal);
      SDGPU_RETURN_IF_ERROR(a.status());
    }
    SDGPU_RETURN_IF_ERROR(rt.Launch(k1_.get(), global, local, nullptr));
    ArgSetter a(rt.api(), k2_.get());
    a(out.mem)(out.elem_offset())(scratch.mem)(scratch.elem_offset())(in[0].mem)(in[0].elem_offset())(in[1].mem)(in[1].elem_offset())(
        in[2].mem)(in[2].elem_offset())(sq_)(sk_)(H)(D)(scale)(causal);
    SDGPU_RETURN_IF_ERROR(a.status());
    return rt.Launch(k2_.get(), global, local, ev);
  }

 private:
  AttentionAttrs attrs_;
  int n_ = 0, sq_ = 0, sk_ = 0;
  size_t rows_ = 0;
  ClKernelHandle k1_, k2_;
};

}  // namespace

Status MakeDequantize(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  const abi::TfLiteTensor* in = node.inputs[0];
  const int64_t n = NumElements(DimsOfT(node.outputs[0]));
  if (node.outputs[0]->type != abi::kTfLiteFloat32) return Status::Error("output must be float32");
  if (in->type == abi::kTfLiteFloat16 && !IsConstant(in)) return DequantF16Op::Create(rt, static_cast<int>(n), out);
  if (!IsConstant(in)) return Status::Error("only fp16 activations or constant weights can be dequantized");
  std::vector<float> v(static_cast<size_t>(n));
  if (in->type == abi::kTfLiteFloat16) {
    const auto* h = reinterpret_cast<const uint16_t*>(in->data.raw);
    for (int64_t i = 0; i < n; ++i) v[i] = HalfToFloat(h[i]);
  } else if (in->type == abi::kTfLiteInt8 || in->type == abi::kTfLiteUInt8) {
    const Dims d = DimsOfT(in);
    const auto* q = in->quantization.type == 1 ? static_cast<const AffineQuantization*>(in->quantization.params) : nullptr;
    if (q == nullptr || q->scale == nullptr || q->scale->size < 1) return Status::Error("int8 weights without affine quantization");
    const int qd = q->quantized_dimension;
    int64_t inner = 1;
    for (size_t k = qd + 1; k < d.size(); ++k) inner *= d[k];
    for (int64_t i = 0; i < n; ++i) {
      const int c = q->scale->size == 1 ? 0 : static_cast<int>((i / inner) % d[qd]);
      const int zp = q->zero_point != nullptr && q->zero_point->size > c ? q->zero_point->data[c] : 0;
      const int raw = in->type == abi::kTfLiteInt8 ? static_cast<int>(reinterpret_cast<const int8_t*>(in->data.raw)[i])
                                                  : static_cast<int>(in->data.uint8[i]);
      v[i] = static_cast<float>(raw - zp) * q->scale->data[c];
    }
  } else {
    return Status::Error("unsupported input type");
  }
  return ConstantOp::Create(rt, v, out);
}

Status CreateSdOp(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out) {
  const ParsedOp& op = *node.sd_op;
  const Dims x = DimsOfT(node.inputs[0]);
  switch (op.def->kind) {
    case OpKind::kGelu: {
      const auto& a = std::get<GeluAttrs>(op.attrs);
      const int code = a.approximate == GeluApproximation::kTanh ? 13 : a.approximate == GeluApproximation::kQuick ? 14 : 12;
      return SdGeluOp::Create(rt, code, static_cast<int>(NumElements(x)), out);
    }
    case OpKind::kGroupNorm:
      return SdGroupNormOp::Create(rt, std::get<GroupNormAttrs>(op.attrs), x, out);
    case OpKind::kAttention:
      return SdAttentionOp::Create(rt, std::get<AttentionAttrs>(op.attrs), x, DimsOfT(node.inputs[1]), out);
    case OpKind::kConv2DWinograd: {
      // Runs as the tiled implicit-GEMM convolution (same math, direct summation); a
      // Winograd-domain GPU kernel is not implemented yet.
      const auto& a = std::get<Conv2DWinogradAttrs>(op.attrs);
      const Dims w = DimsOfT(node.inputs[1]), o = DimsOfT(node.outputs[0]);
      ConvShape s;
      s.n = static_cast<int>(x[0]); s.h = static_cast<int>(x[1]); s.w = static_cast<int>(x[2]); s.ci = static_cast<int>(x[3]);
      s.co = static_cast<int>(w[0]); s.kh = 3; s.kw = 3;
      s.oh = static_cast<int>(o[1]); s.ow = static_cast<int>(o[2]);
      s.ph = s.pw = a.same_padding ? 1 : 0;
      static const int kAct[] = {0, 1, 3, 2, 4};  // ConvActivation -> TFLite fused activation code
      s.act = kAct[static_cast<int>(a.activation)];
      s.has_bias = true;
      return ConvOp::Create(rt, s, out);
    }
  }
  return Status::Error("unhandled Sd* op");
}

}  // namespace sdgpu::ocl
