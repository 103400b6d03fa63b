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
// Banks: a device may cap one buffer's size (OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE, ~1 GB on Qualcomm's Adreno
// drivers whatever the phone's memory; SD1.5's fused + Winograd VAE decoder plans 1.46 GB at 512 x 512). Plan(cap)
// then fills several banks of at most `cap` bytes each, one device buffer per bank: a request goes to the first bank
// where the greedy offset keeps it within the cap, else to a new bank. Without a cap there is one bank and the same
// plan as before banks existed.
//
// Aliases: a pure view of a planned buffer (a GPU RESHAPE whose output is the
// input's bytes re-interpreted) is not a new request; Alias() widens the
// lifetime of the request it views instead, so the shared bytes stay reserved
// from the producer of the viewed tensor to the last consumer of any view.
#pragma once

#include <cstddef>
#include <cstdint>
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
  // `max_bank_bytes`: the most bytes one bank may hold (SIZE_MAX: one bank). A request larger than that is an error.
  Status Plan(size_t max_bank_bytes = SIZE_MAX);

  size_t offset(int id) const { return requests_[id].offset; }  // within its bank
  int bank(int id) const { return requests_[id].bank; }
  size_t num_banks() const { return bank_bytes_.size(); }
  size_t bank_bytes(size_t bank) const { return bank_bytes_[bank]; }
  size_t arena_bytes() const { return arena_bytes_; }  // every bank's bytes together
  size_t num_requests() const { return requests_.size(); }
  size_t num_aliases() const { return num_aliases_; }

 private:
  struct Request {
    size_t bytes;
    int first;
    int last;
    size_t offset = 0;
    int bank = 0;
    bool placed = false;
  };
  std::vector<Request> requests_;
  std::vector<size_t> bank_bytes_;
  size_t arena_bytes_ = 0;
  size_t num_aliases_ = 0;
};

}  // namespace sdgpu
