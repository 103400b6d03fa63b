#include "ops/gelu/cpu.h"

#include <algorithm>

#include "common/cpu_simd.h"

namespace sdgpu {
namespace {

// Elements per task: big enough to amortise scheduling, small enough to balance 2..16 threads on SD tensors
// (the smallest GELU input of the SD1.5 UNet is 64 x 5120 = 10 chunks).
constexpr int64_t kChunk = 1 << 15;

namespace generic {
using Isa = simd::Generic;
#include "common/cpu_simd_math.inc"
#include "ops/gelu/cpu_impl.inc"
}  // namespace generic

}  // namespace
}  // namespace sdgpu

#if SDGPU_SIMD_X86
SDGPU_SIMD_AVX2_BEGIN
namespace sdgpu {
namespace {
namespace avx2 {
using Isa = simd::Avx2;
#include "common/cpu_simd_math.inc"
#include "ops/gelu/cpu_impl.inc"
}  // namespace avx2
}  // namespace
}  // namespace sdgpu
SDGPU_SIMD_END

SDGPU_SIMD_AVX512_BEGIN
namespace sdgpu {
namespace {
namespace avx512 {
using Isa = simd::Avx512;
#include "common/cpu_simd_math.inc"
#include "ops/gelu/cpu_impl.inc"
}  // namespace avx512
}  // namespace
}  // namespace sdgpu
SDGPU_SIMD_END
#endif

namespace sdgpu {

void GeluCpu(const GeluAttrs& attrs, const float* x, float* y, int64_t count, ThreadPool* pool) {
  void (*range)(GeluApproximation, const float*, float*, int64_t) = generic::GeluRange;
#if SDGPU_SIMD_X86
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512: range = avx512::GeluRange; break;
    case CpuIsa::kAvx2: range = avx2::GeluRange; break;
    case CpuIsa::kGeneric: break;
  }
#endif
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  pool->ParallelFor(static_cast<size_t>(chunks), [&](size_t c, int) {
    const int64_t begin = static_cast<int64_t>(c) * kChunk;
    range(attrs.approximate, x + begin, y + begin, std::min<int64_t>(kChunk, count - begin));
  });
}

}  // namespace sdgpu
