#include "ops/conv2d_winograd/cpu_kernel.h"

#include <vector>

#include "ops/conv2d_winograd/cpu.h"

namespace sdgpu {
namespace {

class Conv2DWinogradCpuKernel final : public BackendKernel {
 public:
  Conv2DWinogradCpuKernel(const Conv2DWinogradAttrs& attrs, ThreadPool* pool) : attrs_(attrs), pool_(pool) {}

  Status Prepare(const std::vector<TensorInfo>& in, const TensorInfo&, size_t* scratch) override {
    const WinogradGeometry g = WinogradGeometryFor(attrs_, in[0].dims, in[1].dims);
    if (g.cin != geometry_.cin || g.cout != geometry_.cout) transformed_for_ = nullptr;  // weights reshaped
    geometry_ = g;
    *scratch = WinogradScratchBytes(geometry_);
    return Status::Ok();
  }

  Status Run(const KernelIO& io) override {
    const auto* filter = static_cast<const float*>(io.inputs[1]);
    if (filter != transformed_for_) {
      u_.resize(static_cast<size_t>(WinogradTransformedWeightElements(geometry_)));
      WinogradTransformWeights(geometry_, filter, u_.data(), pool_);
      transformed_for_ = filter;
    }
    WinogradConvCpu(attrs_, geometry_, static_cast<const float*>(io.inputs[0]), u_.data(),
                    static_cast<const float*>(io.inputs[2]), static_cast<float*>(io.output), io.scratch, pool_);
    return Status::Ok();
  }

 private:
  Conv2DWinogradAttrs attrs_;
  ThreadPool* pool_;
  WinogradGeometry geometry_;
  std::vector<float> u_;
  const float* transformed_for_ = nullptr;
};

}  // namespace

std::unique_ptr<BackendKernel> MakeConv2DWinogradCpuKernel(const Conv2DWinogradAttrs& attrs, ThreadPool* pool) {
  return std::make_unique<Conv2DWinogradCpuKernel>(attrs, pool);
}

}  // namespace sdgpu
