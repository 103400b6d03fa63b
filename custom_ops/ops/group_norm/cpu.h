// CPU reference kernel for SdGroupNorm. One task per (batch, group); two
// passes over the group (mean, then centred sum of squares) accumulated in
// double for accuracy, then one normalise(+SiLU) pass. Works for any channel
// axis through the [N, A, C, B] view (NCHW: A=1; NHWC: B=1).
#pragma once

#include "common/thread_pool.h"
#include "ops/group_norm/attrs.h"

namespace sdgpu {

void GroupNormCpu(const GroupNormAttrs& attrs, const GroupNormGeometry& g, const float* x, const float* gamma,
                  const float* beta, float* y, ThreadPool* pool);

}  // namespace sdgpu
