// CPU kernel for SdGroupNorm. Works for any channel axis through the [N, A, C, B] view (NCHW: A=1; NHWC: B=1).
//
// Statistics: one pass, sums of (x - k) and (x - k)^2 in double with k a sample of the group (a shift that keeps
// E[d^2] - E[d]^2 well conditioned even at mean 1e3 / std 1), then one normalise(+SiLU) pass computing
// (x - mean) * scale_c + beta_c in double per element and SiLU in float with the vector exp.
//
// Work split, both deterministic (fixed summation order whatever the thread count):
//   channels-last, groups <= 256 channels (how litert-torch lays out SD activations: [N, HW, C], 10..80
//     channels per group): one task per (batch, slice of whole groups spanning a multiple of 16 channels);
//     each task streams its slice of every row twice, vectorised over channels.
//   otherwise: one task per (batch, group); the group is A contiguous runs of (C/groups)*B elements.
// Tensors under 64K elements run on the calling thread. Trade-off: tasks never split a group's rows, so SD1.5's
// [1, 4096, 320] has 4 tasks -- plenty for 2-4 threads, idle threads beyond that.
#pragma once

#include "common/thread_pool.h"
#include "ops/group_norm/attrs.h"

namespace sdgpu {

void GroupNormCpu(const GroupNormAttrs& attrs, const GroupNormGeometry& g, const float* x, const float* gamma,
                  const float* beta, float* y, ThreadPool* pool);

}  // namespace sdgpu
