#include "ops/group_norm/attrs.h"

#include <cstdint>
#include <string>

#include "common/attr_reader.h"

namespace sdgpu {

Status ParseGroupNormAttrs(const FlexMap& map, GroupNormAttrs* out) {
  // Mirrors sdconvert/ops/group_norm.py: groups required; eps defaults to
  // 1e-5, activation to "none", channel_axis to -1 (one of -1, 1, 2, 3).
  const AttrReader r(map, "SdGroupNorm");
  int64_t groups = 0, axis = -1;
  double eps = 1e-5;
  std::string activation = "none";
  SDGPU_RETURN_IF_ERROR(r.Int("groups", 1, INT32_MAX, &groups));
  if (r.Has("eps")) SDGPU_RETURN_IF_ERROR(r.Float("eps", &eps));
  if (eps < 0.0) return Status::Error("SdGroupNorm: attribute 'eps' must be >= 0");
  if (r.Has("activation")) SDGPU_RETURN_IF_ERROR(r.Enum("activation", {"none", "silu"}, &activation));
  if (r.Has("channel_axis")) SDGPU_RETURN_IF_ERROR(r.Int("channel_axis", -1, 3, &axis));
  if (axis == 0) return Status::Error("SdGroupNorm: attribute 'channel_axis' must be -1, 1, 2 or 3, got 0");
  out->groups = static_cast<int>(groups);
  out->eps = static_cast<float>(eps);
  out->activation = activation == "silu" ? GroupNormActivation::kSilu : GroupNormActivation::kNone;
  out->channel_axis = static_cast<int>(axis);
  return Status::Ok();
}

namespace {
int NormalizedAxis(int axis, size_t rank) { return axis < 0 ? axis + static_cast<int>(rank) : axis; }
}  // namespace

Status InferGroupNormShape(const GroupNormAttrs& attrs, const std::vector<TensorInfo>& in, Dims* output) {
  if (in.size() != 3) {
    return Status::Error("SdGroupNorm: expected 3 inputs (x, gamma, beta), got " + std::to_string(in.size()));
  }
  for (const TensorInfo& t : in) {
    if (t.type != abi::kTfLiteFloat32) return Status::Error("SdGroupNorm: all inputs must be float32");
  }
  const Dims& x = in[0].dims;
  if (x.size() != 3 && x.size() != 4) {
    return Status::Error("SdGroupNorm: x must be rank 3 or 4, got " + DimsToString(x));
  }
  for (int64_t d : x) {
    if (d < 1 || d > kMaxDim) return Status::Error("SdGroupNorm: invalid x shape " + DimsToString(x));
  }
  if (NumElements(x) > kMaxElements) return Status::Error("SdGroupNorm: x too large");
  const int axis = NormalizedAxis(attrs.channel_axis, x.size());
  if (axis < 1 || axis >= static_cast<int>(x.size())) {
    return Status::Error("SdGroupNorm: channel_axis " + std::to_string(attrs.channel_axis) +
                         " is invalid for rank " + std::to_string(x.size()) + " (axis 0 is the batch)");
  }
  const int64_t c = x[axis];
  if (c % attrs.groups != 0) {
    return Status::Error("SdGroupNorm: channels (" + std::to_string(c) + ") not divisible by groups (" +
                         std::to_string(attrs.groups) + ")");
  }
  for (int i = 1; i < 3; ++i) {
    if (in[i].dims.size() != 1 || in[i].dims[0] != c) {
      return Status::Error(std::string("SdGroupNorm: ") + (i == 1 ? "gamma" : "beta") + " must be [" +
                           std::to_string(c) + "], got " + DimsToString(in[i].dims));
    }
  }
  *output = x;
  return Status::Ok();
}

GroupNormGeometry GroupNormGeometryFor(const GroupNormAttrs& attrs, const Dims& x) {
  GroupNormGeometry g;
  const int axis = NormalizedAxis(attrs.channel_axis, x.size());
  g.n = x[0];
  g.a = 1;
  for (int i = 1; i < axis; ++i) g.a *= x[i];
  g.c = x[axis];
  g.b = 1;
  for (size_t i = axis + 1; i < x.size(); ++i) g.b *= x[i];
  g.groups = attrs.groups;
  return g;
}

}  // namespace sdgpu
