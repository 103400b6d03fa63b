// One OpenCL operation of a partition: builtin TFLite ops and the Sd* fused
// ops share this interface. Shapes are static per Prepare; everything that
// depends only on shapes or constant inputs (index metadata, folded weights)
// is computed and uploaded once in Prepare, so Enqueue only sets arguments
// and launches (no host round-trips).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "abi/tflite_abi.h"
#include "backends/opencl/cl_runtime.h"
#include "common/status.h"
#include "ops/op_registry.h"
#include "ops/tensor_info.h"

namespace sdgpu::ocl {

// A tensor as a kernel sees it: a device buffer plus a byte offset into it.
struct ClTensorRef {
  cl_mem mem = nullptr;
  size_t offset = 0;  // bytes
  int elem_offset(size_t elem_size = 4) const { return static_cast<int>(offset / elem_size); }
};

// What the op factory knows about a node at partition/prepare time.
struct ClNodeDesc {
  int builtin_code = -1;            // abi::kTfLiteBuiltinCustom for Sd* ops
  std::string name;                 // op name for logs and profiles
  const void* builtin_data = nullptr;
  const ParsedOp* sd_op = nullptr;  // set for Sd* ops
  std::vector<const abi::TfLiteTensor*> inputs;  // nullptr for an omitted optional input
  std::vector<const abi::TfLiteTensor*> outputs;
};

// true when the tensor's data is fixed for the interpreter's lifetime (weights, shapes, masks).
bool IsConstant(const abi::TfLiteTensor* t);

class ClOp {
 public:
  virtual ~ClOp() = default;
  // Inputs the runtime must provide as device tensors. Constant inputs that
  // the op consumes on the host at prepare time (shapes, axes, permutations)
  // are not listed, so they are never uploaded.
  const std::vector<int>& device_inputs() const { return device_inputs_; }
  // Extra device memory this op needs between its own launches (planned in the arena).
  size_t scratch_bytes() const { return scratch_bytes_; }
  virtual Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out,
                         const ClTensorRef& scratch, ClEventHandle* last_event) = 0;

 protected:
  std::vector<int> device_inputs_;
  size_t scratch_bytes_ = 0;
};

// Validates the node and builds its op (shapes and constants read now).
// The error message is the one-line reason logged when the node stays on CPU.
Status CreateClOp(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out);

// Human-readable builtin op name ("CONV_2D"), or "BUILTIN_<code>".
std::string BuiltinName(int code);

}  // namespace sdgpu::ocl
