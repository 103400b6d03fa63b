// Sd* fused ops and DEQUANTIZE (kernels in ops/<op>/<backend> sources and
// backends/<backend>/kernels/elementwise.*).
#include <cstring>

#include "gpu/builtin_params.h"
#include "gpu/matmul_ops.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// Work-group size of group_norm_f32 (GN_WG in its source) and of the attention
// kernels (ATT_WG). Correctness constant: both size shared arrays by it.
constexpr size_t kGroupNormWg = 64;
constexpr size_t kAttentionWg = 64;
constexpr int kMaxHeadDim = 256;  // ATT_MAXD in the attention kernels

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
// DEQUANTIZE of constant weights): uploaded once, copied into the output per run
// (unary_f32 with op 0 = identity).
class ConstantOp final : public GpuOp {
 public:
  Status Enqueue(const Device& dev, const std::vector<TensorRef>&, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Buf(data_.get(), 0).Int(n_).Int(0);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  int n_ = 0;
  std::unique_ptr<Buffer> data_;
};

// dequant_f16(y, yo, x (half), xo (in halves), int n)
class DequantF16Op final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Buf(in[0].buffer, in[0].elem_offset(2)).Int(n_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  int n_ = 0;
};

// group_norm_f32(y, yo, x, xo, gamma, go, beta, bo, int A, int C, int B, int G, float eps, int silu);
// one kGroupNormWg-wide work-group per (batch, group).
class SdGroupNormOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Buf(in[0].buffer, in[0].elem_offset());
    a.Buf(in[1].buffer, in[1].elem_offset()).Buf(in[2].buffer, in[2].elem_offset());
    a.Int(static_cast<int>(g_.a)).Int(static_cast<int>(g_.c)).Int(static_cast<int>(g_.b));
    a.Int(static_cast<int>(g_.groups)).Float(eps_).Int(silu_);
    return dev.Launch(*k_, a, {static_cast<size_t>(g_.n * g_.groups) * kGroupNormWg, 1, 1}, {kGroupNormWg, 1, 1},
                      timings);
  }

  const Kernel* k_ = nullptr;
  GroupNormGeometry g_;
  float eps_ = 1e-5f;
  int silu_ = 0;
};

// One kAttentionWg-wide work-group per (batch, head, query row).
//   flash:   attn_flash(O, oo, Q, qo, K, ko, V, vo, int Sq, int Sk, int H, int D, float scale, int causal)
//   partial: attn_stats(stats, so, Q, qo, K, ko, Sq, Sk, H, D, scale, causal), then
//            attn_pv(O, oo, stats, so, Q, qo, K, ko, V, vo, Sq, Sk, H, D, scale, causal);
//            stats (row max m and sum s) live in the op's arena scratch.
class SdAttentionOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::scratch_bytes_;
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef& scratch,
                 Timings* timings) override {
    const Dim3 global = {rows_ * kAttentionWg, 1, 1}, local = {kAttentionWg, 1, 1};
    const TensorRef &q = in[0], &k = in[1], &v = in[2];
    auto tail = [&](Args& a) {
      a.Int(sq_).Int(sk_).Int(attrs_.heads).Int(attrs_.head_dim).Float(attrs_.scale).Int(attrs_.causal ? 1 : 0);
    };
    if (attrs_.variant == AttentionVariant::kFlash) {
      Args a;
      a.Buf(out.buffer, out.elem_offset()).Buf(q.buffer, q.elem_offset()).Buf(k.buffer, k.elem_offset());
      a.Buf(v.buffer, v.elem_offset());
      tail(a);
      return dev.Launch(*k1_, a, global, local, timings);
    }
    Args s;
    s.Buf(scratch.buffer, scratch.elem_offset()).Buf(q.buffer, q.elem_offset()).Buf(k.buffer, k.elem_offset());
    tail(s);
    SDGPU_RETURN_IF_ERROR(dev.Launch(*k1_, s, global, local, timings));
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Buf(scratch.buffer, scratch.elem_offset()).Buf(q.buffer, q.elem_offset());
    a.Buf(k.buffer, k.elem_offset()).Buf(v.buffer, v.elem_offset());
    tail(a);
    return dev.Launch(*k2_, a, global, local, timings);
  }

  const Kernel* k1_ = nullptr;
  const Kernel* k2_ = nullptr;
  AttentionAttrs attrs_;
  int n_ = 0, sq_ = 0, sk_ = 0;
  size_t rows_ = 0;
};

Status MakeSdGroupNorm(const Device& dev, const GroupNormAttrs& attrs, const Dims& x, std::unique_ptr<GpuOp>* out) {
  auto u = std::make_unique<SdGroupNormOp>();
  u->g_ = GroupNormGeometryFor(attrs, x);
  u->eps_ = attrs.eps;
  u->silu_ = attrs.activation == GroupNormActivation::kSilu ? 1 : 0;
  u->device_inputs_ = {0, 1, 2};
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("group_norm_f32", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

Status MakeSdAttention(const Device& dev, const AttentionAttrs& attrs, const Dims& q, const Dims& k,
                       std::unique_ptr<GpuOp>* out) {
  if (attrs.head_dim > kMaxHeadDim) {
    return Status::Error("head_dim " + std::to_string(attrs.head_dim) + " above the kernel limit " +
                         std::to_string(kMaxHeadDim));
  }
  auto u = std::make_unique<SdAttentionOp>();
  u->attrs_ = attrs;
  u->n_ = static_cast<int>(q[0]);
  u->sq_ = static_cast<int>(q[1]);
  u->sk_ = static_cast<int>(k[1]);
  u->device_inputs_ = {0, 1, 2};
  u->rows_ = static_cast<size_t>(u->n_) * attrs.heads * u->sq_;
  if (attrs.variant == AttentionVariant::kFlash) {
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("attn_flash", &u->k1_));
  } else {
    u->scratch_bytes_ = u->rows_ * 2 * sizeof(float);  // the m and s vectors
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("attn_stats", &u->k1_));
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("attn_pv", &u->k2_));
  }
  *out = std::move(u);
  return Status::Ok();
}

}  // namespace

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
  std::vector<float> v(static_cast<size_t>(n));
  if (in->type == abi::kTfLiteFloat16) {
    const auto* h = reinterpret_cast<const uint16_t*>(in->data.raw);
    for (int64_t i = 0; i < n; ++i) v[i] = HalfToFloat(h[i]);
  } else if (in->type == abi::kTfLiteInt8 || in->type == abi::kTfLiteUInt8) {
    const Dims d = DimsOf(in);
    const auto* q =
        in->quantization.type == 1 ? static_cast<const AffineQuantization*>(in->quantization.params) : nullptr;
    if (q == nullptr || q->scale == nullptr || q->scale->size < 1) {
      return Status::Error("int8 weights without affine quantization");
    }
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
  auto u = std::make_unique<ConstantOp>();
  u->n_ = static_cast<int>(v.size());
  SDGPU_RETURN_IF_ERROR(UploadConstant(dev, v.data(), v.size() * 4, &u->data_));
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
      // unary_f32 op codes: 12 = erf GELU, 13 = tanh GELU, 14 = quick GELU (elementwise kernels).
      const int code = a.approximate == GeluApproximation::kTanh    ? 13
                       : a.approximate == GeluApproximation::kQuick ? 14
                                                                    : 12;
      return MakeUnary(dev, code, NumElements(x), out);
    }
    case OpKind::kGroupNorm:
      return MakeSdGroupNorm(dev, std::get<GroupNormAttrs>(op.attrs), x, out);
    case OpKind::kAttention:
      return MakeSdAttention(dev, std::get<AttentionAttrs>(op.attrs), x, DimsOf(node.inputs[1]), out);
    case OpKind::kConv2DWinograd: {
      // Runs as the tiled implicit-GEMM convolution (same math, direct summation); a
      // Winograd-domain GPU kernel is not implemented yet.
      const auto& a = std::get<Conv2DWinogradAttrs>(op.attrs);
      const Dims w = DimsOf(node.inputs[1]), o = DimsOf(node.outputs[0]);
      ConvShape s;
      s.n = static_cast<int>(x[0]);
      s.h = static_cast<int>(x[1]);
      s.w = static_cast<int>(x[2]);
      s.ci = static_cast<int>(x[3]);
      s.co = static_cast<int>(w[0]);
      s.kh = 3;
      s.kw = 3;
      s.oh = static_cast<int>(o[1]);
      s.ow = static_cast<int>(o[2]);
      s.ph = s.pw = a.same_padding ? 1 : 0;
      static const int kAct[] = {0, 1, 3, 2, 4};  // ConvActivation -> TFLite fused activation code
      s.act = kAct[static_cast<int>(a.activation)];
      s.has_bias = true;
      return MakeConv(dev, s, out);
    }
  }
  return Status::Error("unhandled Sd* op");
}

}  // namespace sdgpu::gpu
