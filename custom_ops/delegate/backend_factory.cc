#include "delegate/backend_factory.h"

#include "delegate/cpu_backend.h"
#ifdef SDGPU_HAVE_OPENCL
#include "backends/opencl/opencl_backend.h"
#endif

namespace sdgpu {

Status CreateBackend(const DelegateOptions& options, std::unique_ptr<Backend>* out) {
  if (options.backend == "cpu") {
    *out = std::make_unique<CpuBackend>(options);
    return Status::Ok();
  }
#ifdef SDGPU_HAVE_OPENCL
  if (options.backend == "opencl") {
    Logger logger(options.log_level);
    return OpenClBackend::Create(options, logger, out);
  }
  constexpr const char* kAvailable = "cpu, opencl";
#else
  constexpr const char* kAvailable = "cpu";
#endif
  if (options.backend == "opencl" || options.backend == "gl") {
    return Status::Error("backend '" + options.backend + "' is not available in this build (available: " +
                         std::string(kAvailable) + ")");
  }
  return Status::Error("unknown backend '" + options.backend + "' (expected cpu, opencl or gl)");
}

}  // namespace sdgpu
