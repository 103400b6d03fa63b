// SdConv2DWinograd: the one attrs parser and shape rule shared by all backends.
//   x [N,H,W,Cin] f32, filter [Cout,3,3,Cin] f32 (TFLite CONV_2D layout, untransformed), bias [Cout] f32
//   -> y [N,Ho,Wo,Cout]; SAME: Ho,Wo = H,W; VALID: H-2, W-2.
//   attrs: tile:int in {2,4,6} (F(tile x tile, 3x3)), padding:"SAME"|"VALID",
//          activation:"none"|"relu"|"relu6"|"relu_n1_to_1"|"tanh" (TFLite fused activations).
// Mirrors converter/sdconvert/ops/conv2d_winograd.py.
#pragma once

#include <vector>

#include "common/flexbuffer_map.h"
#include "common/status.h"
#include "ops/tensor_info.h"

namespace sdgpu {

enum class ConvActivation { kNone, kRelu, kRelu6, kReluN1To1, kTanh };

struct Conv2DWinogradAttrs {
  int tile = 4;
  bool same_padding = true;
  ConvActivation activation = ConvActivation::kNone;
};

Status ParseConv2DWinogradAttrs(const FlexMap& map, Conv2DWinogradAttrs* out);
Status InferConv2DWinogradShape(const Conv2DWinogradAttrs& attrs, const std::vector<TensorInfo>& inputs,
                                Dims* output);

}  // namespace sdgpu
