// Per-delegate counters exposed to tests and tools through
// sdgpu_delegate_stats_json(). Updated under a mutex (cold paths only:
// partitioning and Prepare; Invoke only bumps an atomic).
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "delegate/partitioner.h"

namespace sdgpu {

// `s` as a JSON string literal (quotes, escapes; non-ASCII bytes as \u00XX).
std::string JsonString(const std::string& s);

class DelegateStats {
 public:
  void RecordPartitioning(const PartitionPlan& plan);
  // arena_buffers: the device buffers the arena takes (GPU partitions: one per MemoryPlanner bank; the CPU arena 1).
  void RecordPrepare(size_t max_node_scratch_bytes, size_t arena_bytes, size_t arena_buffers = 1);
  // Delegated partitions of the last graph (whole-graph backends; -1 = unknown).
  void RecordPartitions(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    partitions_ = n;
  }
  // Declined nodes of a GPU backend that run on the delegate's CPU kernels instead (SdDelegate::host_backend).
  void RecordHostFallback(const std::vector<int>& nodes) {
    std::lock_guard<std::mutex> lock(mu_);
    host_fallback_nodes_ += static_cast<int>(nodes.size());
  }
  void RecordInvoke() { invocations_.fetch_add(1, std::memory_order_relaxed); }
  // Host time a GPU partition's invoke spent submitting its work (input uploads + every launch, before it waits
  // for the results): when it nears the invoke's wall time, the device is starved by dispatch, not busy.
  void RecordDispatch(long long ns) {
    dispatch_ns_total_.fetch_add(ns, std::memory_order_relaxed);
    dispatch_ns_last_.store(ns, std::memory_order_relaxed);
    dispatches_.fetch_add(1, std::memory_order_relaxed);
  }
  // Backend counters < 0 are not reported (Backend::Counters).
  // `extra`: Backend::ExtraStatsJson.
  std::string ToJson(const std::string& backend, int num_threads, const Backend::Counters& counters = {},
                     const std::string& extra = "") const;

 private:
  static constexpr size_t kMaxDeclinedKept = 256;
  mutable std::mutex mu_;
  int graphs_ = 0;
  int claimed_nodes_ = 0;
  int other_nodes_ = 0;
  std::map<std::string, int> claimed_by_op_;
  std::vector<DeclinedNode> declined_;
  int declined_total_ = 0;
  int prepares_ = 0;
  int partitions_ = -1;
  int host_fallback_nodes_ = 0;
  size_t max_node_scratch_bytes_ = 0;
  size_t max_arena_bytes_ = 0;
  size_t max_arena_buffers_ = 0;
  std::atomic<long long> invocations_{0};
  std::atomic<long long> dispatch_ns_total_{0};
  std::atomic<long long> dispatch_ns_last_{0};
  std::atomic<long long> dispatches_{0};
};

}  // namespace sdgpu
