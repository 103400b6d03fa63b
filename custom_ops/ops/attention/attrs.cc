#include "ops/attention/attrs.h"

#include <cstdint>
#include <string>

#include "common/attr_reader.h"

namespace sdgpu {

Status ParseAttentionAttrs(const FlexMap& map, AttentionAttrs* out) {
  // Mirrors sdconvert/ops/attention.py: heads, head_dim, scale required;
  // causal defaults to false, variant to "partial_softmax".
  const AttrReader r(map, "SdAttention");
  int64_t heads = 0, head_dim = 0;
  double scale = 0.0;
  std::string variant = "partial_softmax";
  bool causal = false;
  SDGPU_RETURN_IF_ERROR(r.Int("heads", 1, INT32_MAX, &heads));
  SDGPU_RETURN_IF_ERROR(r.Int("head_dim", 1, INT32_MAX, &head_dim));
  SDGPU_RETURN_IF_ERROR(r.Float("scale", &scale));
  if (!(scale > 0.0)) return Status::Error("SdAttention: attribute 'scale' must be > 0");
  if (r.Has("causal")) SDGPU_RETURN_IF_ERROR(r.Bool("causal", &causal));
  if (r.Has("variant")) SDGPU_RETURN_IF_ERROR(r.Enum("variant", {"partial_softmax", "flash"}, &variant));
  out->heads = static_cast<int>(heads);
  out->head_dim = static_cast<int>(head_dim);
  out->scale = static_cast<float>(scale);
  out->causal = causal;
  out->variant = variant == "flash" ? AttentionVariant::kFlash : AttentionVariant::kPartialSoftmax;
  return Status::Ok();
}

Status InferAttentionShape(const AttentionAttrs& a, const std::vector<TensorInfo>& in, Dims* output) {
  if (in.size() != 3) {
    return Status::Error("SdAttention: expected 3 inputs (Q, K, V), got " + std::to_string(in.size()));
  }
  static const char* const kNames[3] = {"Q", "K", "V"};
  for (int i = 0; i < 3; ++i) {
    if (in[i].type != abi::kTfLiteFloat32) {
      return Status::Error(std::string("SdAttention: ") + kNames[i] + " must be float32");
    }
    if (in[i].dims.size() != 3) {
      return Status::Error(std::string("SdAttention: ") + kNames[i] + " must be rank 3 [N,S,H*D], got " +
                           DimsToString(in[i].dims));
    }
    for (int64_t d : in[i].dims) {
      if (d < 1 || d > kMaxDim) {
        return Status::Error(std::string("SdAttention: ") + kNames[i] + " has an invalid shape " +
                             DimsToString(in[i].dims));
      }
    }
  }
  const Dims& q = in[0].dims;
  const Dims& k = in[1].dims;
  const Dims& v = in[2].dims;
  const int64_t hd = int64_t{a.heads} * a.head_dim;
  if (q[2] != hd || k[2] != hd || v[2] != hd) {
    return Status::Error("SdAttention: heads*head_dim = " + std::to_string(hd) + " but Q/K/V last dims are " +
                         std::to_string(q[2]) + "/" + std::to_string(k[2]) + "/" + std::to_string(v[2]));
  }
  if (k[0] != q[0] || v[0] != q[0]) return Status::Error("SdAttention: Q, K, V batch sizes differ");
  if (v[1] != k[1]) return Status::Error("SdAttention: K and V sequence lengths differ");
  if (NumElements(q) > kMaxElements || NumElements(k) > kMaxElements) {
    return Status::Error("SdAttention: tensors too large");
  }
  *output = q;
  return Status::Ok();
}

}  // namespace sdgpu
