// Set-up uploads of many large weights in a row, through host-visible staging slots (delegate option weight_uploads).
//
// Why: a plain non-blocking clEnqueueWriteBuffer from the model's pages makes the driver copy them into its own
// staging on one host core before the transfer: 4.0-4.3 GB/s for SD1.5's 3.4 GB fp32 UNet on an H200 host, about
// half of a warm start's UNet set-up. Here the slots are CL_MEM_ALLOC_HOST_PTR buffers mapped once (page-locked host
// memory on a discrete GPU), all host cores copy a chunk of the weights into a free slot, and the write into the
// device buffer goes from the slot (a DMA at the link's rate) while the cores fill the next one: 9.2-9.6 GB/s there
// with 16 MiB slots (64 MiB slots: 5 GB/s). On a device that shares the host's memory (a phone, PoCL) the slot write
// would be one more copy: weight_uploads "auto" leaves those on the direct path (OpenClDevice::CreateUploadRing).
//
// A slot is written again only after its previous write completed (its event), so a write never reads a slot being
// filled; the caller's source may be reused as soon as Write returns. The destructor waits for every write, then
// unmaps and releases the slots. Enqueues use the delegate's own queue, in order with everything else on it.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "backends/opencl/cl_api.h"
#include "backends/opencl/cl_handle.h"
#include "common/status.h"
#include "common/thread_pool.h"

namespace sdgpu::ocl {

class HostStagingRing {
 public:
  static constexpr size_t kSlotBytes = size_t{16} << 20;
  static constexpr int kSlots = 4;

  // Creates and maps the slots (a blocking map: call it when the queue holds no long work).
  static Status Create(const ClApi* api, cl_context context, cl_command_queue queue,
                       std::unique_ptr<HostStagingRing>* out);
  ~HostStagingRing();
  HostStagingRing(const HostStagingRing&) = delete;
  HostStagingRing& operator=(const HostStagingRing&) = delete;

  // `bytes` of `src` into `dst` at `offset`, in chunks of at most one slot.
  Status Write(cl_mem dst, size_t offset, size_t bytes, const void* src);

 private:
  struct Slot {
    ClMemHandle mem;
    void* host = nullptr;    // the mapping, for the ring's lifetime
    ClEventHandle written;   // the last write from this slot
  };
  HostStagingRing(const ClApi* api, cl_command_queue queue);

  const ClApi* api_;
  cl_command_queue queue_;
  std::vector<Slot> slots_;
  int next_ = 0;
  std::unique_ptr<ThreadPool> copiers_;  // fills a slot from all host cores (up to 8)
};

}  // namespace sdgpu::ocl
