// The delegate object handed to TFLite. It owns the options, logger, backend
// and stats; TFLite sees only the embedded abi::TfLiteDelegate, whose data_
// points back here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "abi/tflite_abi.h"
#include "common/log.h"
#include "common/status.h"
#include "delegate/backend.h"
#include "delegate/options.h"
#include "delegate/stats.h"

namespace sdgpu {

class SdDelegate {
 public:
  static Status Create(const DelegateOptions& options, std::unique_ptr<SdDelegate>* out);
  ~SdDelegate();
  SdDelegate(const SdDelegate&) = delete;
  SdDelegate& operator=(const SdDelegate&) = delete;

  abi::TfLiteDelegate* tflite() { return &tflite_; }
  // nullptr if `d` is not one of ours.
  static SdDelegate* FromTflite(const abi::TfLiteDelegate* d);

  const Logger& logger() const { return logger_; }
  Backend& backend() { return *backend_; }
  DelegateStats& stats() { return stats_; }
  const DelegateOptions& options() const { return options_; }
  std::string StatsJson() const;

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
  DelegateStats stats_;
};

}  // namespace sdgpu
