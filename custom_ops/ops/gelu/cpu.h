// CPU kernel for SdGelu: one elementwise pass, split into 32K-element chunks across the thread pool. float32
// throughout with the vector exp / erfc of common/cpu_simd_math.inc (<= 1.1e-7 / 4.4e-7 relative error), in
// cancellation-free forms (see cpu_impl.inc); AVX-512, AVX2+FMA or portable 4-lane code picked at runtime.
#pragma once

#include <cstdint>

#include "common/thread_pool.h"
#include "ops/gelu/attrs.h"

namespace sdgpu {

void GeluCpu(const GeluAttrs& attrs, const float* x, float* y, int64_t count, ThreadPool* pool);

}  // namespace sdgpu
