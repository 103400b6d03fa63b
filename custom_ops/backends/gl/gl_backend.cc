#include "backends/gl/gl_backend.h"

#include "backends/gl/gl_device.h"
#include "gpu/gpu_backend.h"

namespace sdgpu {

Status CreateGlBackend(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out) {
  gl::GlDeviceOptions o;
  o.profiling = !options.profile_path.empty();
  std::unique_ptr<gl::GlDevice> device;
  SDGPU_RETURN_IF_ERROR(gl::GlDevice::Create(o, logger, &device));
  *out = std::make_unique<gpu::GpuBackend>(options, std::move(device), "SdGpuGL");
  return Status::Ok();
}

}  // namespace sdgpu
