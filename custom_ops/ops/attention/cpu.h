// CPU kernel for SdAttention (both variants), tiled so that the Sq x Sk score matrix is never materialised.
//
// Work is split into tasks of (batch, head, block of `block_q` queries) handed to the thread pool (problems under
// ~4 MFLOP run on the calling thread: waking workers would cost more). Queries live in SIMD lanes: a task
// transposes its query block once (Q^T, D x block_q), computes each key tile's scores as S^T = K . Q^T (keys x
// queries; K rows are broadcast straight from the input, nothing is packed), runs the softmax down the columns
// of S^T (per-query max / sum are plain vector ops, no horizontal reductions), accumulates O^T += V^T . P^T (V
// rows broadcast from the input) and transposes O^T back once at the end (8x8 SIMD transposes). Both products
// use register-tiled micro-kernels: 8 broadcast rows x up to 3 query vectors (24 accumulators with AVX-512).
// Instruction sets: AVX-512, AVX2+FMA or a portable 4-lane version, picked at runtime (common/cpu_simd.h); exp
// is a vector polynomial within 1.04 ulp (1.31 without FMA) of the exact value (common/cpu_simd_math.inc), no
// -ffast-math.
//
// Scratch per worker: Q^T (D x lanes), S^T (bk x lanes), O^T (D x lanes) and three per-query vectors, with
// lanes = min(block_q, Sq) rounded up to 16 and bk = min(block_k, Sk) (D, bk rounded up to 8): bounded
// independently of the sequence lengths, O(tile) <= O(tokens x D) (tests/native/test_memory.py).
//
// Variants:
//   flash            one pass over key tiles with an online softmax: the running max m and sum l are updated per
//                    tile and the accumulator is rescaled by exp(m_old - m_new) (folded into the V.P kernel).
//   partial_softmax  two passes: pass 1 computes the row max m and row sum l only (QK^T recomputed tile by tile,
//                    nothing stored); pass 2 recomputes each score tile, normalises it (exp(s - m) / l) and
//                    multiplies by V. Costs 2x QK^T and 2x exp but no rescaling; mirrors the paper's partially
//                    fused softmax. When all keys fit one tile (Sk <= block_k, e.g. cross-attention over 77 text
//                    tokens) the scores of pass 1 are kept instead of recomputed and 1/l scales the P.V row.
//
// Results do not depend on the thread count (each task's arithmetic is fixed), nor on the vector width (every
// reduction runs down a lane): AVX2 and AVX-512 give identical bits; the portable path differs within float
// rounding because it multiplies and adds separately where they use FMA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/thread_pool.h"
#include "ops/attention/attrs.h"

namespace sdgpu {

// Tile sizes (delegate options attention_block_q / attention_block_k). Any values >= 1 work; query blocks are
// padded to whole SIMD vectors and key tiles to whole 8-row (4-row without AVX-512) register groups. Measured on
// SD shapes (AVX-512): flash is insensitive to them (block_q 32..96, block_k 64..512 within 3%); partial softmax
// gains from block_k >= Sk (one pass): 256 makes SD1.5's 16x16-level self-attention 1.45x faster than 128.
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

// The same for every instruction set (sized for the widest), so Prepare and Run may disagree on it.
size_t AttentionCpuScratchBytesPerWorker(const AttentionProblem& p, const AttentionCpuConfig& cfg);

// `scratch` must hold pool->num_threads() * AttentionCpuScratchBytesPerWorker bytes, 64-byte aligned.
void AttentionCpu(const AttentionAttrs& attrs, const AttentionProblem& p, const AttentionCpuConfig& cfg,
                  const float* q, const float* k, const float* v, float* out, void* scratch, ThreadPool* pool);

}  // namespace sdgpu
