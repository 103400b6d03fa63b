// Chooses the compute backend named by the "backend" delegate option.
#pragma once

#include <memory>

#include "common/status.h"
#include "delegate/backend.h"
#include "delegate/options.h"

namespace sdgpu {

Status CreateBackend(const DelegateOptions& options, std::unique_ptr<Backend>* out);

// The backends compiled into this build, e.g. "cpu, opencl" (static storage).
const char* AvailableBackends();

}  // namespace sdgpu
