#include "ops/group_norm/cpu.h"

#include <cmath>

namespace sdgpu {

void GroupNormCpu(const GroupNormAttrs& attrs, const GroupNormGeometry& g, const float* x, const float* gamma,
                  const float* beta, float* y, ThreadPool* pool) {
  const int64_t cg = g.c / g.groups;  // channels per group
  const size_t tasks = static_cast<size_t>(g.n * g.groups);
  pool->ParallelFor(tasks, [&](size_t task, int) {
    const int64_t n = static_cast<int64_t>(task) / g.groups;
    const int64_t grp = static_cast<int64_t>(task) % g.groups;
    const int64_t c0 = grp * cg;
    const float* xn = x + n * g.a * g.c * g.b;
    float* yn = y + n * g.a * g.c * g.b;
    const double count = static_cast<double>(g.a * cg * g.b);

    double sum = 0.0;
    for (int64_t a = 0; a < g.a; ++a) {
      for (int64_t c = c0; c < c0 + cg; ++c) {
        const float* row = xn + (a * g.c + c) * g.b;
        for (int64_t b = 0; b < g.b; ++b) sum += row[b];
      }
    }
    const double mean = sum / count;
    double sq = 0.0;
    for (int64_t a = 0; a < g.a; ++a) {
      for (int64_t c = c0; c < c0 + cg; ++c) {
        const float* row = xn + (a * g.c + c) * g.b;
        for (int64_t b = 0; b < g.b; ++b) {
          const double dlt = row[b] - mean;
          sq += dlt * dlt;
        }
      }
    }
    const double rstd = 1.0 / std::sqrt(sq / count + static_cast<double>(attrs.eps));
    const bool silu = attrs.activation == GroupNormActivation::kSilu;
    for (int64_t a = 0; a < g.a; ++a) {
      for (int64_t c = c0; c < c0 + cg; ++c) {
        // y = x * scale + shift, with scale/shift folded per channel.
        const double scale = rstd * gamma[c];
        const double shift = beta[c] - mean * scale;
        const float* row = xn + (a * g.c + c) * g.b;
        float* out = yn + (a * g.c + c) * g.b;
        for (int64_t b = 0; b < g.b; ++b) {
          float v = static_cast<float>(row[b] * scale + shift);
          if (silu) v = v / (1.0f + std::exp(-v));
          out[b] = v;
        }
      }
    }
  });
}

}  // namespace sdgpu
