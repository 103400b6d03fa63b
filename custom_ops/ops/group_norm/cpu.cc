#include "ops/group_norm/cpu.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/cpu_simd.h"

namespace sdgpu {
namespace {

// Widest channel slice one channels-last task owns (its per-channel arrays live on the stack: 6 x 8 x 256 bytes).
constexpr int64_t kMaxChunkChannels = 256;

// Below this many elements (~20 us on one core) a tensor is normalised on the calling thread alone.
constexpr int64_t kParallelMinElements = 1 << 16;

// Channels-last layouts (B == 1) with groups of <= kMaxChunkChannels channels are normalised by channel slices:
// the number of whole groups per slice, chosen so that a slice is a multiple of 16 channels (64 bytes: tasks on
// different threads never write the same cache line when rows are 64-byte aligned). 0 = use the per-group path.
int64_t ChannelsLastChunkGroups(const GroupNormGeometry& g) {
  const int64_t cg = g.c / g.groups;
  if (g.b != 1 || cg > kMaxChunkChannels) return 0;
  const int64_t aligned = std::lcm<int64_t>(cg, 16);
  return aligned <= kMaxChunkChannels ? aligned / cg : std::max<int64_t>(1, kMaxChunkChannels / cg);
}

}  // namespace
}  // namespace sdgpu

#define SDGPU_SIMD_IMPL "ops/group_norm/cpu_impl.inc"
#define SDGPU_SIMD_WITH_MATH
#include "common/cpu_simd_instances.inc"

namespace sdgpu {

void GroupNormCpu(const GroupNormAttrs& attrs, const GroupNormGeometry& g, const float* x, const float* gamma,
                  const float* beta, float* y, ThreadPool* pool) {
  SelectIsa(&generic::RunGroupNorm, &avx2::RunGroupNorm, &avx512::RunGroupNorm)(attrs, g, x, gamma, beta, y, pool);
}

}  // namespace sdgpu
