#include "ops/gelu/attrs.h"

#include <string>

#include "common/attr_reader.h"

namespace sdgpu {

Status ParseGeluAttrs(const FlexMap& map, GeluAttrs* out) {
  // Mirrors sdconvert/ops/gelu.py: approximate defaults to "none", gated to false.
  const AttrReader r(map, "SdGelu");
  std::string mode = "none";
  if (r.Has("approximate")) SDGPU_RETURN_IF_ERROR(r.Enum("approximate", {"none", "tanh", "quick"}, &mode));
  bool gated = false;
  if (r.Has("gated")) SDGPU_RETURN_IF_ERROR(r.Bool("gated", &gated));
  out->approximate = mode == "none" ? GeluApproximation::kNone
                     : mode == "tanh" ? GeluApproximation::kTanh
                                      : GeluApproximation::kQuick;
  out->gated = gated;
  return Status::Ok();
}

Status InferGeluShape(const GeluAttrs& attrs, const std::vector<TensorInfo>& in, Dims* output) {
  if (in.size() != 1) return Status::Error("SdGelu: expected 1 input, got " + std::to_string(in.size()));
  if (in[0].type != abi::kTfLiteFloat32) return Status::Error("SdGelu: input must be float32");
  if (in[0].dims.size() > 8) return Status::Error("SdGelu: rank > 8 is not supported");
  for (int64_t d : in[0].dims) {
    if (d < 0 || d > kMaxDim) return Status::Error("SdGelu: invalid input shape " + DimsToString(in[0].dims));
  }
  if (NumElements(in[0].dims) > kMaxElements) return Status::Error("SdGelu: input too large");
  *output = in[0].dims;
  if (attrs.gated) {
    if (in[0].dims.empty() || in[0].dims.back() % 2 != 0) {
      return Status::Error("SdGelu: gated input needs an even last dimension (value and gate halves), got " +
                           DimsToString(in[0].dims));
    }
    output->back() /= 2;
  }
  return Status::Ok();
}

}  // namespace sdgpu
