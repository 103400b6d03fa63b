// Helpers shared by the op files of gpu/ (not part of the public op interface).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "abi/tflite_abi.h"
#include "common/status.h"
#include "gpu/device.h"
#include "ops/tensor_info.h"

namespace sdgpu::gpu {

constexpr int kMaxRank = 6;   // MAXR in the kernels (metadata arrays are sized by it)
constexpr size_t kWg1D = 64;  // work-group size of the 1-D elementwise/copy launches (not a correctness constant)
// layer_norm_rows (ops/group_norm/gpu.kern): work-group size LN_WG and the widest row it holds in registers
// (4 * LN_WG * LN_V4 floats). Correctness constants; SdGroupNorm's LayerNorm view and a folded LayerNorm's rows form
// (TiledGemmOp, layer_norm_fold=rows) launch it.
constexpr size_t kLayerNormRowsWg = 64;
constexpr int64_t kLayerNormRowsMaxC = 4 * 64 * 8;

Dims DimsOf(const abi::TfLiteTensor* t);
Dims StridesOf(const Dims& d);
// Values of a constant int32/int64 tensor (int64 narrowed); empty when it has no data.
std::vector<int32_t> ConstInts(const abi::TfLiteTensor* t);
bool Is4Byte(const abi::TfLiteTensor* t);
// Broadcast strides of `in` against `out` (right-aligned), padded to out rank.
Dims BroadcastStrides(const Dims& in, const Dims& out);
bool CanBroadcast(const Dims& in, const Dims& out);

inline size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline Status Need(bool ok, const std::string& why) { return ok ? Status::Ok() : Status::Error(why); }

// Adds the host time of its scope to one of the device's set-up counters (Device::NoteSetupNs).
class SetupTimer {
 public:
  SetupTimer(const Device& dev, Device::Setup kind) : dev_(dev), kind_(kind), t0_(std::chrono::steady_clock::now()) {}
  ~SetupTimer() {
    dev_.NoteSetupNs(kind_, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_)
                                .count());
  }
  SetupTimer(const SetupTimer&) = delete;
  SetupTimer& operator=(const SetupTimer&) = delete;

 private:
  const Device& dev_;
  Device::Setup kind_;
  std::chrono::steady_clock::time_point t0_;
};

// One-off host work of an op's set-up (weight packing, Winograd's U): fn(begin, end) over [0, n) in contiguous ranges
// of whole `grain`-sized chunks, on up to 16 threads (and the host's cores) of a pool made for the call; one range on
// the calling thread when `parallel` is false or there is a single chunk.
void HostParallelRanges(int64_t n, int64_t grain, bool parallel, const std::function<void(int64_t, int64_t)>& fn);

// A device buffer holding `bytes` of host data, uploaded once (blocking, so `data` may die after).
Status UploadConstant(const Device& dev, const void* data, size_t bytes, std::unique_ptr<Buffer>* out);
// UploadConstant for model weights (packed, re-laid-out or dequantized copies): also counted in
// Device::weight_bytes (stats device_weight_bytes). Kernel metadata goes through UploadConstant.
Status UploadWeights(const Device& dev, const void* data, size_t bytes, std::unique_ptr<Buffer>* out);

// 1-D launch over n work-items in kWg1D-wide groups.
inline Status Launch1D(const Device& dev, const Kernel& k, const Args& args, size_t n, Timings* timings) {
  return dev.Launch(k, args, {n, 1, 1}, {kWg1D, 1, 1}, timings);
}

}  // namespace sdgpu::gpu
