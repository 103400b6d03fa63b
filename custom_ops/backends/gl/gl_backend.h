// The "gl" backend: gpu::GpuBackend (gpu/gpu_backend.h: partitioning, ops,
// planning, profiling) over a GlDevice (backends/gl/gl_device.h: headless
// EGL + OpenGL ES 3.1 compute shaders).
#pragma once

#include <memory>

#include "common/log.h"
#include "common/status.h"
#include "delegate/backend.h"
#include "delegate/options.h"

namespace sdgpu {

// Fails with a one-line message when no EGL / OpenGL ES 3.1 context can be created.
Status CreateGlBackend(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out);

}  // namespace sdgpu
