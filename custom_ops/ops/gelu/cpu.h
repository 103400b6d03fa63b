// CPU reference kernel for SdGelu: one elementwise pass, split into chunks
// across the thread pool. Computed in float32 with libm's erfcf/expf, in
// cancellation-free forms (see cpu.cc).
#pragma once

#include <cstdint>

#include "common/thread_pool.h"
#include "ops/gelu/attrs.h"

namespace sdgpu {

void GeluCpu(const GeluAttrs& attrs, const float* x, float* y, int64_t count, ThreadPool* pool);

}  // namespace sdgpu
