// SdGroupNorm: the one attrs parser and shape rule shared by all backends.
//   inputs  x (rank 3 or 4, batch on axis 0, channels on `channel_axis`),
//           gamma [C], beta [C] (float32)
//   output  y, same shape as x
//   attrs   groups:int >= 1 (required), eps:float >= 0 = 1e-5,
//           activation:"none"(default)|"silu", channel_axis:int in {-1,1,2,3} = -1
// Mirrors converter/sdconvert/ops/group_norm.py (OpSpec.decode); unlike the
// numpy reference (which wraps the axis modulo rank) an axis that names the
// batch or does not exist for the input rank is rejected.
// Statistics are per (batch, group) over the group's channels and every
// non-batch, non-channel axis (the standard GroupNorm definition).
#pragma once

#include <vector>

#include "common/flexbuffer_map.h"
#include "common/status.h"
#include "ops/tensor_info.h"

namespace sdgpu {

enum class GroupNormActivation { kNone, kSilu };

struct GroupNormAttrs {
  int groups = 0;
  float eps = 1e-5f;
  GroupNormActivation activation = GroupNormActivation::kNone;
  int channel_axis = -1;  // as written in the options; may be negative
};

// The input viewed as [N, A, C, B]: A = product of axes between batch and
// channels, B = product of axes after the channel axis.
struct GroupNormGeometry {
  int64_t n = 0, a = 0, c = 0, b = 0;
  int64_t groups = 0;
};

Status ParseGroupNormAttrs(const FlexMap& map, GroupNormAttrs* out);
Status InferGroupNormShape(const GroupNormAttrs& attrs, const std::vector<TensorInfo>& inputs, Dims* output);
// Only valid after InferGroupNormShape succeeded on the same dims.
GroupNormGeometry GroupNormGeometryFor(const GroupNormAttrs& attrs, const Dims& x_dims);

}  // namespace sdgpu
