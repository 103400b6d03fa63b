// GEMM-shaped ops (kernels in backends/<backend>/kernels/gemm.*).
#include "gpu/matmul_ops.h"

#include <algorithm>

#include "gpu/builtin_params.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// gemm_f32(C, co, int scb, int scm, A, ao, int sab, int sam, int sak, B, bo, int sbb, int sbk, int sbn,
//          bias, biaso, int has_bias, int M, int N, int K, float alpha, int act); global = (N, M, batch).
class GemmOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const TensorRef& A = in[s_.a_input];
    const TensorRef& B = in[s_.b_input];
    const bool has_bias = s_.bias_input >= 0;
    const TensorRef& bias = has_bias ? in[s_.bias_input] : A;
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Int(s_.scb).Int(s_.scm);
    a.Buf(A.buffer, A.elem_offset()).Int(s_.sab).Int(s_.sam).Int(s_.sak);
    a.Buf(B.buffer, B.elem_offset()).Int(s_.sbb).Int(s_.sbk).Int(s_.sbn);
    a.Buf(bias.buffer, bias.elem_offset()).Int(has_bias ? 1 : 0);
    a.Int(s_.M).Int(s_.N).Int(s_.K).Float(s_.alpha).Int(s_.act);
    return dev.Launch(*k_, a, {static_cast<size_t>(s_.N), static_cast<size_t>(s_.M), static_cast<size_t>(s_.batch)},
                      {kTile, kTile, 1}, timings);
  }

  const Kernel* k_ = nullptr;
  GemmShape s_;
};

// conv2d_igemm(Y, yo, X, xo, W, wo, bias, biaso, int has_bias, int H, int Wd, int Ci, int OH, int OW, int Co,
//              int KH, int KW, int sh, int sw, int dh, int dw, int ph, int pw, int M, int act); global = (Co, M).
class ConvOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const TensorRef& bias = s_.has_bias ? in[2] : in[1];
    const int M = s_.n * s_.oh * s_.ow;
    Args a;
    a.Buf(out.buffer, out.elem_offset()).Buf(in[0].buffer, in[0].elem_offset()).Buf(in[1].buffer, in[1].elem_offset());
    a.Buf(bias.buffer, bias.elem_offset()).Int(s_.has_bias ? 1 : 0);
    a.Int(s_.h).Int(s_.w).Int(s_.ci).Int(s_.oh).Int(s_.ow).Int(s_.co).Int(s_.kh).Int(s_.kw);
    a.Int(s_.sh).Int(s_.sw).Int(s_.dh).Int(s_.dw).Int(s_.ph).Int(s_.pw).Int(M).Int(s_.act);
    return dev.Launch(*k_, a, {static_cast<size_t>(s_.co), static_cast<size_t>(M), 1}, {kTile, kTile, 1}, timings);
  }

  const Kernel* k_ = nullptr;
  ConvShape s_;
};

}  // namespace

Status MakeGemm(const Device& dev, const GemmShape& s, std::vector<int> inputs, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(dev.max_work_group_size() >= kTile * kTile, "device work-group limit below 256"));
  auto u = std::make_unique<GemmOp>();
  u->s_ = s;
  u->device_inputs_ = std::move(inputs);
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("gemm_f32", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

Status MakeConv(const Device& dev, const ConvShape& s, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(dev.max_work_group_size() >= kTile * kTile, "device work-group limit below 256"));
  auto u = std::make_unique<ConvOp>();
  u->s_ = s;
  u->device_inputs_ = s.has_bias ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("conv2d_igemm", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

Status MakeFullyConnected(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto* prm = static_cast<const FullyConnectedParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && prm->weights_format == 0, "only default weights format"));
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] != nullptr) {
      SDGPU_RETURN_IF_ERROR(
          Need(node.inputs[i]->type == abi::kTfLiteFloat32, "only float32 operands (dequantize weights first)"));
    }
  }
  const Dims x = DimsOf(node.inputs[0]), w = DimsOf(node.inputs[1]);
  SDGPU_RETURN_IF_ERROR(Need(w.size() == 2, "weights must be 2-D"));
  GemmShape s;
  s.K = static_cast<int>(w[1]);
  s.N = static_cast<int>(w[0]);
  s.M = static_cast<int>(NumElements(x) / s.K);
  SDGPU_RETURN_IF_ERROR(Need(static_cast<int64_t>(s.M) * s.K == NumElements(x), "input size not a multiple of K"));
  SDGPU_RETURN_IF_ERROR(
      Need(NumElements(DimsOf(node.outputs[0])) == static_cast<int64_t>(s.M) * s.N, "output size mismatch"));
  s.sam = s.K;
  s.sak = 1;
  s.sbk = 1;
  s.sbn = s.K;
  s.scm = s.N;
  s.a_input = 0;
  s.b_input = 1;
  s.act = prm->activation;
  std::vector<int> inputs = {0, 1};
  if (node.inputs.size() > 2 && node.inputs[2] != nullptr) {
    s.bias_input = 2;
    inputs.push_back(2);
  }
  return MakeGemm(dev, s, inputs, out);
}

Status MakeBatchMatMul(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
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
  return MakeGemm(dev, s, {0, 1}, out);
}

Status MakeConv2D(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto* prm = static_cast<const ConvParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr, "missing params"));
  for (const abi::TfLiteTensor* t : node.inputs) {
    if (t != nullptr) SDGPU_RETURN_IF_ERROR(Need(t->type == abi::kTfLiteFloat32, "only float32 operands"));
  }
  const Dims x = DimsOf(node.inputs[0]), w = DimsOf(node.inputs[1]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(x.size() == 4 && w.size() == 4 && o.size() == 4, "expects NHWC x OHWI"));
  SDGPU_RETURN_IF_ERROR(Need(w[3] == x[3], "grouped convolution is not supported"));
  ConvShape s;
  s.n = static_cast<int>(x[0]);
  s.h = static_cast<int>(x[1]);
  s.w = static_cast<int>(x[2]);
  s.ci = static_cast<int>(x[3]);
  s.co = static_cast<int>(w[0]);
  s.kh = static_cast<int>(w[1]);
  s.kw = static_cast<int>(w[2]);
  s.oh = static_cast<int>(o[1]);
  s.ow = static_cast<int>(o[2]);
  s.sh = prm->stride_height;
  s.sw = prm->stride_width;
  s.dh = std::max(1, prm->dilation_height);
  s.dw = std::max(1, prm->dilation_width);
  if (prm->padding == kPaddingSame) {
    const int th = std::max(0, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1 - s.h);
    const int tw = std::max(0, (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w);
    s.ph = th / 2;
    s.pw = tw / 2;
  }
  s.act = prm->activation;
  s.has_bias = node.inputs.size() > 2 && node.inputs[2] != nullptr;
  return MakeConv(dev, s, out);
}

}  // namespace sdgpu::gpu
