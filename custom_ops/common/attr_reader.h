// Typed, validating access to a parsed options map, shared by every op's
// attrs parser. Each getter returns a one-line Status naming the op and key,
// which the delegate logs verbatim when it declines a node.
//
// Coercions mirror sdconvert.ops.base.OpSpec.decode (the Python side of the
// contract) so that a blob accepted there is accepted here: ints accept
// int/uint, floats accept float/int/uint, bools accept bool or int 0/1,
// strings accept string/key/blob. Unknown keys are ignored, as in Python.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "common/flexbuffer_map.h"
#include "common/status.h"

namespace sdgpu {

class AttrReader {
 public:
  AttrReader(const FlexMap& map, const char* op_name) : map_(map), op_(op_name) {}

  // Integer in [min, max]; accepts flexbuffer int or uint.
  Status Int(const char* key, int64_t min, int64_t max, int64_t* out) const;
  // Finite float; accepts float, int and uint.
  Status Float(const char* key, double* out) const;
  // Accepts bool, or int/uint 0 and 1.
  Status Bool(const char* key, bool* out) const;
  // String that must be one of `allowed`.
  Status Enum(const char* key, std::initializer_list<const char*> allowed, std::string* out) const;
  bool Has(const char* key) const { return map_.Find(key) != nullptr; }
  // Rejects keys outside `known`, for ops whose Python spec is strict about keys.
  Status NoUnknownKeys(std::initializer_list<const char*> known) const;

 private:
  Status Missing(const char* key) const;
  Status WrongType(const char* key, const char* expected, const FlexValue& v) const;

  const FlexMap& map_;
  const char* op_;
};

}  // namespace sdgpu
