// Backend-agnostic node selection. Walks the execution plan and claims every
// node that is (1) one of our Sd* custom ops at a supported version, (2) has
// options that parse, (3) has inputs/outputs whose types and shapes pass the
// op's shape rule, and (4) is accepted by the backend. Anything else that is
// an Sd* op is declined with a one-line reason; builtin ops are left alone
// (the runtime's default delegate, e.g. XNNPACK, takes them).
#pragma once

#include <string>
#include <vector>

#include "abi/tflite_abi.h"
#include "common/log.h"
#include "common/status.h"
#include "delegate/backend.h"
#include "ops/op_registry.h"

namespace sdgpu {

struct DeclinedNode {
  int node_index = -1;
  std::string op_name;
  std::string reason;
};

struct PartitionPlan {
  std::vector<int> claimed;            // node indices, execution order
  std::vector<std::string> claimed_ops;  // parallel to `claimed`
  std::vector<DeclinedNode> declined;  // Sd* nodes we could not take
  int other_nodes = 0;                 // builtin / foreign custom nodes
};

// Full check of one node; on success fills `op` (parsed attrs).
Status CheckNode(abi::TfLiteContext* context, const abi::TfLiteNode* node, const abi::TfLiteRegistration* reg,
                 const Backend& backend, ParsedOp* op);

Status SelectNodes(abi::TfLiteContext* context, const Backend& backend, const Logger& logger, PartitionPlan* plan);

}  // namespace sdgpu
