// The "opencl" backend: gpu::GpuBackend (gpu/gpu_backend.h: partitioning, ops,
// planning, profiling) over an OpenClDevice (backends/opencl/opencl_device.h).
#pragma once

#include <memory>

#include "common/log.h"
#include "common/status.h"
#include "delegate/backend.h"
#include "delegate/options.h"

namespace sdgpu {

// Fails with a one-line message when no OpenCL runtime/platform/device exists.
Status CreateOpenClBackend(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out);

}  // namespace sdgpu
