// SdAttention: the one attrs parser and shape rule shared by all backends.
//   inputs  Q [N,Sq,H*D], K [N,Sk,H*D], V [N,Sk,H*D] (float32)
//   output  O [N,Sq,H*D]
//   attrs   heads:int >= 1, head_dim:int >= 1, scale:float > 0 (required),
//           causal:bool = false, variant:"partial_softmax"(default)|"flash"
// Mirrors converter/sdconvert/ops/attention.py (OpSpec.decode).
#pragma once

#include <vector>

#include "common/flexbuffer_map.h"
#include "common/status.h"
#include "ops/tensor_info.h"

namespace sdgpu {

enum class AttentionVariant { kPartialSoftmax, kFlash };

struct AttentionAttrs {
  int heads = 0;
  int head_dim = 0;
  float scale = 0.0f;
  bool causal = false;
  AttentionVariant variant = AttentionVariant::kPartialSoftmax;
};

Status ParseAttentionAttrs(const FlexMap& map, AttentionAttrs* out);
Status InferAttentionShape(const AttentionAttrs& attrs, const std::vector<TensorInfo>& inputs, Dims* output);

}  // namespace sdgpu
