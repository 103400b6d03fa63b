#include "gpu/weight_prep.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// Host buffers in flight between the producing thread and the uploading one: two, so one fills while the other
// uploads.
constexpr size_t kSlots = 2;

// One weight made on the calling thread, with the hooks of PrepareWeights around PackedWeights::Ensure.
Status MakeInTurn(const Device& dev, PackedWeights* w, DeviceStaging* staging,
                  const std::function<Status(const PackedWeights*)>& before,
                  const std::function<void(const PackedWeights*)>& made) {
  if (before) SDGPU_RETURN_IF_ERROR(before(w));
  SDGPU_RETURN_IF_ERROR(w->Ensure(dev, staging));
  if (made) made(w);
  dev.progress().Advance();
  return Status::Ok();
}

// The two-stage host pipeline of the header comment. The producer fails only through `before` (the next upload
// reports it); an upload error stops it. Start() begins producing (PrepareWeights: while the device-made weights go
// up), Finish() uploads in turn.
class HostPipeline {
 public:
  HostPipeline(const Device& dev, const std::vector<PackedWeights*>& weights,
               const std::function<Status(const PackedWeights*)>& before,
               const std::function<void(const PackedWeights*)>& made)
      : dev_(dev), weights_(weights), before_(before), made_(made) {
    size_t largest = 0;
    for (const PackedWeights* w : weights_) largest = std::max(largest, w->elements());
    for (size_t i = 0; i < kSlots; ++i) {
      slots_.emplace_back();
      slots_.back().reserve(largest);
      free_.push_back(i);
    }
  }

  ~HostPipeline() {  // a Finish never reached (the device-made weights failed): stop the producer
    if (producer_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      producer_.join();
    }
  }

  void Start() {
    try {
      producer_ = std::thread([this] { Produce(); });
    } catch (const std::system_error&) {  // no thread: Finish makes them in turn
    }
  }

  Status Finish() {
    if (!producer_.joinable()) {
      for (PackedWeights* w : weights_) SDGPU_RETURN_IF_ERROR(MakeInTurn(dev_, w, nullptr, before_, made_));
      return Status::Ok();
    }
    Status status;
    for (size_t i = 0; i < weights_.size() && status.ok(); ++i) {
      size_t slot = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !ready_.empty(); });
        slot = ready_.front();
        ready_.pop_front();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        status = produce_status_;  // a failed `before`: the slot holds nothing to upload
      }
      if (status.ok()) status = weights_[i]->UploadHost(dev_, slots_[slot].data());
      if (status.ok() && made_) made_(weights_[i]);
      dev_.progress().Advance();
      {
        std::lock_guard<std::mutex> lock(mu_);
        free_.push_back(slot);
        stop_ = !status.ok();
      }
      cv_.notify_all();
    }
    producer_.join();
    return status;
  }

 private:
  void Produce() {
    for (PackedWeights* w : weights_) {
      size_t slot = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !free_.empty(); });
        if (stop_) return;
        slot = free_.front();
        free_.pop_front();
      }
      Status ready = before_ ? before_(w) : Status::Ok();
      if (ready.ok()) {
        const SetupTimer timer(dev_, Device::Setup::kWeightsHost);
        std::vector<float>& data = slots_[slot];
        data.assign(w->elements(), 0.0f);  // producers expect zeroed memory (e.g. tile-major padding)
        w->ProduceHost(data.data());
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!ready.ok() && produce_status_.ok()) produce_status_ = ready;
        ready_.push_back(slot);
      }
      cv_.notify_all();
    }
  }

  const Device& dev_;
  const std::vector<PackedWeights*>& weights_;
  const std::function<Status(const PackedWeights*)>& before_;
  const std::function<void(const PackedWeights*)>& made_;
  std::vector<std::vector<float>> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> free_, ready_;
  bool stop_ = false;
  Status produce_status_;  // the first failed `before`
  std::thread producer_;   // declared last: started after every member above exists
};

}  // namespace

Status PrepareWeights(const Device& dev, const std::vector<PackedWeights*>& weights,
                      const std::function<Status(const PackedWeights*)>& before,
                      const std::function<void(const PackedWeights*)>& made) {
  std::vector<PackedWeights*> on_device, on_host;
  for (PackedWeights* w : weights) {
    if (w == nullptr || w->ready()) continue;
    (w->has_device_producer() ? on_device : on_host).push_back(w);
  }
  if (on_device.empty() && on_host.empty()) return Status::Ok();
  SetupProgress& progress = dev.progress();
  progress.Begin("preparing weights", static_cast<long long>(on_device.size() + on_host.size()));
  DeviceStaging staging(/*ring=*/true);
  Status status;
  // The host-made weights are produced while the device-made ones go up (SD1.5's UNet: its two host LayerNorm folds,
  // ~80 ms, had followed ~0.35 s of uploads), then uploaded in turn.
  std::unique_ptr<HostPipeline> host;
  if (on_host.size() > 1 && std::thread::hardware_concurrency() > 1) {
    host = std::make_unique<HostPipeline>(dev, on_host, before, made);
    host->Start();
  }
  for (size_t i = 0; i < on_device.size() && status.ok(); ++i) {
    status = MakeInTurn(dev, on_device[i], &staging, before, made);
  }
  if (host) {
    if (status.ok()) status = host->Finish();
  } else {
    for (size_t i = 0; i < on_host.size() && status.ok(); ++i) {
      status = MakeInTurn(dev, on_host[i], nullptr, before, made);
    }
  }
  progress.End();
  return status;
}

}  // namespace sdgpu::gpu
