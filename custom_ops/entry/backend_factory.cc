#include "entry/backend_factory.h"

#include <vector>

#include "delegate/cpu_backend.h"
#ifdef SDGPU_HAVE_GPU
#include "gpu/op_factories.h"
#endif
#ifdef SDGPU_HAVE_OPENCL
#include "backends/opencl/nvidia/attention_tilings.h"
#include "backends/opencl/opencl_backend.h"
#endif
#ifdef SDGPU_HAVE_GL
#include "backends/gl/gl_backend.h"
#endif

namespace sdgpu {
namespace {

#ifdef SDGPU_HAVE_GPU
// Every tiling a backend compiled into this library may run: the option names one whichever device is picked later
// (a tiling the device lacks is then ignored, not an error).
std::vector<gpu::AttnTiling> VendorAttentionTilings() {
#ifdef SDGPU_HAVE_OPENCL
  return ocl::nvidia::AttentionTilings();
#else
  return {};
#endif
}
#endif

}  // namespace

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

Status CheckBackendOptions(const DelegateOptions& options) {
#ifdef SDGPU_HAVE_GPU
  if (!options.attention_tiling.empty() &&
      !gpu::IsAttentionTilingName(options.attention_tiling, VendorAttentionTilings())) {
    return Status::Error("option attention_tiling='" + options.attention_tiling +
                         "' is not a tiling (e.g. r40, h80, r80, r160, dyn, legacy, short, short32)");
  }
#endif
  return Status::Ok();
}

}  // namespace sdgpu
