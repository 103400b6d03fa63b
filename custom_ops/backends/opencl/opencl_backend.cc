#include "backends/opencl/opencl_backend.h"

#include <string>

#include "backends/opencl/opencl_device.h"
#include "gpu/gpu_backend.h"

namespace sdgpu {

Status CreateOpenClBackend(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out) {
  ocl::OpenClDeviceOptions o;
  o.profiling = !options.profile_path.empty();
  o.cache = gpu::OpenCache(options, logger);
  o.store_binaries = options.cache_programs == CachePrograms::kAlways  ? ocl::StoreBinaries::kAlways
                     : options.cache_programs == CachePrograms::kNever ? ocl::StoreBinaries::kNever
                                                                       : ocl::StoreBinaries::kAuto;
  o.act_half = options.activations_fp16;
  o.max_alloc_bytes = static_cast<size_t>(options.opencl_limits.max_alloc_bytes);
  o.uploads = options.weight_uploads == WeightUploads::kRing     ? ocl::OpenClDeviceOptions::Uploads::kRing
              : options.weight_uploads == WeightUploads::kDirect ? ocl::OpenClDeviceOptions::Uploads::kDirect
                                                                 : ocl::OpenClDeviceOptions::Uploads::kAuto;
  std::unique_ptr<ocl::OpenClDevice> device;
  SDGPU_RETURN_IF_ERROR(ocl::OpenClDevice::Create(o, logger, &device));
  device->set_cache(o.cache);
  *out = std::make_unique<gpu::GpuBackend>(options, std::move(device), "SdGpuOpenCL", logger);
  return Status::Ok();
}

}  // namespace sdgpu
