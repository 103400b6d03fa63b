// Chooses the compute backend named by the "backend" delegate option, and judges the options whose values only the
// backends compiled into this build know. Above the backends (entry/ includes backends/, which include gpu/, which
// include delegate/): the delegate core never names a backend.
#pragma once

#include <memory>

#include "common/status.h"
#include "delegate/backend.h"
#include "delegate/options.h"

namespace sdgpu {

Status CreateBackend(const DelegateOptions& options, std::unique_ptr<Backend>* out);

// The parsed options' values that name something of a backend: attention_tiling (a tiling of the portable table or
// of a vendor's; the device picked later ignores one it lacks). Run after ParseDelegateOptions wherever options are
// taken (delegate creation, sdgpu_check_options).
Status CheckBackendOptions(const DelegateOptions& options);

// The backends compiled into this build, e.g. "cpu, opencl" (static storage).
const char* AvailableBackends();

}  // namespace sdgpu
