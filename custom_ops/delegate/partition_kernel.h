// The kernel TFLite runs for one delegated partition (a connected set of our
// nodes). init() builds one backend kernel per node; prepare() re-validates
// shapes with the shared op rules, resizes partition outputs, plans the arena
// (internal tensors + scratch) and allocates it through the backend; invoke()
// runs the nodes in order.
//
// Errors never escape as exceptions: every TfLiteRegistration callback is
// wrapped, logs through the delegate's logger and reports to the context.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "abi/tflite_abi.h"
#include "common/status.h"
#include "delegate/backend.h"
#include "delegate/memory_planner.h"
#include "ops/op_registry.h"

namespace sdgpu {

class SdDelegate;

class PartitionKernel {
 public:
  // The registration to pass to ReplaceNodeSubsetsWithDelegateKernels.
  static abi::TfLiteRegistration Registration();

 private:
  struct Step {
    int node_index = -1;
    ParsedOp op;
    std::vector<int> inputs;
    int output = -1;
    std::unique_ptr<BackendKernel> kernel;
    int scratch_request = -1;  // planner id
  };

  PartitionKernel(SdDelegate* delegate) : delegate_(delegate) {}
  Status Init(abi::TfLiteContext* context, const abi::TfLiteDelegateParams* params);
  Status Prepare(abi::TfLiteContext* context, abi::TfLiteNode* node);
  Status Invoke(abi::TfLiteContext* context);
  Status ResolvePointer(abi::TfLiteContext* context, int tensor, bool is_output, void** out) const;

  static void* InitThunk(abi::TfLiteContext* context, const char* buffer, size_t length);
  static void FreeThunk(abi::TfLiteContext* context, void* buffer);
  static abi::TfLiteStatus PrepareThunk(abi::TfLiteContext* context, abi::TfLiteNode* node);
  static abi::TfLiteStatus InvokeThunk(abi::TfLiteContext* context, abi::TfLiteNode* node);

  SdDelegate* delegate_;
  Status init_status_;  // a failed init surfaces as a Prepare error
  std::vector<Step> steps_;
  std::unordered_map<int, int> internal_request_;  // tensor index -> planner id (internal tensors)
  MemoryPlanner planner_;
  std::unique_ptr<Arena> arena_;
  bool prepared_ = false;
};

}  // namespace sdgpu
