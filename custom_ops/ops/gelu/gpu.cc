// SdGelu on the GPU backends: the gated form's op (gelu_gated_f32[_v4], ops/gelu/gpu.kern) and the GELU code the
// kernels take; the plain form is the unary_f32 op (gpu/elementwise_ops.cc).
#include <memory>
#include <string>

#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

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

}  // namespace

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

int GeluKernelCode(const GeluAttrs& attrs) {
  return attrs.approximate == GeluApproximation::kTanh    ? kGeluKernelErf + 1
         : attrs.approximate == GeluApproximation::kQuick ? kGeluKernelErf + 2
                                                          : kGeluKernelErf;
}

}  // namespace sdgpu::gpu
