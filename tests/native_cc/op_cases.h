// Reader of the op-case files that tests/native_cc/make_tiny_unet_ops.py writes (format: op_cases.py): small graphs of
// fused Sd* ops, their generated inputs (seeds, not data) and a sample of each reference output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sdtest {

enum class TensorKind : uint8_t { kInput = 0, kConst = 1, kIntermediate = 2, kOutput = 3 };

struct TensorCase {
  TensorKind kind = TensorKind::kInput;
  std::vector<int> dims;
  // kInput / kConst: value[i] = float(offset + scale * Uniform(seed, i)).
  uint64_t seed = 0;
  float offset = 0.0f;
  float scale = 1.0f;
  // kOutput: the reference's values at SampleIndex(k, n) for k < sample.size(), and over all n values the float64
  // sum, the float64 sum of magnitudes and the largest magnitude.
  std::vector<float> sample;
  double sum = 0.0;
  double abs_sum = 0.0;
  float max_abs = 0.0f;

  int64_t NumElements() const;
  // The generated data of a kInput / kConst tensor.
  std::vector<float> Values() const;
};

struct NodeCase {
  std::string op;       // custom op name, e.g. "SdGroupNorm"
  std::string options;  // flexbuffer custom options, as in the .tflite
  std::vector<int> inputs;
  std::vector<int> outputs;
};

struct OpCase {
  std::string name;
  std::vector<TensorCase> tensors;
  std::vector<NodeCase> nodes;
};

// A value in [-1, 1), a multiple of 2^-23, from a splitmix64 hash of (seed, index); op_cases.uniform in Python.
float Uniform(uint64_t seed, uint64_t index);

// The flat index of the k-th stored sample of an n-element output (op_cases.sample_indices).
int64_t SampleIndex(int64_t k, int64_t n);

// Reads `path`; false with a reason in `error` when the file is missing, truncated or of another format.
bool ReadOpCases(const std::string& path, std::vector<OpCase>* cases, std::string* error);

}  // namespace sdtest
