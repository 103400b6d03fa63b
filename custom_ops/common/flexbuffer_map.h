// A small, bounds-checked reader for the one flexbuffer shape our custom ops
// use: a root MAP whose values are scalars (int/uint/float/bool/null) or
// strings (string, key or blob). Written from the public FlexBuffers format description; it does
// not depend on the flatbuffers headers.
//
// Design trade-off: we parse eagerly into a small vector of (key, value)
// entries instead of offering a lazy view. Options blobs are tiny (< 1 KiB),
// eager parsing makes every bounds check happen in one place, and the result
// owns its strings so it never dangles. Nested containers are recognised but
// not followed (reported as kOther), which also bounds recursion to zero.
//
// Every read is checked against [0, size): arbitrary bytes produce a Status
// error, never an out-of-bounds access. Limits: <= kMaxEntries entries, keys
// <= kMaxKeyLength bytes, strings <= kMaxStringLength bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace sdgpu {

enum class FlexKind { kNull, kInt, kUInt, kFloat, kBool, kString, kOther };

const char* FlexKindName(FlexKind kind);

struct FlexValue {
  FlexKind kind = FlexKind::kNull;
  int64_t i = 0;      // kInt
  uint64_t u = 0;     // kUInt
  double f = 0.0;     // kFloat
  bool b = false;     // kBool
  std::string s;      // kString
  int raw_type = 0;   // the FlexBuffers type id, for error messages
};

class FlexMap {
 public:
  static constexpr size_t kMaxEntries = 256;
  static constexpr size_t kMaxKeyLength = 128;
  static constexpr size_t kMaxStringLength = 4096;

  // Parses `size` bytes at `data`; the root must be a map.
  static Status Parse(const void* data, size_t size, FlexMap* out);

  // Returns the value for `key`, or nullptr when absent.
  const FlexValue* Find(std::string_view key) const;
  const std::vector<std::pair<std::string, FlexValue>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, FlexValue>> entries_;
};

}  // namespace sdgpu
