// Backend-agnostic description of a tensor as seen by op validation and shape
// inference: element type and dims. No data pointers, so the same code serves
// the CPU backend and future GPU backends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "abi/tflite_abi.h"

namespace sdgpu {

using Dims = std::vector<int64_t>;

struct TensorInfo {
  abi::TfLiteType type = abi::kTfLiteNoType;
  Dims dims;
};

inline int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

inline std::string DimsToString(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

// Upper bound for any single dimension and element count we accept. Keeps all
// index arithmetic comfortably inside int64 and rejects garbage shapes early.
constexpr int64_t kMaxDim = int64_t{1} << 31;
constexpr int64_t kMaxElements = int64_t{1} << 40;

}  // namespace sdgpu
