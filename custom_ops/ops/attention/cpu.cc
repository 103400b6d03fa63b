#include "ops/attention/cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/cpu_simd.h"

namespace sdgpu {
namespace {

// Scratch geometry shared by all instruction sets: query lanes padded to 16 floats (the widest vector), key and
// head-dim rows to 8 (the tallest register tile).
constexpr int kAttentionLaneAlign = 16;
constexpr int kAttentionRowAlign = 8;

// Below this many flops (~20 us on one AVX-512 core) a problem runs on the calling thread alone.
constexpr double kParallelMinFlops = 4e6;

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

struct TileLayout {
  int block_q = 0, block_k = 0;  // effective tile sizes (capped by the sequence lengths)
  int64_t lanes = 0;             // block_q padded: the row stride of every section
  int64_t qt = 0, st = 0, ot = 0;  // section sizes in floats (multiples of 16)
  int64_t total() const { return qt + st + ot + 3 * lanes; }
};

TileLayout LayoutFor(const AttentionProblem& p, const AttentionCpuConfig& cfg) {
  TileLayout lay;
  lay.block_q = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(cfg.block_q, p.seq_q)));
  lay.block_k = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(cfg.block_k, p.seq_k)));
  lay.lanes = RoundUp(lay.block_q, kAttentionLaneAlign);
  lay.qt = int64_t{p.head_dim} * lay.lanes;
  lay.st = RoundUp(lay.block_k, kAttentionRowAlign) * lay.lanes;
  lay.ot = RoundUp(p.head_dim, kAttentionRowAlign) * lay.lanes;
  return lay;
}

}  // namespace
}  // namespace sdgpu

#define SDGPU_SIMD_IMPL "ops/attention/cpu_impl.inc"
#define SDGPU_SIMD_WITH_MATH
#include "common/cpu_simd_instances.inc"

namespace sdgpu {

size_t AttentionCpuScratchBytesPerWorker(const AttentionProblem& p, const AttentionCpuConfig& cfg) {
  return static_cast<size_t>(LayoutFor(p, cfg).total()) * sizeof(float);
}

void AttentionCpu(const AttentionAttrs& a, const AttentionProblem& p, const AttentionCpuConfig& cfg,
                  const float* q, const float* k, const float* v, float* out, void* scratch, ThreadPool* pool) {
  if (p.batch == 0 || p.seq_q == 0) return;
  const TileLayout lay = LayoutFor(p, cfg);
  float* base = static_cast<float*>(scratch);
  SelectIsa(&generic::RunAttention, &avx2::RunAttention, &avx512::RunAttention)(a, p, lay, q, k, v, out, base, pool);
}

}  // namespace sdgpu
