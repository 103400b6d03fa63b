#include "ops/conv2d_winograd/attrs.h"

#include <string>

#include "common/attr_reader.h"

namespace sdgpu {

Status ParseConv2DWinogradAttrs(const FlexMap& map, Conv2DWinogradAttrs* out) {
  const AttrReader r(map, "SdConv2DWinograd");
  SDGPU_RETURN_IF_ERROR(r.NoUnknownKeys({"tile", "padding", "activation"}));
  int64_t tile = 0;
  std::string padding, activation;
  SDGPU_RETURN_IF_ERROR(r.Int("tile", 2, 6, &tile));
  if (tile % 2 != 0) {
    return Status::Error("SdConv2DWinograd: attribute 'tile' must be 2, 4 or 6, got " + std::to_string(tile));
  }
  SDGPU_RETURN_IF_ERROR(r.Enum("padding", {"SAME", "VALID"}, &padding));
  SDGPU_RETURN_IF_ERROR(r.Enum("activation", {"none", "relu", "relu6", "relu_n1_to_1", "tanh"}, &activation));
  out->tile = static_cast<int>(tile);
  out->same_padding = padding == "SAME";
  out->activation = activation == "relu"           ? ConvActivation::kRelu
                    : activation == "relu6"        ? ConvActivation::kRelu6
                    : activation == "relu_n1_to_1" ? ConvActivation::kReluN1To1
                    : activation == "tanh"         ? ConvActivation::kTanh
                                                   : ConvActivation::kNone;
  return Status::Ok();
}

Status InferConv2DWinogradShape(const Conv2DWinogradAttrs& attrs, const std::vector<TensorInfo>& in, Dims* output) {
  if (in.size() != 3) {
    return Status::Error("SdConv2DWinograd: expected 3 inputs (x, filter, bias), got " + std::to_string(in.size()));
  }
  static const char* const kNames[3] = {"x", "filter", "bias"};
  static const size_t kRanks[3] = {4, 4, 1};
  for (int i = 0; i < 3; ++i) {
    if (in[i].type != abi::kTfLiteFloat32) {
      return Status::Error(std::string("SdConv2DWinograd: ") + kNames[i] + " must be float32");
    }
    if (in[i].dims.size() != kRanks[i]) {
      return Status::Error(std::string("SdConv2DWinograd: ") + kNames[i] + " must be rank " +
                           std::to_string(kRanks[i]) + ", got " + DimsToString(in[i].dims));
    }
    for (int64_t d : in[i].dims) {
      if (d < 1 || d > kMaxDim) {
        return Status::Error(std::string("SdConv2DWinograd: ") + kNames[i] + " has an invalid shape " +
                             DimsToString(in[i].dims));
      }
    }
  }
  const Dims& x = in[0].dims;
  const Dims& f = in[1].dims;
  if (f[1] != 3 || f[2] != 3 || f[3] != x[3]) {
    return Status::Error("SdConv2DWinograd: filter must be [Cout,3,3," + std::to_string(x[3]) + "], got " +
                         DimsToString(f));
  }
  if (in[2].dims[0] != f[0]) {
    return Status::Error("SdConv2DWinograd: bias must be [" + std::to_string(f[0]) + "], got " +
                         DimsToString(in[2].dims));
  }
  const int64_t ho = attrs.same_padding ? x[1] : x[1] - 2;
  const int64_t wo = attrs.same_padding ? x[2] : x[2] - 2;
  if (ho < 1 || wo < 1) {
    return Status::Error("SdConv2DWinograd: input " + DimsToString(x) + " is smaller than the 3x3 filter (VALID)");
  }
  *output = {x[0], ho, wo, f[0]};
  if (NumElements(x) > kMaxElements || NumElements(*output) > kMaxElements) {
    return Status::Error("SdConv2DWinograd: tensors too large");
  }
  return Status::Ok();
}

}  // namespace sdgpu
