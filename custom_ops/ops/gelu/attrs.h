// SdGelu: the one attrs parser and shape rule shared by all backends.
//   attrs: approximate:"none"(erf, default)|"tanh"|"quick", gated: bool (default false)
//   plain: x -> y, same shape, float32.
//   gated (GEGLU): x [..., 2F] -> y [..., F], y = x[..., :F] * gelu(x[..., F:]) (value half first, gate second).
// Mirrors converter/sdconvert/ops/gelu.py (OpSpec.decode). Unknown keys are ignored (as in Python); a delegate
// that predates `gated` still refuses gated nodes because its shape rule (y = x's shape) never matches [..., F].
#pragma once

#include <vector>

#include "common/flexbuffer_map.h"
#include "common/status.h"
#include "ops/tensor_info.h"

namespace sdgpu {

enum class GeluApproximation { kNone, kTanh, kQuick };

struct GeluAttrs {
  GeluApproximation approximate = GeluApproximation::kNone;
  bool gated = false;
};

Status ParseGeluAttrs(const FlexMap& map, GeluAttrs* out);
Status InferGeluShape(const GeluAttrs& attrs, const std::vector<TensorInfo>& inputs, Dims* output);

}  // namespace sdgpu
