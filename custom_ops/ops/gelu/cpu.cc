#include "ops/gelu/cpu.h"

#include <algorithm>

#include "common/cpu_simd.h"

namespace sdgpu {
namespace {

// Elements per task: big enough to amortise scheduling, small enough to balance 2..16 threads on SD tensors
// (the smallest GELU input of the SD1.5 UNet is 64 x 5120 = 10 chunks).
constexpr int64_t kChunk = 1 << 15;

}  // namespace
}  // namespace sdgpu

#define SDGPU_SIMD_IMPL "ops/gelu/cpu_impl.inc"
#define SDGPU_SIMD_WITH_MATH
#include "common/cpu_simd_instances.inc"

namespace sdgpu {

void GeluCpu(const GeluAttrs& attrs, const float* x, float* y, int64_t count, ThreadPool* pool) {
  const auto range = SelectIsa(&generic::GeluRange, &avx2::GeluRange, &avx512::GeluRange);
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  pool->ParallelFor(static_cast<size_t>(chunks), [&](size_t c, int) {
    const int64_t begin = static_cast<int64_t>(c) * kChunk;
    range(attrs.approximate, x + begin, y + begin, std::min<int64_t>(kChunk, count - begin));
  });
}

}  // namespace sdgpu
