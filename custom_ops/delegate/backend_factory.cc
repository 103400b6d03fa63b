#include "delegate/backend_factory.h"

#include "delegate/cpu_backend.h"

namespace sdgpu {

Status CreateBackend(const DelegateOptions& options, std::unique_ptr<Backend>* out) {
  if (options.backend == "cpu") {
    *out = std::make_unique<CpuBackend>(options);
    return Status::Ok();
  }
  if (options.backend == "opencl" || options.backend == "gl") {
    return Status::Error("backend '" + options.backend + "' is not available in this build (available: cpu)");
  }
  return Status::Error("unknown backend '" + options.backend + "' (expected cpu, opencl or gl)");
}

}  // namespace sdgpu
