// The table of Sd* custom ops the delegate understands. Each entry binds a
// custom-op name and version to its (backend-agnostic) options parser and
// shape rule. Backends look at ParsedOp::kind to pick a kernel.
#pragma once

#include <cstddef>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "ops/attention/attrs.h"
#include "ops/conv2d_winograd/attrs.h"
#include "ops/gelu/attrs.h"
#include "ops/group_norm/attrs.h"
#include "ops/tensor_info.h"

namespace sdgpu {

enum class OpKind { kAttention, kGelu, kGroupNorm, kConv2DWinograd };

using OpAttrs = std::variant<AttentionAttrs, GeluAttrs, GroupNormAttrs, Conv2DWinogradAttrs>;

struct OpDef {
  const char* name;
  int version;
  OpKind kind;
  int num_inputs;
  int num_outputs;
  Status (*parse)(const FlexMap& map, OpAttrs* out);
  Status (*infer)(const OpAttrs& attrs, const std::vector<TensorInfo>& inputs, Dims* output);
};

struct ParsedOp {
  const OpDef* def = nullptr;
  OpAttrs attrs;
};

// nullptr when `custom_name` is not one of ours.
const OpDef* FindOpDef(std::string_view custom_name);

// Parses the node's flexbuffer options (any bytes are safe).
Status ParseOpOptions(const OpDef& def, const void* data, size_t size, ParsedOp* out);

// Validates input types/shapes and computes the single output shape.
Status InferOutputShape(const ParsedOp& op, const std::vector<TensorInfo>& inputs, Dims* output);

// The node check, in two halves around fetching the tensors. The delegate runs them on a TFLite node
// (delegate/partitioner.cc CheckNode) and sdgpu_check_node on a model validator's description of a node
// (sdlite.model_check), so a model file and the running delegate are judged by the same code.
//   CheckOpHeader: opcode version, input/output counts, the options.
//   CheckOpTensors: the shape rule, the output's type and dims, and that the output aliases no input.
Status CheckOpHeader(const OpDef& def, int version, int num_inputs, int num_outputs, const void* options,
                     size_t options_size, ParsedOp* out);
Status CheckOpTensors(const ParsedOp& op, const std::vector<TensorInfo>& inputs, const TensorInfo& output,
                      const std::vector<int>& input_ids, int output_id);

}  // namespace sdgpu
