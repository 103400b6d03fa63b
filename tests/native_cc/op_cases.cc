#include "tests/native_cc/op_cases.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

namespace sdtest {
namespace {

constexpr char kMagic[8] = {'S', 'D', 'O', 'P', 'C', 'A', 'S', 'E'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kSamples = 256;       // op_cases.SAMPLES
constexpr int64_t kSampleStride = 7919;  // op_cases.SAMPLE_STRIDE

// Little-endian reads over the whole file (both targets, x86-64 and aarch64 Linux, are little-endian).
class Reader {
 public:
  explicit Reader(std::string data) : data_(std::move(data)) {}

  template <typename T>
  bool Get(T* out) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(out, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool GetString(std::string* out) {
    uint32_t n = 0;
    if (!Get(&n) || data_.size() - pos_ < n) return false;
    out->assign(data_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool GetArray(size_t n, std::vector<T>* out) {
    if ((data_.size() - pos_) / sizeof(T) < n) return false;
    out->resize(n);
    if (n > 0) std::memcpy(out->data(), data_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return true;
  }
  bool AtEnd() const { return pos_ == data_.size(); }

 private:
  std::string data_;
  size_t pos_ = 0;
};

bool ReadTensor(Reader* r, TensorCase* t) {
  uint8_t kind = 0, rank = 0;
  if (!r->Get(&kind) || !r->Get(&rank) || kind > 3 || !r->GetArray(rank, &t->dims)) return false;
  t->kind = static_cast<TensorKind>(kind);
  for (int d : t->dims) {
    if (d < 0) return false;
  }
  if (t->kind == TensorKind::kInput || t->kind == TensorKind::kConst) {
    return r->Get(&t->seed) && r->Get(&t->offset) && r->Get(&t->scale);
  }
  if (t->kind == TensorKind::kOutput) {
    uint32_t m = 0;
    if (!r->Get(&t->sum) || !r->Get(&t->abs_sum) || !r->Get(&t->max_abs) || !r->Get(&m)) return false;
    const int64_t n = t->NumElements();
    if (m != static_cast<uint32_t>(n < kSamples ? n : kSamples)) return false;
    return r->GetArray(m, &t->sample);
  }
  return true;
}

bool ReadNode(Reader* r, NodeCase* n) {
  uint32_t count = 0;
  if (!r->GetString(&n->op) || !r->GetString(&n->options)) return false;
  if (!r->Get(&count) || !r->GetArray(count, &n->inputs)) return false;
  return r->Get(&count) && r->GetArray(count, &n->outputs);
}

}  // namespace

int64_t TensorCase::NumElements() const {
  int64_t n = 1;
  for (int d : dims) n *= d;
  return n;
}

std::vector<float> TensorCase::Values() const {
  std::vector<float> v(static_cast<size_t>(NumElements()));
  // float64 arithmetic with one rounding to float (the product of two floats is exact in double, so this is the same
  // whether or not the compiler fuses it into an FMA), as numpy computes it.
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(static_cast<double>(offset) + static_cast<double>(scale) * Uniform(seed, i));
  }
  return v;
}

float Uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + index;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<double>(z >> 40) * (1.0 / 8388608.0) - 1.0);
}

int64_t SampleIndex(int64_t k, int64_t n) { return (k * kSampleStride) % n; }

bool ReadOpCases(const std::string& path, std::vector<OpCase>* cases, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *error = "cannot open " + path;
    return false;
  }
  Reader r(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
  char magic[8] = {};
  uint32_t version = 0, count = 0;
  for (char& c : magic) {
    if (!r.Get(&c)) break;
  }
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0 || !r.Get(&version) || version != kVersion || !r.Get(&count) ||
      count > 100000) {
    *error = path + ": not an op-case file of version " + std::to_string(kVersion);
    return false;
  }
  cases->assign(count, OpCase());
  for (OpCase& c : *cases) {
    uint32_t num_tensors = 0, num_nodes = 0;
    bool ok = r.GetString(&c.name) && r.Get(&num_tensors);
    if (ok) c.tensors.resize(num_tensors);
    for (size_t i = 0; ok && i < c.tensors.size(); ++i) ok = ReadTensor(&r, &c.tensors[i]);
    ok = ok && r.Get(&num_nodes);
    if (ok) c.nodes.resize(num_nodes);
    for (size_t i = 0; ok && i < c.nodes.size(); ++i) ok = ReadNode(&r, &c.nodes[i]);
    if (!ok) {
      *error = path + ": truncated or malformed case '" + c.name + "'";
      return false;
    }
  }
  if (!r.AtEnd()) {
    *error = path + ": trailing bytes after the last case";
    return false;
  }
  return true;
}

}  // namespace sdtest
