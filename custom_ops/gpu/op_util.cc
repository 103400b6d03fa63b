#include "gpu/op_util.h"

#include <algorithm>
#include <thread>

#include "common/thread_pool.h"

#include "gpu/ops.h"

namespace sdgpu::gpu {

Dims DimsOf(const abi::TfLiteTensor* t) {
  Dims d;
  if (t != nullptr && t->dims != nullptr) {
    for (int i = 0; i < t->dims->size; ++i) d.push_back(t->dims->data[i]);
  }
  return d;
}

Dims StridesOf(const Dims& d) {
  Dims s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

std::vector<int32_t> ConstInts(const abi::TfLiteTensor* t) {
  std::vector<int32_t> v;
  if (t == nullptr || t->data.raw == nullptr) return v;
  if (t->type == abi::kTfLiteInt32) {
    v.assign(t->data.i32, t->data.i32 + t->bytes / 4);
  } else if (t->type == abi::kTfLiteInt64) {
    for (size_t i = 0; i < t->bytes / 8; ++i) v.push_back(static_cast<int32_t>(t->data.i64[i]));
  }
  return v;
}

bool Is4Byte(const abi::TfLiteTensor* t) { return t->type == abi::kTfLiteFloat32 || t->type == abi::kTfLiteInt32; }

Dims BroadcastStrides(const Dims& in, const Dims& out) {
  Dims s(out.size(), 0);
  const Dims is = StridesOf(in);
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[off + i] = in[i] == 1 ? 0 : is[i];
  return s;
}

bool CanBroadcast(const Dims& in, const Dims& out) {
  if (in.size() > out.size()) return false;
  const size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != 1 && in[i] != out[off + i]) return false;
  }
  return true;
}

void HostParallelRanges(int64_t n, int64_t grain, bool parallel, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr unsigned kMaxThreads = 16;
  const int64_t chunks = (n + grain - 1) / grain;
  const unsigned hw = std::max(1u, std::min(kMaxThreads, std::thread::hardware_concurrency()));
  const int64_t parts = parallel ? std::min<int64_t>(hw, chunks) : 1;
  if (parts <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  ThreadPool pool(static_cast<int>(parts));
  pool.ParallelFor(static_cast<size_t>(parts), [&](size_t part, int) {
    const int64_t p = static_cast<int64_t>(part);
    fn(chunks * p / parts * grain, std::min(n, chunks * (p + 1) / parts * grain));
  });
}

Status UploadConstant(const Device& dev, const void* data, size_t bytes, std::unique_ptr<Buffer>* out) {
  SDGPU_RETURN_IF_ERROR(dev.CreateBuffer(bytes, out));
  return dev.Upload(**out, 0, bytes, data, true);
}

Status UploadWeights(const Device& dev, const void* data, size_t bytes, std::unique_ptr<Buffer>* out) {
  const SetupTimer timer(dev, Device::Setup::kWeightsUpload);
  SDGPU_RETURN_IF_ERROR(UploadConstant(dev, data, bytes, out));
  dev.NoteWeightBytes(bytes);
  return Status::Ok();
}

bool IsConstant(const abi::TfLiteTensor* t) {
  return t != nullptr && t->data.raw != nullptr &&
         (t->allocation_type == abi::kTfLiteMmapRo || t->allocation_type == abi::kTfLitePersistentRo);
}

}  // namespace sdgpu::gpu
