// RAII owner for TfLiteIntArray values we build ourselves (e.g. the node list
// handed to ReplaceNodeSubsetsWithDelegateKernels, which does NOT take
// ownership). Storage comes from malloc so that, should an API ever take
// ownership, the runtime's free() matches.
#pragma once

#include <cstdlib>
#include <memory>
#include <vector>

#include "abi/tflite_abi.h"

namespace sdgpu::abi {

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

class OwnedIntArray {
 public:
  OwnedIntArray() = default;
  // Returns false (leaving the object empty) when allocation fails.
  bool Assign(const std::vector<int>& values) {
    const size_t bytes = sizeof(int) * (values.size() + 1);
    auto* raw = static_cast<TfLiteIntArray*>(std::malloc(bytes));
    if (raw == nullptr) return false;
    raw->size = static_cast<int>(values.size());
    for (size_t i = 0; i < values.size(); ++i) raw->data[i] = values[i];
    array_.reset(raw);
    return true;
  }
  TfLiteIntArray* get() const { return array_.get(); }
  // Transfers ownership to the caller (for APIs that free() the array).
  TfLiteIntArray* release() { return array_.release(); }

 private:
  std::unique_ptr<TfLiteIntArray, FreeDeleter> array_;
};

// Read-only helpers that tolerate null arrays.
inline int IntArraySize(const TfLiteIntArray* a) { return a == nullptr ? 0 : a->size; }
inline std::vector<int> IntArrayToVector(const TfLiteIntArray* a) {
  std::vector<int> out;
  if (a == nullptr || a->size <= 0) return out;
  out.assign(a->data, a->data + a->size);
  return out;
}

}  // namespace sdgpu::abi
