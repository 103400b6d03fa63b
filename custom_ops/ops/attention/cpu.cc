#include "ops/attention/cpu.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sdgpu {
namespace {

constexpr size_t kAlignFloats = 16;  // 64 bytes

size_t RoundUp(size_t n) { return (n + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

struct WorkerScratch {
  float* kt;   // [D][block_k]  transposed key tile
  float* s;    // [block_q][block_k] scores / probabilities
  float* acc;  // [block_q][D]
  float* m;    // [block_q] running row max
  float* l;    // [block_q] running row sum
};

struct Layout {
  size_t kt, s, acc, m, l;
  size_t total() const { return kt + s + acc + m + l; }
};

Layout LayoutFor(const AttentionProblem& p, const AttentionCpuConfig& cfg) {
  const size_t d = static_cast<size_t>(p.head_dim);
  const size_t bq = static_cast<size_t>(cfg.block_q), bk = static_cast<size_t>(cfg.block_k);
  return Layout{RoundUp(d * bk), RoundUp(bq * bk), RoundUp(bq * d), RoundUp(bq), RoundUp(bq)};
}

WorkerScratch SliceFor(float* base, const Layout& lay, int worker) {
  float* w = base + lay.total() * static_cast<size_t>(worker);
  WorkerScratch ws;
  ws.kt = w;
  ws.s = ws.kt + lay.kt;
  ws.acc = ws.s + lay.s;
  ws.m = ws.acc + lay.acc;
  ws.l = ws.m + lay.m;
  return ws;
}

// Everything one (batch, head, query block) task needs.
struct Task {
  const float* q;  // first query row of the block, head slice
  const float* k;  // key row 0, head slice
  const float* v;  // value row 0, head slice
  float* out;      // first output row of the block, head slice
  int64_t row_stride;  // H*D
  int64_t q0;          // absolute index of the first query row
  int bq;              // rows in this block
  int64_t key_end;     // exclusive bound on keys any row may see
};

// s[i][j] = scale * <q_i, k_{k0+j}>, with the causal mask applied.
void ScoreTile(const Task& t, const AttentionAttrs& a, int block_k, int64_t k0, int bk, WorkerScratch& ws) {
  const int d_count = a.head_dim;
  // Transpose the key tile so the inner loop runs over contiguous keys.
  for (int j = 0; j < bk; ++j) {
    const float* krow = t.k + (k0 + j) * t.row_stride;
    for (int d = 0; d < d_count; ++d) ws.kt[static_cast<size_t>(d) * block_k + j] = krow[d];
  }
  for (int i = 0; i < t.bq; ++i) {
    float* __restrict srow = ws.s + static_cast<size_t>(i) * block_k;
    const float* __restrict qrow = t.q + i * t.row_stride;
    for (int j = 0; j < bk; ++j) srow[j] = 0.0f;
    for (int d = 0; d < d_count; ++d) {
      const float qd = qrow[d];
      const float* __restrict kt = ws.kt + static_cast<size_t>(d) * block_k;
      for (int j = 0; j < bk; ++j) srow[j] += qd * kt[j];
    }
    const float scale = a.scale;
    for (int j = 0; j < bk; ++j) srow[j] *= scale;
    if (a.causal) {
      // key index k0 + j is masked when it exceeds the query index q0 + i.
      const int64_t first_masked = t.q0 + i + 1 - k0;
      for (int64_t j = std::max<int64_t>(first_masked, 0); j < bk; ++j) {
        srow[j] = -std::numeric_limits<float>::infinity();
      }
    }
  }
}

// acc[i][:] += sum_j p[i][j] * v[k0 + j][:]
void AccumulatePV(const Task& t, int d_count, int block_k, int64_t k0, int bk, WorkerScratch& ws) {
  for (int i = 0; i < t.bq; ++i) {
    const float* __restrict prow = ws.s + static_cast<size_t>(i) * block_k;
    float* __restrict acc = ws.acc + static_cast<size_t>(i) * d_count;
    for (int j = 0; j < bk; ++j) {
      const float pj = prow[j];
      if (pj == 0.0f) continue;  // masked / underflowed keys
      const float* __restrict vrow = t.v + (k0 + j) * t.row_stride;
      for (int d = 0; d < d_count; ++d) acc[d] += pj * vrow[d];
    }
  }
}

void RunFlash(const Task& t, const AttentionAttrs& a, const AttentionCpuConfig& cfg, WorkerScratch& ws) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int d_count = a.head_dim;
  for (int i = 0; i < t.bq; ++i) {
    ws.m[i] = neg_inf;
    ws.l[i] = 0.0f;
  }
  std::fill(ws.acc, ws.acc + static_cast<size_t>(t.bq) * d_count, 0.0f);
  for (int64_t k0 = 0; k0 < t.key_end; k0 += cfg.block_k) {
    const int bk = static_cast<int>(std::min<int64_t>(cfg.block_k, t.key_end - k0));
    ScoreTile(t, a, cfg.block_k, k0, bk, ws);
    for (int i = 0; i < t.bq; ++i) {
      float* srow = ws.s + static_cast<size_t>(i) * cfg.block_k;
      float tile_max = neg_inf;
      for (int j = 0; j < bk; ++j) tile_max = std::max(tile_max, srow[j]);
      const float m_new = std::max(ws.m[i], tile_max);
      if (m_new == neg_inf) {  // every key so far is masked for this row
        for (int j = 0; j < bk; ++j) srow[j] = 0.0f;
        continue;
      }
      float sum = 0.0f;
      for (int j = 0; j < bk; ++j) {
        const float p = std::exp(srow[j] - m_new);
        srow[j] = p;
        sum += p;
      }
      if (m_new != ws.m[i]) {
        const float correction = std::exp(ws.m[i] - m_new);  // 0 when m was -inf
        float* acc = ws.acc + static_cast<size_t>(i) * d_count;
        for (int d = 0; d < d_count; ++d) acc[d] *= correction;
        ws.l[i] *= correction;
        ws.m[i] = m_new;
      }
      ws.l[i] += sum;
    }
    AccumulatePV(t, d_count, cfg.block_k, k0, bk, ws);
  }
  for (int i = 0; i < t.bq; ++i) {
    const float inv = ws.l[i] > 0.0f ? 1.0f / ws.l[i] : 0.0f;
    const float* acc = ws.acc + static_cast<size_t>(i) * d_count;
    float* orow = t.out + i * t.row_stride;
    for (int d = 0; d < d_count; ++d) orow[d] = acc[d] * inv;
  }
}

void RunPartialSoftmax(const Task& t, const AttentionAttrs& a, const AttentionCpuConfig& cfg, WorkerScratch& ws) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const int d_count = a.head_dim;
  for (int i = 0; i < t.bq; ++i) {
    ws.m[i] = neg_inf;
    ws.l[i] = 0.0f;
  }
  // Pass 1: row max and row sum (online merge of per-tile statistics).
  for (int64_t k0 = 0; k0 < t.key_end; k0 += cfg.block_k) {
    const int bk = static_cast<int>(std::min<int64_t>(cfg.block_k, t.key_end - k0));
    ScoreTile(t, a, cfg.block_k, k0, bk, ws);
    for (int i = 0; i < t.bq; ++i) {
      const float* srow = ws.s + static_cast<size_t>(i) * cfg.block_k;
      float tile_max = neg_inf;
      for (int j = 0; j < bk; ++j) tile_max = std::max(tile_max, srow[j]);
      const float m_new = std::max(ws.m[i], tile_max);
      if (m_new == neg_inf) continue;
      float sum = 0.0f;
      for (int j = 0; j < bk; ++j) sum += std::exp(srow[j] - m_new);
      ws.l[i] = ws.l[i] * std::exp(ws.m[i] - m_new) + sum;
      ws.m[i] = m_new;
    }
  }
  // Pass 2: normalised probabilities fused into the product with V.
  std::fill(ws.acc, ws.acc + static_cast<size_t>(t.bq) * d_count, 0.0f);
  for (int i = 0; i < t.bq; ++i) ws.l[i] = ws.l[i] > 0.0f ? 1.0f / ws.l[i] : 0.0f;  // now 1/l
  for (int64_t k0 = 0; k0 < t.key_end; k0 += cfg.block_k) {
    const int bk = static_cast<int>(std::min<int64_t>(cfg.block_k, t.key_end - k0));
    ScoreTile(t, a, cfg.block_k, k0, bk, ws);
    for (int i = 0; i < t.bq; ++i) {
      float* srow = ws.s + static_cast<size_t>(i) * cfg.block_k;
      const float m = ws.m[i], inv_l = ws.l[i];
      for (int j = 0; j < bk; ++j) srow[j] = std::exp(srow[j] - m) * inv_l;
    }
    AccumulatePV(t, d_count, cfg.block_k, k0, bk, ws);
  }
  for (int i = 0; i < t.bq; ++i) {
    const float* acc = ws.acc + static_cast<size_t>(i) * d_count;
    float* orow = t.out + i * t.row_stride;
    for (int d = 0; d < d_count; ++d) orow[d] = acc[d];
  }
}

}  // namespace

size_t AttentionCpuScratchBytesPerWorker(const AttentionProblem& p, const AttentionCpuConfig& cfg) {
  return LayoutFor(p, cfg).total() * sizeof(float);
}

void AttentionCpu(const AttentionAttrs& a, const AttentionProblem& p, const AttentionCpuConfig& cfg,
                  const float* q, const float* k, const float* v, float* out, void* scratch, ThreadPool* pool) {
  const Layout lay = LayoutFor(p, cfg);
  const int64_t row_stride = int64_t{p.heads} * p.head_dim;
  const int64_t q_blocks = (p.seq_q + cfg.block_q - 1) / cfg.block_q;
  const size_t num_tasks = static_cast<size_t>(p.batch * p.heads * q_blocks);
  float* base = static_cast<float*>(scratch);
  pool->ParallelFor(num_tasks, [&](size_t task, int worker) {
    const int64_t qb = static_cast<int64_t>(task) % q_blocks;
    const int64_t h = (static_cast<int64_t>(task) / q_blocks) % p.heads;
    const int64_t n = static_cast<int64_t>(task) / (q_blocks * p.heads);
    Task t;
    t.row_stride = row_stride;
    t.q0 = qb * cfg.block_q;
    t.bq = static_cast<int>(std::min<int64_t>(cfg.block_q, p.seq_q - t.q0));
    t.q = q + (n * p.seq_q + t.q0) * row_stride + h * p.head_dim;
    t.out = out + (n * p.seq_q + t.q0) * row_stride + h * p.head_dim;
    t.k = k + n * p.seq_k * row_stride + h * p.head_dim;
    t.v = v + n * p.seq_k * row_stride + h * p.head_dim;
    // Causal: the last row of the block sees keys [0, q0 + bq).
    t.key_end = a.causal ? std::min<int64_t>(p.seq_k, t.q0 + t.bq) : p.seq_k;
    WorkerScratch ws = SliceFor(base, lay, worker);
    if (a.variant == AttentionVariant::kFlash) RunFlash(t, a, cfg, ws);
    else RunPartialSoftmax(t, a, cfg, ws);
  });
}

}  // namespace sdgpu
