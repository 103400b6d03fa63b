#include "backends/opencl/opencl_backend.h"

#include <string>

#include "backends/opencl/opencl_device.h"
#include "gpu/gpu_backend.h"

namespace sdgpu {
Status CreateOpenClBackend(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out) {
  ocl::OpenClDeviceOptions o;
  o.profiling = !options.profile_path.empty();
  o.cache_dir = ResolvedOpenClCacheDir(options);  // an unwritable one was reported when the delegate was created
  std::unique_ptr<ocl::OpenClDevice> device;
  SDGPU_RETURN_IF_ERROR(ocl::OpenClDevice::Create(o, logger, &device));
  *out = std::make_unique<gpu::GpuBackend>(options, std::move(device), "SdGpuOpenCL");
  return Status::Ok();
}

}  // namespace sdgpu
