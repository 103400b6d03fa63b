// SdGelu: the one attrs parser and shape rule shared by all backends.
//   x -> y, same shape, float32. attrs: approximate:"none"(erf, default)|"tanh"|"quick"
// Mirrors converter/sdconvert/ops/gelu.py (OpSpec.decode).
#pragma once

#include <vector>

#include "common/flexbuffer_map.h"
#include "common/status.h"
#include "ops/tensor_info.h"

namespace sdgpu {

enum class GeluApproximation { kNone, kTanh, kQuick };

struct GeluAttrs {
  GeluApproximation approximate = GeluApproximation::kNone;
};

Status ParseGeluAttrs(const FlexMap& map, GeluAttrs* out);
Status InferGeluShape(const GeluAttrs& attrs, const std::vector<TensorInfo>& inputs, Dims* output);

}  // namespace sdgpu
