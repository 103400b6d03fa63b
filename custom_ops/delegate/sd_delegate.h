// The delegate object handed to TFLite. It owns the options, logger, backend
// and stats; TFLite sees only the embedded abi::TfLiteDelegate, whose data_
// points back here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "abi/tflite_abi.h"
#include "common/log.h"
#include "common/status.h"
#include "delegate/backend.h"
#include "delegate/options.h"
#include "delegate/stats.h"

namespace sdgpu {

class SdDelegate {
 public:
  // `backend`: the compute backend the options name (entry/backend_factory.h CreateBackend).
  static Status Create(const DelegateOptions& options, std::unique_ptr<Backend> backend,
                       std::unique_ptr<SdDelegate>* out);
  ~SdDelegate();
  SdDelegate(const SdDelegate&) = delete;
  SdDelegate& operator=(const SdDelegate&) = delete;

  abi::TfLiteDelegate* tflite() { return &tflite_; }
  // nullptr if `d` is not one of ours.
  static SdDelegate* FromTflite(const abi::TfLiteDelegate* d);

  const Logger& logger() const { return logger_; }
  Backend& backend() { return *backend_; }
  // The backend of the per-op host kernels (PartitionKernel): the cpu backend itself, or, under a GPU backend, a cpu
  // backend made on first use for the Sd* nodes the GPU declines (they run on the CPU kernels inside the same
  // model instead of failing the load).
  Backend& host_backend();
  DelegateStats& stats() { return stats_; }
  const DelegateOptions& options() const { return options_; }
  std::string StatsJson() const;
  // Replaces the Sd* custom nodes among `candidates` that the host backend accepts with per-op host kernels
  // (PartitionKernel): how a GPU backend runs the nodes it declined. `replaced` lists them; a node no backend takes
  // is logged and left to the runtime (which then reports the unresolved custom op).
  Status ReplaceWithHostKernels(abi::TfLiteContext* context, const std::vector<int>& candidates,
                                std::vector<int>* replaced);

 private:
  SdDelegate() = default;
  static abi::TfLiteStatus PrepareThunk(abi::TfLiteContext* context, abi::TfLiteDelegate* delegate);
  abi::TfLiteStatus Prepare(abi::TfLiteContext* context);

  static constexpr uint64_t kMagic = 0x5344475055444c47ull;  // "SDGPUDLG"
  abi::TfLiteDelegate tflite_{};
  // Zeroed guard after the struct the runtime reads, in case a newer runtime
  // appends fields to TfLiteDelegate (they would read as null/0).
  [[maybe_unused]] unsigned char reserved_[64] = {};
  uint64_t magic_ = kMagic;
  DelegateOptions options_;
  Logger logger_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> host_fallback_;  // see host_backend()
  DelegateStats stats_;
};

}  // namespace sdgpu
