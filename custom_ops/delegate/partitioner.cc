#include "delegate/partitioner.h"

#include <string_view>

#include "abi/int_array.h"
#include "delegate/tflite_graph.h"

namespace sdgpu {
namespace {

bool LooksLikeOurs(std::string_view name) { return name.size() >= 2 && name.substr(0, 2) == "Sd"; }

}  // namespace

Status CheckNode(abi::TfLiteContext* context, const abi::TfLiteNode* node, const abi::TfLiteRegistration* reg,
                 const Backend& backend, ParsedOp* op) {
  const OpDef* def = FindOpDef(reg->custom_name != nullptr ? reg->custom_name : "");
  if (def == nullptr) return Status::Error("unknown Sd* custom op");
  // Note: for a custom op that no resolver knows (ours, always), the runtime's
  // placeholder registration reports version 1 whatever the model's opcode
  // says; the opcode version is not visible through the C ABI. sdlite's model
  // validator checks the file's version with the same CheckOpHeader.
  const size_t options_size = node->custom_initial_data_size > 0 ? static_cast<size_t>(node->custom_initial_data_size) : 0;
  SDGPU_RETURN_IF_ERROR(CheckOpHeader(*def, reg->version, abi::IntArraySize(node->inputs),
                                      abi::IntArraySize(node->outputs), node->custom_initial_data, options_size, op));
  std::vector<TensorInfo> inputs(def->num_inputs);
  for (int i = 0; i < def->num_inputs; ++i) {
    Status s = GetTensorInfo(context, node->inputs->data[i], &inputs[i]);
    if (!s.ok()) return Status::Error(std::string(def->name) + ": input " + std::to_string(i) + ": " + s.message());
  }
  TensorInfo out;
  Status s = GetTensorInfo(context, node->outputs->data[0], &out);
  if (!s.ok()) {
    // the shape rule's reasons come first, as they name the inputs
    Dims inferred;
    SDGPU_RETURN_IF_ERROR(InferOutputShape(*op, inputs, &inferred));
    return Status::Error(std::string(def->name) + ": output: " + s.message());
  }
  SDGPU_RETURN_IF_ERROR(CheckOpTensors(*op, inputs, out, abi::IntArrayToVector(node->inputs), node->outputs->data[0]));
  Status supported = backend.Supports(*op, inputs);
  if (!supported.ok()) {
    return Status::Error(std::string(def->name) + ": not supported by the " + backend.name() +
                         " backend: " + supported.message());
  }
  return Status::Ok();
}

Status SelectNodes(abi::TfLiteContext* context, const Backend& backend, const Logger& logger, PartitionPlan* plan) {
  *plan = PartitionPlan();
  abi::TfLiteIntArray* exec_plan = nullptr;
  if (context->GetExecutionPlan(context, &exec_plan) != abi::kTfLiteOk || exec_plan == nullptr) {
    return Status::Error("GetExecutionPlan failed");
  }
  // Copy: later context calls may invalidate the runtime-owned array.
  const std::vector<int> nodes = abi::IntArrayToVector(exec_plan);
  for (int node_index : nodes) {
    abi::TfLiteNode* node = nullptr;
    abi::TfLiteRegistration* reg = nullptr;
    if (context->GetNodeAndRegistration(context, node_index, &node, &reg) != abi::kTfLiteOk || node == nullptr ||
        reg == nullptr) {
      return Status::Error("GetNodeAndRegistration failed for node " + std::to_string(node_index));
    }
    const char* name = reg->builtin_code == abi::kTfLiteBuiltinCustom ? reg->custom_name : nullptr;
    if (name == nullptr || !LooksLikeOurs(name)) {
      ++plan->other_nodes;
      continue;
    }
    logger.Debug("node " + std::to_string(node_index) + ": custom op " + name + " (registration version " +
                 std::to_string(reg->version) + ", " + std::to_string(node->custom_initial_data_size) +
                 " bytes of options)");
    ParsedOp op;
    Status s = CheckNode(context, node, reg, backend, &op);
    if (s.ok()) {
      plan->claimed.push_back(node_index);
      plan->claimed_ops.emplace_back(name);
    } else {
      plan->declined.push_back(DeclinedNode{node_index, name, s.message()});
    }
  }
  return Status::Ok();
}

}  // namespace sdgpu
