// CPU reference kernel for SdAttention (both variants), tiled so that the
// Sq x Sk score matrix is never materialised.
//
// Work is split into tasks of (batch, head, block of `block_q` queries); each
// worker owns a private scratch slice holding one K tile (transposed), one
// score tile (block_q x block_k), the output accumulator (block_q x D) and two
// per-row vectors. Peak extra memory is therefore
//   workers * 4 * (D*block_k + block_q*block_k + block_q*D + 2*block_q) bytes,
// independent of the sequence lengths (O(tile), which is <= O(tokens*D)).
//
// Variants:
//   flash            one pass over key tiles with an online softmax: the
//                    running max m and sum l are updated per tile and the
//                    accumulator is rescaled by exp(m_old - m_new).
//   partial_softmax  two passes: pass 1 computes the row max m and row sum l
//                    (QK^T recomputed tile by tile, nothing stored); pass 2
//                    recomputes each score tile, normalises it in place
//                    (exp(s - m) / l) and multiplies by V. Costs 2x QK^T but
//                    no rescaling; mirrors the paper's partially fused softmax.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/thread_pool.h"
#include "ops/attention/attrs.h"

namespace sdgpu {

struct AttentionCpuConfig {
  int block_q = 64;
  int block_k = 128;
};

struct AttentionProblem {
  int64_t batch = 0;
  int64_t seq_q = 0;
  int64_t seq_k = 0;
  int heads = 0;
  int head_dim = 0;
};

size_t AttentionCpuScratchBytesPerWorker(const AttentionProblem& p, const AttentionCpuConfig& cfg);

// `scratch` must hold pool->num_threads() * AttentionCpuScratchBytesPerWorker
// bytes, 64-byte aligned.
void AttentionCpu(const AttentionAttrs& attrs, const AttentionProblem& p, const AttentionCpuConfig& cfg,
                  const float* q, const float* k, const float* v, float* out, void* scratch, ThreadPool* pool);

}  // namespace sdgpu
