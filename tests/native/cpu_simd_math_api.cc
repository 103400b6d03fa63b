// Test-only C entry points over common/cpu_simd_math.inc for every instruction set this CPU supports
// (tests/native/test_cpu_simd_math.py compiles this file into a throwaway library and calls it via ctypes).
// Not part of the delegate: the kernels include the same .inc files.
#include <cstdint>

#include "common/cpu_simd.h"

namespace sdgpu {
namespace {

enum class Fn { kExp = 0, kErfc = 1 };

}  // namespace
}  // namespace sdgpu

#define SDGPU_SIMD_IMPL "cpu_simd_math_map.inc"
#define SDGPU_SIMD_WITH_MATH
#include "common/cpu_simd_instances.inc"

extern "C" {

// The instruction set the kernels would use now (0 generic, 1 avx2, 2 avx512; honours SDGPU_CPU_ISA).
int sdsimd_active_isa() { return static_cast<int>(sdgpu::ActiveCpuIsa()); }

// y = fn(x) elementwise with instruction set `isa`; fn 0 = exp, 1 = erfc. Returns -1 when `isa` is not
// available (higher than sdsimd_active_isa()) or unknown.
int sdsimd_map(int isa, int fn, const float* x, float* y, int64_t n) {
  if (isa < 0 || isa > sdsimd_active_isa() || fn < 0 || fn > 1) return -1;
  const auto f = static_cast<sdgpu::Fn>(fn);
  switch (isa) {
#if SDGPU_SIMD_X86
    case 2: sdgpu::avx512::Map(f, x, y, n); return 0;
    case 1: sdgpu::avx2::Map(f, x, y, n); return 0;
#endif
    case 0: sdgpu::generic::Map(f, x, y, n); return 0;
    default: return -1;
  }
}

}  // extern "C"
