#include "backends/opencl/host_staging_ring.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace sdgpu::ocl {
namespace {

// A slot's fill is split into copies of at least this size (smaller ones cost more in wake-ups than they save).
constexpr size_t kCopyGrain = size_t{1} << 20;
constexpr unsigned kMaxCopiers = 8;

}  // namespace

HostStagingRing::HostStagingRing(const ClApi* api, cl_command_queue queue) : api_(api), queue_(queue) {}

Status HostStagingRing::Create(const ClApi* api, cl_context context, cl_command_queue queue,
                               std::unique_ptr<HostStagingRing>* out) {
  std::unique_ptr<HostStagingRing> ring(new HostStagingRing(api, queue));
  for (int i = 0; i < kSlots; ++i) {
    cl_int err = CL_SUCCESS;
    cl_mem m = api->clCreateBuffer(context, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_ONLY, kSlotBytes, nullptr, &err);
    SDGPU_RETURN_IF_ERROR(ClCheck(err, "clCreateBuffer(staging slot)"));
    Slot slot;
    slot.mem = ClMemHandle(api, m);
    slot.host = api->clEnqueueMapBuffer(queue, m, CL_TRUE, CL_MAP_WRITE, 0, kSlotBytes, 0, nullptr, nullptr, &err);
    SDGPU_RETURN_IF_ERROR(ClCheck(err, "clEnqueueMapBuffer(staging slot)"));
    ring->slots_.push_back(std::move(slot));
  }
  const unsigned hw = std::max(1u, std::min(kMaxCopiers, std::thread::hardware_concurrency()));
  ring->copiers_ = std::make_unique<ThreadPool>(static_cast<int>(hw));
  *out = std::move(ring);
  return Status::Ok();
}

HostStagingRing::~HostStagingRing() {
  for (Slot& s : slots_) {
    if (s.written) {
      cl_event e = s.written.get();
      (void)api_->clWaitForEvents(1, &e);
    }
    // unmapped in queue order (after every write from it); the release waits for the unmap
    if (s.host != nullptr) (void)api_->clEnqueueUnmapMemObject(queue_, s.mem.get(), s.host, 0, nullptr, nullptr);
  }
  (void)api_->clFlush(queue_);
}

Status HostStagingRing::Write(cl_mem dst, size_t offset, size_t bytes, const void* src) {
  const auto* from = static_cast<const unsigned char*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kSlotBytes, bytes - done);
    Slot& slot = slots_[static_cast<size_t>(next_)];
    next_ = (next_ + 1) % kSlots;
    if (slot.written) {
      cl_event e = slot.written.get();
      SDGPU_RETURN_IF_ERROR(ClCheck(api_->clWaitForEvents(1, &e), "clWaitForEvents(staging slot)"));
      slot.written.reset();
    }
    auto* to = static_cast<unsigned char*>(slot.host);
    const size_t parts =
        std::min<size_t>(static_cast<size_t>(copiers_->num_threads()), (n + kCopyGrain - 1) / kCopyGrain);
    const size_t per = (n + parts - 1) / parts;
    copiers_->ParallelForIf(parts > 1, parts, [&](size_t p, int) {
      const size_t b = p * per, e = std::min(n, b + per);
      if (b < e) std::memcpy(to + b, from + done + b, e - b);
    });
    cl_event ev = nullptr;
    SDGPU_RETURN_IF_ERROR(ClCheck(api_->clEnqueueWriteBuffer(queue_, dst, CL_FALSE, offset + done, n, to, 0, nullptr,
                                                             &ev),
                                  "clEnqueueWriteBuffer(from staging slot)"));
    slot.written = ClEventHandle(api_, ev);
    // started now, not when the queue is next flushed: the copy overlaps the next slot's fill
    SDGPU_RETURN_IF_ERROR(ClCheck(api_->clFlush(queue_), "clFlush"));
    done += n;
  }
  return Status::Ok();
}

}  // namespace sdgpu::ocl
