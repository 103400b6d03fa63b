// CPU kernel for SdGelu: one elementwise pass, split into 32K-element chunks (of the output) across the thread
// pool. float32 throughout with the vector exp / erfc of common/cpu_simd_math.inc (<= 1.1e-7 / 4.4e-7 relative
// error), in cancellation-free forms (see cpu_impl.inc); AVX-512, AVX2+FMA or portable 4-lane code picked at
// runtime. Gated (GEGLU): each output row reads its value and gate halves as two contiguous streams.
#pragma once

#include <cstdint>

#include "common/thread_pool.h"
#include "ops/gelu/attrs.h"

namespace sdgpu {

// `count`: elements of x; `last_dim`: x's innermost extent (read only when attrs.gated: x is [count / last_dim,
// last_dim] with last_dim = 2F even, y is [count / last_dim, F]).
void GeluCpu(const GeluAttrs& attrs, const float* x, float* y, int64_t count, int64_t last_dim, ThreadPool* pool);

}  // namespace sdgpu
