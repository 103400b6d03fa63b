#include "backends/opencl/opencl_backend.h"

#include <cstdlib>
#include <string>

#include "backends/opencl/opencl_device.h"
#include "gpu/gpu_backend.h"

namespace sdgpu {
namespace {

// "" -> $XDG_CACHE_HOME/sdgpu/opencl or ~/.cache/sdgpu/opencl; "none" -> no cache.
std::string ResolveCacheDir(const std::string& option) {
  if (option == "none") return "";
  if (!option.empty()) return option;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/sdgpu/opencl";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/sdgpu/opencl";
  }
  return "";
}

}  // namespace

Status CreateOpenClBackend(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out) {
  ocl::OpenClDeviceOptions o;
  o.profiling = !options.profile_path.empty();
  o.cache_dir = ResolveCacheDir(options.opencl_cache_dir);
  std::unique_ptr<ocl::OpenClDevice> device;
  SDGPU_RETURN_IF_ERROR(ocl::OpenClDevice::Create(o, logger, &device));
  *out = std::make_unique<gpu::GpuBackend>(options, std::move(device), "SdGpuOpenCL");
  return Status::Ok();
}

}  // namespace sdgpu
