#include "ops/op_registry.h"

#include <string>

namespace sdgpu {
namespace {

template <typename Attrs, Status (*Parse)(const FlexMap&, Attrs*)>
Status ParseAs(const FlexMap& map, OpAttrs* out) {
  Attrs attrs;
  SDGPU_RETURN_IF_ERROR(Parse(map, &attrs));
  *out = attrs;
  return Status::Ok();
}

template <typename Attrs, Status (*Infer)(const Attrs&, const std::vector<TensorInfo>&, Dims*)>
Status InferAs(const OpAttrs& attrs, const std::vector<TensorInfo>& inputs, Dims* output) {
  const Attrs* a = std::get_if<Attrs>(&attrs);
  if (a == nullptr) return Status::Error("internal error: attrs/op mismatch");
  return Infer(*a, inputs, output);
}

const OpDef kOps[] = {
    {"SdAttention", 1, OpKind::kAttention, 3, 1, ParseAs<AttentionAttrs, ParseAttentionAttrs>,
     InferAs<AttentionAttrs, InferAttentionShape>},
    {"SdGelu", 1, OpKind::kGelu, 1, 1, ParseAs<GeluAttrs, ParseGeluAttrs>, InferAs<GeluAttrs, InferGeluShape>},
    {"SdGroupNorm", 1, OpKind::kGroupNorm, 3, 1, ParseAs<GroupNormAttrs, ParseGroupNormAttrs>,
     InferAs<GroupNormAttrs, InferGroupNormShape>},
    {"SdConv2DWinograd", 1, OpKind::kConv2DWinograd, 3, 1, ParseAs<Conv2DWinogradAttrs, ParseConv2DWinogradAttrs>,
     InferAs<Conv2DWinogradAttrs, InferConv2DWinogradShape>},
};

}  // namespace

const OpDef* FindOpDef(std::string_view custom_name) {
  for (const OpDef& def : kOps) {
    if (custom_name == def.name) return &def;
  }
  return nullptr;
}

Status ParseOpOptions(const OpDef& def, const void* data, size_t size, ParsedOp* out) {
  FlexMap map;
  Status s = FlexMap::Parse(data, size, &map);
  if (!s.ok()) return Status::Error(std::string(def.name) + ": " + s.message());
  out->def = &def;
  return def.parse(map, &out->attrs);
}

Status InferOutputShape(const ParsedOp& op, const std::vector<TensorInfo>& inputs, Dims* output) {
  if (op.def == nullptr) return Status::Error("internal error: op without definition");
  return op.def->infer(op.attrs, inputs, output);
}

Status CheckOpHeader(const OpDef& def, int version, int num_inputs, int num_outputs, const void* options,
                     size_t options_size, ParsedOp* out) {
  if (version != def.version) {
    return Status::Error(std::string(def.name) + ": version " + std::to_string(version) +
                         " is not supported (expected " + std::to_string(def.version) + ")");
  }
  if (num_inputs != def.num_inputs || num_outputs != def.num_outputs) {
    return Status::Error(std::string(def.name) + ": expected " + std::to_string(def.num_inputs) + " inputs and " +
                         std::to_string(def.num_outputs) + " output, got " + std::to_string(num_inputs) + " and " +
                         std::to_string(num_outputs));
  }
  return ParseOpOptions(def, options, options_size, out);
}

Status CheckOpTensors(const ParsedOp& op, const std::vector<TensorInfo>& inputs, const TensorInfo& output,
                      const std::vector<int>& input_ids, int output_id) {
  const std::string name = op.def != nullptr ? op.def->name : "?";
  Dims inferred;
  SDGPU_RETURN_IF_ERROR(InferOutputShape(op, inputs, &inferred));
  if (output.type != abi::kTfLiteFloat32) return Status::Error(name + ": output must be float32");
  if (output.dims != inferred) {
    return Status::Error(name + ": output shape " + DimsToString(output.dims) + " does not match the inferred " +
                         DimsToString(inferred));
  }
  for (int id : input_ids) {
    if (id == output_id) return Status::Error(name + ": output aliases an input");
  }
  return Status::Ok();
}

}  // namespace sdgpu
