#include "common/attr_reader.h"

#include <cmath>

namespace sdgpu {

Status AttrReader::Missing(const char* key) const {
  return Status::Error(std::string(op_) + ": missing required attribute '" + key + "'");
}

Status AttrReader::WrongType(const char* key, const char* expected, const FlexValue& v) const {
  return Status::Error(std::string(op_) + ": attribute '" + key + "' must be " + expected + ", got " +
                       FlexKindName(v.kind));
}

Status AttrReader::Int(const char* key, int64_t min, int64_t max, int64_t* out) const {
  const FlexValue* v = map_.Find(key);
  if (v == nullptr) return Missing(key);
  int64_t value = 0;
  if (v->kind == FlexKind::kInt) {
    value = v->i;
  } else if (v->kind == FlexKind::kUInt) {
    if (v->u > static_cast<uint64_t>(INT64_MAX)) value = INT64_MAX;
    else value = static_cast<int64_t>(v->u);
  } else {
    return WrongType(key, "an int", *v);
  }
  if (value < min || value > max) {
    return Status::Error(std::string(op_) + ": attribute '" + key + "' = " + std::to_string(value) +
                         " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  *out = value;
  return Status::Ok();
}

Status AttrReader::Float(const char* key, double* out) const {
  const FlexValue* v = map_.Find(key);
  if (v == nullptr) return Missing(key);
  double value = 0.0;
  if (v->kind == FlexKind::kFloat) value = v->f;
  else if (v->kind == FlexKind::kInt) value = static_cast<double>(v->i);
  else if (v->kind == FlexKind::kUInt) value = static_cast<double>(v->u);
  else return WrongType(key, "a float", *v);
  if (!std::isfinite(value)) {
    return Status::Error(std::string(op_) + ": attribute '" + key + "' must be finite");
  }
  *out = value;
  return Status::Ok();
}

Status AttrReader::Bool(const char* key, bool* out) const {
  const FlexValue* v = map_.Find(key);
  if (v == nullptr) return Missing(key);
  if (v->kind == FlexKind::kBool) {
    *out = v->b;
    return Status::Ok();
  }
  if ((v->kind == FlexKind::kInt && (v->i == 0 || v->i == 1)) || (v->kind == FlexKind::kUInt && v->u <= 1)) {
    *out = v->kind == FlexKind::kInt ? v->i == 1 : v->u == 1;
    return Status::Ok();
  }
  return WrongType(key, "a bool", *v);
}

Status AttrReader::Enum(const char* key, std::initializer_list<const char*> allowed, std::string* out) const {
  const FlexValue* v = map_.Find(key);
  if (v == nullptr) return Missing(key);
  if (v->kind != FlexKind::kString) return WrongType(key, "a string", *v);
  std::string choices;
  for (const char* a : allowed) {
    if (v->s == a) {
      *out = v->s;
      return Status::Ok();
    }
    choices += choices.empty() ? a : std::string("|") + a;
  }
  // Keep the echoed value short and printable.
  std::string shown;
  for (char c : v->s.substr(0, 32)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
  return Status::Error(std::string(op_) + ": attribute '" + key + "' = '" + shown + "' is not one of " + choices);
}

Status AttrReader::NoUnknownKeys(std::initializer_list<const char*> known) const {
  for (const auto& kv : map_.entries()) {
    bool ok = false;
    for (const char* k : known) ok = ok || kv.first == k;
    if (!ok) {
      std::string shown;
      for (char c : kv.first.substr(0, 32)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
      return Status::Error(std::string(op_) + ": unknown attribute '" + shown + "'");
    }
  }
  return Status::Ok();
}

}  // namespace sdgpu
