#include "delegate/memory_planner.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

namespace sdgpu {
namespace {

bool AlignUp(size_t v, size_t* out) {
  if (v > std::numeric_limits<size_t>::max() - (MemoryPlanner::kAlignment - 1)) return false;
  *out = (v + MemoryPlanner::kAlignment - 1) / MemoryPlanner::kAlignment * MemoryPlanner::kAlignment;
  return true;
}

}  // namespace

int MemoryPlanner::Add(size_t bytes, int first_step, int last_step) {
  requests_.push_back(Request{bytes, first_step, std::max(first_step, last_step)});
  return static_cast<int>(requests_.size()) - 1;
}

int MemoryPlanner::Alias(int id, int first_step, int last_step) {
  Request& r = requests_[static_cast<size_t>(id)];
  r.first = std::min(r.first, first_step);
  r.last = std::max(r.last, std::max(first_step, last_step));
  ++num_aliases_;
  return id;
}

Status MemoryPlanner::Plan(size_t max_bank_bytes) {
  arena_bytes_ = 0;
  bank_bytes_.clear();
  std::vector<int> order(requests_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return requests_[a].bytes > requests_[b].bytes; });
  for (Request& r : requests_) r.placed = false;

  std::vector<int> live;  // placed requests of one bank whose lifetime overlaps the current one
  // The lowest offset of bank `bank` where `r` overlaps no live request of that bank (the greedy rule above).
  auto lowest_offset = [&](const Request& r, int bank, size_t* out) -> Status {
    live.clear();
    for (size_t j = 0; j < requests_.size(); ++j) {
      const Request& p = requests_[j];
      if (p.placed && p.bytes > 0 && p.bank == bank && p.first <= r.last && r.first <= p.last) {
        live.push_back(static_cast<int>(j));
      }
    }
    std::sort(live.begin(), live.end(), [&](int a, int b) { return requests_[a].offset < requests_[b].offset; });
    size_t candidate = 0;
    for (int j : live) {
      const Request& p = requests_[j];
      if (candidate + r.bytes <= p.offset) break;  // fits in the gap before p
      size_t end = 0;
      if (p.offset > std::numeric_limits<size_t>::max() - p.bytes || !AlignUp(p.offset + p.bytes, &end)) {
        return Status::Error("memory planner: arena size overflow");
      }
      candidate = std::max(candidate, end);
    }
    if (candidate > std::numeric_limits<size_t>::max() - r.bytes) {
      return Status::Error("memory planner: arena size overflow");
    }
    *out = candidate;
    return Status::Ok();
  };
  for (int id : order) {
    Request& r = requests_[id];
    r.offset = 0;
    r.bank = 0;
    if (r.bytes == 0) {
      r.placed = true;
      continue;
    }
    if (r.bytes > max_bank_bytes) {
      return Status::Error("memory planner: a " + std::to_string(r.bytes) + "-byte buffer is above the device's " +
                           std::to_string(max_bank_bytes) + "-byte limit for one buffer");
    }
    int bank = 0;
    size_t candidate = 0;
    for (;; ++bank) {
      if (static_cast<size_t>(bank) == bank_bytes_.size()) {  // a new bank: the request starts it
        bank_bytes_.push_back(0);
        candidate = 0;
        break;
      }
      SDGPU_RETURN_IF_ERROR(lowest_offset(r, bank, &candidate));
      if (candidate <= max_bank_bytes && r.bytes <= max_bank_bytes - candidate) break;  // within the cap
    }
    r.bank = bank;
    r.offset = candidate;
    r.placed = true;
    size_t end = 0;
    if (!AlignUp(candidate + r.bytes, &end)) return Status::Error("memory planner: arena size overflow");
    // (a bank's buffer may end inside the last alignment unit: the cap holds every request's bytes)
    size_t& bank_end = bank_bytes_[static_cast<size_t>(bank)];
    bank_end = std::max(bank_end, std::min(end, max_bank_bytes));
  }
  for (size_t b : bank_bytes_) arena_bytes_ += b;
  return Status::Ok();
}

}  // namespace sdgpu
