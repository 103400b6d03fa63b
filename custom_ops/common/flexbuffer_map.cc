#include "common/flexbuffer_map.h"

#include <cstring>

namespace sdgpu {
namespace {

// FlexBuffers type ids (public format).
enum FlexType : int {
  kFbNull = 0,
  kFbInt = 1,
  kFbUInt = 2,
  kFbFloat = 3,
  kFbKey = 4,
  kFbString = 5,
  kFbIndirectInt = 6,
  kFbIndirectUInt = 7,
  kFbIndirectFloat = 8,
  kFbMap = 9,
  kFbBlob = 25,
  kFbBool = 26,
};

bool ValidWidth(uint64_t w) { return w == 1 || w == 2 || w == 4 || w == 8; }

// Bounds-checked cursor over the blob. All positions are absolute offsets.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t size() const { return size_; }

  bool InBounds(uint64_t pos, uint64_t len) const { return pos <= size_ && len <= size_ - pos; }

  bool ReadUInt(uint64_t pos, uint64_t width, uint64_t* out) const {
    if (!ValidWidth(width) || !InBounds(pos, width)) return false;
    uint64_t v = 0;
    for (uint64_t k = 0; k < width; ++k) v |= static_cast<uint64_t>(data_[pos + k]) << (8 * k);
    *out = v;
    return true;
  }

  bool ReadInt(uint64_t pos, uint64_t width, int64_t* out) const {
    uint64_t u = 0;
    if (!ReadUInt(pos, width, &u)) return false;
    if (width < 8) {
      const uint64_t sign = uint64_t{1} << (8 * width - 1);
      if (u & sign) u |= ~((sign << 1) - 1);  // sign-extend
    }
    std::memcpy(out, &u, sizeof(u));
    return true;
  }

  bool ReadFloat(uint64_t pos, uint64_t width, double* out) const {
    uint64_t u = 0;
    if ((width != 4 && width != 8) || !ReadUInt(pos, width, &u)) return false;
    if (width == 4) {
      const uint32_t bits = static_cast<uint32_t>(u);
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      *out = f;
    } else {
      double d;
      std::memcpy(&d, &u, sizeof(d));
      *out = d;
    }
    return true;
  }

  // Offsets are unsigned and point backwards: target = pos - offset. Zero is
  // legal (an empty vector/map whose data would start right here).
  bool Follow(uint64_t pos, uint64_t width, uint64_t* target) const {
    uint64_t off = 0;
    if (!ReadUInt(pos, width, &off)) return false;
    if (off > pos) return false;
    *target = pos - off;
    return true;
  }

  bool ReadCString(uint64_t pos, size_t max_len, std::string* out) const {
    if (pos >= size_) return false;
    const size_t limit = size_ - pos < max_len + 1 ? size_ - pos : max_len + 1;
    const void* nul = std::memchr(data_ + pos, 0, limit);
    if (nul == nullptr) return false;
    out->assign(reinterpret_cast<const char*>(data_ + pos),
                static_cast<const uint8_t*>(nul) - (data_ + pos));
    return true;
  }

  bool ReadBytes(uint64_t pos, uint64_t len, std::string* out) const {
    if (!InBounds(pos, len)) return false;
    out->assign(reinterpret_cast<const char*>(data_ + pos), len);
    return true;
  }

  uint8_t Byte(uint64_t pos) const { return data_[pos]; }  // caller checked bounds

 private:
  const uint8_t* data_;
  size_t size_;
};

Status Fail(const std::string& what) { return Status::Error("malformed flexbuffer options: " + what); }

Status ReadValue(const Reader& r, uint64_t elem, uint64_t parent_width, uint8_t packed, FlexValue* v) {
  const int type = packed >> 2;
  const uint64_t child_width = uint64_t{1} << (packed & 3);
  v->raw_type = type;
  uint64_t target = 0;
  switch (type) {
    case kFbNull:
      v->kind = FlexKind::kNull;
      return Status::Ok();
    case kFbInt:
      v->kind = FlexKind::kInt;
      if (!r.ReadInt(elem, parent_width, &v->i)) return Fail("int value out of bounds");
      return Status::Ok();
    case kFbUInt:
      v->kind = FlexKind::kUInt;
      if (!r.ReadUInt(elem, parent_width, &v->u)) return Fail("uint value out of bounds");
      return Status::Ok();
    case kFbFloat:
      v->kind = FlexKind::kFloat;
      if (!r.ReadFloat(elem, parent_width, &v->f)) return Fail("float value out of bounds or bad width");
      return Status::Ok();
    case kFbBool: {
      uint64_t u = 0;
      if (!r.ReadUInt(elem, parent_width, &u)) return Fail("bool value out of bounds");
      v->kind = FlexKind::kBool;
      v->b = u != 0;
      return Status::Ok();
    }
    case kFbIndirectInt:
      v->kind = FlexKind::kInt;
      if (!r.Follow(elem, parent_width, &target) || !r.ReadInt(target, child_width, &v->i))
        return Fail("indirect int out of bounds");
      return Status::Ok();
    case kFbIndirectUInt:
      v->kind = FlexKind::kUInt;
      if (!r.Follow(elem, parent_width, &target) || !r.ReadUInt(target, child_width, &v->u))
        return Fail("indirect uint out of bounds");
      return Status::Ok();
    case kFbIndirectFloat:
      v->kind = FlexKind::kFloat;
      if (!r.Follow(elem, parent_width, &target) || !r.ReadFloat(target, child_width, &v->f))
        return Fail("indirect float out of bounds");
      return Status::Ok();
    case kFbKey:
      v->kind = FlexKind::kString;
      if (!r.Follow(elem, parent_width, &target) || !r.ReadCString(target, FlexMap::kMaxStringLength, &v->s))
        return Fail("key value out of bounds");
      return Status::Ok();
    case kFbString:
    case kFbBlob: {  // both: size prefix (child width) + bytes; Python decodes a blob as bytes -> str
      uint64_t len = 0;
      if (!r.Follow(elem, parent_width, &target) || target < child_width ||
          !r.ReadUInt(target - child_width, child_width, &len))
        return Fail("string header out of bounds");
      if (len > FlexMap::kMaxStringLength) return Fail("string too long");
      if (!r.ReadBytes(target, len, &v->s)) return Fail("string body out of bounds");
      v->kind = FlexKind::kString;
      return Status::Ok();
    }
    default:
      // Vectors, maps, blobs...: recognised but not followed.
      v->kind = FlexKind::kOther;
      return Status::Ok();
  }
}

}  // namespace

const char* FlexKindName(FlexKind kind) {
  switch (kind) {
    case FlexKind::kNull: return "null";
    case FlexKind::kInt: return "int";
    case FlexKind::kUInt: return "uint";
    case FlexKind::kFloat: return "float";
    case FlexKind::kBool: return "bool";
    case FlexKind::kString: return "string";
    case FlexKind::kOther: return "container";
  }
  return "?";
}

Status FlexMap::Parse(const void* data, size_t size, FlexMap* out) {
  out->entries_.clear();
  if (data == nullptr || size < 3) return Fail("missing or too short (" + std::to_string(size) + " bytes)");
  const Reader r(static_cast<const uint8_t*>(data), size);

  const uint64_t root_width = r.Byte(size - 1);
  const uint8_t root_packed = r.Byte(size - 2);
  if (!ValidWidth(root_width) || size < 2 + root_width) return Fail("bad root width");
  const uint64_t root_pos = size - 2 - root_width;
  if ((root_packed >> 2) != kFbMap) return Fail("root is not a map");

  const uint64_t w = uint64_t{1} << (root_packed & 3);  // the map's own element width
  uint64_t map_pos = 0;
  if (!r.Follow(root_pos, root_width, &map_pos)) return Fail("root offset out of bounds");
  if (map_pos < 3 * w) return Fail("map header out of bounds");

  uint64_t count = 0, keys_width = 0, keys_pos = 0;
  if (!r.ReadUInt(map_pos - w, w, &count)) return Fail("map size out of bounds");
  if (count > kMaxEntries) return Fail("too many entries (" + std::to_string(count) + ")");
  if (!r.ReadUInt(map_pos - 2 * w, w, &keys_width) || !ValidWidth(keys_width)) return Fail("bad key width");
  if (!r.Follow(map_pos - 3 * w, w, &keys_pos)) return Fail("keys offset out of bounds");
  // Values: count * w bytes, then count type bytes.
  if (!r.InBounds(map_pos, count * w + count)) return Fail("map values out of bounds");
  uint64_t keys_count = 0;
  if (keys_pos < keys_width || !r.ReadUInt(keys_pos - keys_width, keys_width, &keys_count) ||
      keys_count != count)
    return Fail("keys vector size mismatch");
  if (!r.InBounds(keys_pos, count * keys_width)) return Fail("keys out of bounds");

  out->entries_.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t key_pos = 0;
    std::string key;
    if (!r.Follow(keys_pos + i * keys_width, keys_width, &key_pos) || !r.ReadCString(key_pos, kMaxKeyLength, &key))
      return Fail("key " + std::to_string(i) + " out of bounds");
    if (out->Find(key) != nullptr) return Fail("duplicate key '" + key + "'");
    FlexValue value;
    const uint8_t packed = r.Byte(map_pos + count * w + i);
    Status s = ReadValue(r, map_pos + i * w, w, packed, &value);
    if (!s.ok()) {
      out->entries_.clear();
      return Status::Error(s.message() + " (key '" + key + "')");
    }
    out->entries_.emplace_back(std::move(key), std::move(value));
  }
  return Status::Ok();
}

const FlexValue* FlexMap::Find(std::string_view key) const {
  for (const auto& kv : entries_) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

}  // namespace sdgpu
