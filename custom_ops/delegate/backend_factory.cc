#include "delegate/backend_factory.h"

#include "delegate/cpu_backend.h"
#ifdef SDGPU_HAVE_OPENCL
#include "backends/opencl/opencl_backend.h"
#endif
#ifdef SDGPU_HAVE_GL
#include "backends/gl/gl_backend.h"
#endif

namespace sdgpu {

const char* AvailableBackends() {
  return "cpu"
#ifdef SDGPU_HAVE_OPENCL
         ", opencl"
#endif
#ifdef SDGPU_HAVE_GL
         ", gl"
#endif
      ;
}

Status CreateBackend(const DelegateOptions& options, std::unique_ptr<Backend>* out) {
  if (options.backend == "cpu") {
    *out = std::make_unique<CpuBackend>(options);
    return Status::Ok();
  }
  // GPU backends: gpu::GpuBackend over the backend's gpu::Device (see gpu/gpu_backend.h).
#ifdef SDGPU_HAVE_OPENCL
  if (options.backend == "opencl") return CreateOpenClBackend(options, Logger(options.log_level), out);
#endif
#ifdef SDGPU_HAVE_GL
  if (options.backend == "gl") return CreateGlBackend(options, Logger(options.log_level), out);
#endif
  if (options.backend == "opencl" || options.backend == "gl") {
    return Status::Error("backend '" + options.backend + "' is not available in this build (available: " +
                         AvailableBackends() + ")");
  }
  return Status::Error("unknown backend '" + options.backend + "' (expected cpu, opencl or gl)");
}

}  // namespace sdgpu
