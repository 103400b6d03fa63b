// Backend-agnostic arena planner for one delegated partition.
//
// Every buffer the partition needs besides its external inputs/outputs
// (tensors passed between our own nodes, per-node scratch) is a request with a
// byte size and a lifetime [first_step, last_step] in node execution order.
// Plan() assigns 64-byte-aligned offsets so that buffers whose lifetimes
// overlap never overlap in memory, using the classic greedy-by-size heuristic
// (largest first, lowest offset that fits). It is not optimal, but it is
// deterministic, O(n^2) for the handful of buffers per partition, and gives
// the same answer to every backend (CPU heap arena now, GPU buffers later).
//
// Aliases: a pure view of a planned buffer (a GPU RESHAPE whose output is the
// input's bytes re-interpreted) is not a new request; Alias() widens the
// lifetime of the request it views instead, so the shared bytes stay reserved
// from the producer of the viewed tensor to the last consumer of any view.
#pragma once

#include <cstddef>
#include <vector>

#include "common/status.h"

namespace sdgpu {

class MemoryPlanner {
 public:
  static constexpr size_t kAlignment = 64;

  // Returns the request id. Zero-byte requests get offset 0 and take no space.
  int Add(size_t bytes, int first_step, int last_step);
  // Records a view of request `id` used during [first_step, last_step]: the request's lifetime becomes the
  // union of both (a view never needs bytes of its own). Returns `id`; must precede Plan().
  int Alias(int id, int first_step, int last_step);
  Status Plan();

  size_t offset(int id) const { return requests_[id].offset; }
  size_t arena_bytes() const { return arena_bytes_; }
  size_t num_requests() const { return requests_.size(); }
  size_t num_aliases() const { return num_aliases_; }

 private:
  struct Request {
    size_t bytes;
    int first;
    int last;
    size_t offset = 0;
    bool placed = false;
  };
  std::vector<Request> requests_;
  size_t arena_bytes_ = 0;
  size_t num_aliases_ = 0;
};

}  // namespace sdgpu
