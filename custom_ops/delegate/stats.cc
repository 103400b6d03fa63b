#include "delegate/stats.h"

#include <algorithm>
#include <cstdio>

namespace sdgpu {

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void DelegateStats::RecordPartitioning(const PartitionPlan& plan) {
  std::lock_guard<std::mutex> lock(mu_);
  ++graphs_;
  claimed_nodes_ += static_cast<int>(plan.claimed.size());
  other_nodes_ += plan.other_nodes;
  for (const std::string& op : plan.claimed_ops) ++claimed_by_op_[op];
  declined_total_ += static_cast<int>(plan.declined.size());
  for (const DeclinedNode& d : plan.declined) {
    if (declined_.size() < kMaxDeclinedKept) declined_.push_back(d);
  }
}

void DelegateStats::RecordPrepare(size_t max_node_scratch_bytes, size_t arena_bytes, size_t arena_buffers) {
  std::lock_guard<std::mutex> lock(mu_);
  ++prepares_;
  max_node_scratch_bytes_ = std::max(max_node_scratch_bytes_, max_node_scratch_bytes);
  max_arena_bytes_ = std::max(max_arena_bytes_, arena_bytes);
  max_arena_buffers_ = std::max(max_arena_buffers_, arena_buffers);
}

std::string DelegateStats::ToJson(const std::string& backend, int num_threads, const Backend::Counters& counters,
                                  const std::string& extra) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string j = "{";
  j += "\"backend\":" + JsonString(backend);
  j += ",\"num_threads\":" + std::to_string(num_threads);
  j += ",\"graphs\":" + std::to_string(graphs_);
  j += ",\"claimed_nodes\":" + std::to_string(claimed_nodes_);
  j += ",\"other_nodes\":" + std::to_string(other_nodes_);
  j += ",\"claimed_by_op\":{";
  bool first = true;
  for (const auto& kv : claimed_by_op_) {
    j += (first ? "" : ",") + JsonString(kv.first) + ":" + std::to_string(kv.second);
    first = false;
  }
  j += "},\"declined_nodes\":" + std::to_string(declined_total_);
  j += ",\"declined\":[";
  for (size_t i = 0; i < declined_.size(); ++i) {
    j += (i ? "," : "");
    j += "{\"node\":" + std::to_string(declined_[i].node_index) + ",\"op\":" + JsonString(declined_[i].op_name) +
         ",\"reason\":" + JsonString(declined_[i].reason) + "}";
  }
  j += "],\"partitions\":" + std::to_string(partitions_);
  j += ",\"host_fallback_nodes\":" + std::to_string(host_fallback_nodes_);
  j += ",\"prepares\":" + std::to_string(prepares_);
  j += ",\"max_node_scratch_bytes\":" + std::to_string(max_node_scratch_bytes_);
  j += ",\"max_arena_bytes\":" + std::to_string(max_arena_bytes_);
  j += ",\"max_arena_buffers\":" + std::to_string(max_arena_buffers_);
  auto counter = [&j](const char* key, long long v) {
    if (v >= 0) j += std::string(",\"") + key + "\":" + std::to_string(v);
  };
  counter("device_weight_bytes", counters.device_weight_bytes);
  counter("host_weight_bytes", counters.host_weight_bytes);
  counter("max_host_weight_bytes", counters.max_host_weight_bytes);
  counter("host_pages_released_bytes", counters.host_pages_released_bytes);
  counter("upload_ring_bytes", counters.upload_ring_bytes);
  counter("setup_weights_host_us", counters.setup_weights_host_us);
  counter("setup_weights_upload_us", counters.setup_weights_upload_us);
  counter("setup_tuning_us", counters.setup_tuning_us);
  counter("setup_programs_us", counters.setup_programs_us);
  counter("programs_built", counters.programs_built);
  counter("programs_shared", counters.programs_shared);
  counter("context_shared", counters.context_shared);
  counter("weights_on_device", counters.weights_on_device);
  counter("weights_on_host", counters.weights_on_host);
  j += extra;
  j += ",\"invocations\":" + std::to_string(invocations_.load(std::memory_order_relaxed));
  // GPU partitions: host dispatch time (RecordDispatch) summed and of the last partition invoke, and how many
  // partition invokes the sum covers (the first ones include weight uploads and GEMM tuning)
  j += ",\"dispatch_us_total\":" + std::to_string(dispatch_ns_total_.load(std::memory_order_relaxed) / 1000);
  j += ",\"dispatch_us_last\":" + std::to_string(dispatch_ns_last_.load(std::memory_order_relaxed) / 1000);
  j += ",\"dispatches\":" + std::to_string(dispatches_.load(std::memory_order_relaxed));
  j += "}";
  return j;
}

}  // namespace sdgpu
