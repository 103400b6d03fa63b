#include "ops/gelu/cpu.h"

#include <algorithm>

#include "common/cpu_simd.h"

namespace sdgpu {
namespace {

// Output elements per task: big enough to amortise scheduling, small enough to balance 2..16 threads on SD
// tensors (the smallest GELU input of the SD1.5 UNet is 64 x 5120 = 10 chunks; its GEGLU output half that).
constexpr int64_t kChunk = 1 << 15;

}  // namespace
}  // namespace sdgpu

#define SDGPU_SIMD_IMPL "ops/gelu/cpu_impl.inc"
#define SDGPU_SIMD_WITH_MATH
#include "common/cpu_simd_instances.inc"

namespace sdgpu {

void GeluCpu(const GeluAttrs& attrs, const float* x, float* y, int64_t count, int64_t last_dim, ThreadPool* pool) {
  const int64_t f = attrs.gated ? last_dim / 2 : 0;
  const int64_t out_count = attrs.gated ? (f == 0 ? 0 : count / 2) : count;
  const int64_t chunks = (out_count + kChunk - 1) / kChunk;
  if (attrs.gated) {
    const auto range = SelectIsa(&generic::GeluGatedRange, &avx2::GeluGatedRange, &avx512::GeluGatedRange);
    pool->ParallelFor(static_cast<size_t>(chunks), [&](size_t c, int) {
      const int64_t begin = static_cast<int64_t>(c) * kChunk;
      range(attrs.approximate, x, y, f, begin, std::min(begin + kChunk, out_count));
    });
    return;
  }
  const auto range = SelectIsa(&generic::GeluRange, &avx2::GeluRange, &avx512::GeluRange);
  pool->ParallelFor(static_cast<size_t>(chunks), [&](size_t c, int) {
    const int64_t begin = static_cast<int64_t>(c) * kChunk;
    range(attrs.approximate, x + begin, y + begin, std::min<int64_t>(kChunk, count - begin));
  });
}

}  // namespace sdgpu
