#include "ops/gelu/cpu.h"

#include <algorithm>
#include <cmath>

namespace sdgpu {
namespace {

constexpr int64_t kChunk = 1 << 15;

// Written to avoid the cancellation in 1 + erf(z) / 1 + tanh(u) for negative
// inputs (float32 would lose all digits below x ~ -4):
//   1 + erf(z)  = erfc(-z)
//   1 + tanh(u) = 2 / (1 + exp(-2u))
void GeluRange(GeluApproximation mode, const float* __restrict x, float* __restrict y, int64_t n) {
  switch (mode) {
    case GeluApproximation::kNone: {
      const float inv_sqrt2 = 0.70710678118654752440f;
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * std::erfc(-x[i] * inv_sqrt2);
      break;
    }
    case GeluApproximation::kTanh: {
      const float two_k0 = 1.59576912160573071176f;  // 2 * sqrt(2/pi)
      const float k1 = 0.044715f;
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = v / (1.0f + std::exp(-two_k0 * (v + k1 * v * v * v)));
      }
      break;
    }
    case GeluApproximation::kQuick:
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-1.702f * x[i]));
      break;
  }
}

}  // namespace

void GeluCpu(const GeluAttrs& attrs, const float* x, float* y, int64_t count, ThreadPool* pool) {
  const int64_t chunks = (count + kChunk - 1) / kChunk;
  pool->ParallelFor(static_cast<size_t>(chunks), [&](size_t c, int) {
    const int64_t begin = static_cast<int64_t>(c) * kChunk;
    const int64_t n = std::min<int64_t>(kChunk, count - begin);
    GeluRange(attrs.approximate, x + begin, y + begin, n);
  });
}

}  // namespace sdgpu
