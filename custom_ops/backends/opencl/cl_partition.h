// The TFLite kernel of one OpenCL partition (any mix of builtin and Sd* nodes).
//
// prepare(): builds one ClOp per node (shapes are final), uploads constant
//   inputs once (kept across prepares, keyed by tensor), plans ONE device
//   arena for every tensor that lives only inside the partition plus per-node
//   scratch (delegate/memory_planner.h: buffers with disjoint lifetimes share
//   bytes), and gives each partition input/output its own device buffer.
// invoke(): uploads the partition inputs, enqueues every node in order on one
//   in-order queue (no host synchronisation in between), reads the outputs
//   back with one blocking read. With profiling on, per-node kernel times come
//   from OpenCL events and are written as JSON to the profile path.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "abi/tflite_abi.h"
#include "backends/opencl/cl_ops.h"
#include "delegate/memory_planner.h"

namespace sdgpu {

class SdDelegate;
class OpenClBackend;

namespace ocl {

// Everything CreateClOp needs for one node; `parsed` backs desc.sd_op.
struct NodeView {
  ClNodeDesc desc;
  ParsedOp parsed;
};

// Reads node `node_index` of the context into `view`; the reason when the
// node cannot run on OpenCL at all (foreign custom op, bad Sd* options).
Status ViewNode(abi::TfLiteContext* context, const OpenClBackend& backend, int node_index, NodeView* view);

class ClPartition {
 public:
  static abi::TfLiteRegistration Registration();

 private:
  struct Step {
    int node_index = -1;
    std::string name;
    std::vector<int> inputs;  // tensor indices (-1 = omitted)
    int output = -1;
    std::unique_ptr<ClOp> op;
    int scratch_request = -1;
    size_t output_bytes = 0;
    double total_ms = 0.0;
  };
  struct External {
    ClMemHandle mem;
    size_t bytes = 0;
  };

  ClPartition(SdDelegate* d, OpenClBackend* b) : delegate_(d), backend_(b) {}
  Status Init(abi::TfLiteContext* context, const abi::TfLiteDelegateParams* params);
  Status Prepare(abi::TfLiteContext* context, abi::TfLiteNode* node);
  Status Invoke(abi::TfLiteContext* context, abi::TfLiteNode* node);
  Status Ref(int tensor, ClTensorRef* out) const;
  Status WriteProfile() const;

  static void* InitThunk(abi::TfLiteContext* context, const char* buffer, size_t length);
  static void FreeThunk(abi::TfLiteContext* context, void* buffer);
  static abi::TfLiteStatus PrepareThunk(abi::TfLiteContext* context, abi::TfLiteNode* node);
  static abi::TfLiteStatus InvokeThunk(abi::TfLiteContext* context, abi::TfLiteNode* node);

  SdDelegate* delegate_;
  OpenClBackend* backend_;
  Status init_status_;
  std::vector<Step> steps_;
  MemoryPlanner planner_;
  ClMemHandle arena_;
  size_t arena_bytes_ = 0;
  std::unordered_map<int, int> internal_;          // tensor -> planner request
  std::unordered_map<int, ClMemHandle> constants_; // uploaded once
  std::map<int, External> externals_;              // partition inputs/outputs
  std::vector<int> inputs_to_upload_;
  std::vector<int> outputs_;
  long long invocations_ = 0;
  bool prepared_ = false;
};

}  // namespace ocl
}  // namespace sdgpu
