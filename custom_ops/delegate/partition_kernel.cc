#include "delegate/partition_kernel.h"

#include <algorithm>
#include <exception>
#include <unordered_set>

#include "abi/int_array.h"
#include "delegate/sd_delegate.h"
#include "delegate/tflite_graph.h"

namespace sdgpu {

abi::TfLiteRegistration PartitionKernel::Registration() {
  abi::TfLiteRegistration reg{};
  reg.init = &PartitionKernel::InitThunk;
  reg.free = &PartitionKernel::FreeThunk;
  reg.prepare = &PartitionKernel::PrepareThunk;
  reg.invoke = &PartitionKernel::InvokeThunk;
  reg.builtin_code = abi::kTfLiteBuiltinDelegate;
  reg.custom_name = "SdGpuDelegate";
  reg.version = 1;
  return reg;
}

Status PartitionKernel::Init(abi::TfLiteContext* context, const abi::TfLiteDelegateParams* params) {
  if (params == nullptr || params->nodes_to_replace == nullptr) return Status::Error("init: missing delegate params");
  for (int node_index : abi::IntArrayToVector(params->nodes_to_replace)) {
    abi::TfLiteNode* node = nullptr;
    abi::TfLiteRegistration* reg = nullptr;
    if (context->GetNodeAndRegistration(context, node_index, &node, &reg) != abi::kTfLiteOk || node == nullptr ||
        reg == nullptr) {
      return Status::Error("init: GetNodeAndRegistration failed for node " + std::to_string(node_index));
    }
    Step step;
    step.node_index = node_index;
    // Same checks as partitioning (cheap), so init never trusts stale state.
    Status s = CheckNode(context, node, reg, delegate_->host_backend(), &step.op);
    if (!s.ok()) return Status::Error("node " + std::to_string(node_index) + ": " + s.message());
    step.inputs = abi::IntArrayToVector(node->inputs);
    step.output = node->outputs->data[0];
    SDGPU_RETURN_IF_ERROR(delegate_->host_backend().CreateKernel(step.op, &step.kernel));
    steps_.push_back(std::move(step));
  }
  return Status::Ok();
}

Status PartitionKernel::Prepare(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  SDGPU_RETURN_IF_ERROR(init_status_);
  prepared_ = false;
  const std::vector<int> outputs = abi::IntArrayToVector(node->outputs);
  const std::unordered_set<int> partition_outputs(outputs.begin(), outputs.end());

  // Internal tensors: produced here and not visible outside the partition.
  std::unordered_map<int, TensorInfo> internal_info;
  std::unordered_map<int, int> last_use;
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    for (int t : steps_[i].inputs) last_use[t] = i;
  }

  planner_ = MemoryPlanner();
  internal_request_.clear();
  size_t max_scratch = 0;
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    Step& step = steps_[i];
    std::vector<TensorInfo> inputs(step.inputs.size());
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      auto it = internal_info.find(step.inputs[k]);
      if (it != internal_info.end()) inputs[k] = it->second;
      else SDGPU_RETURN_IF_ERROR(GetTensorInfo(context, step.inputs[k], &inputs[k]));
    }
    TensorInfo out;
    out.type = abi::kTfLiteFloat32;
    Status s = InferOutputShape(step.op, inputs, &out.dims);
    if (!s.ok()) return Status::Error("node " + std::to_string(step.node_index) + ": " + s.message());
    s = delegate_->host_backend().Supports(step.op, inputs);
    if (!s.ok()) return Status::Error("node " + std::to_string(step.node_index) + ": " + s.message());

    if (partition_outputs.count(step.output) != 0) {
      SDGPU_RETURN_IF_ERROR(ResizeIfNeeded(context, step.output, out.dims));
    } else {
      internal_info[step.output] = out;
      const size_t bytes = static_cast<size_t>(NumElements(out.dims)) * sizeof(float);
      const int last = last_use.count(step.output) ? last_use[step.output] : i;
      internal_request_[step.output] = planner_.Add(bytes, i, last);
    }
    size_t scratch = 0;
    SDGPU_RETURN_IF_ERROR(step.kernel->Prepare(inputs, out, &scratch));
    step.scratch_request = planner_.Add(scratch, i, i);
    max_scratch = std::max(max_scratch, scratch);
  }
  SDGPU_RETURN_IF_ERROR(planner_.Plan());
  if (!arena_ || arena_->size() < planner_.arena_bytes()) {
    arena_.reset();
    SDGPU_RETURN_IF_ERROR(delegate_->host_backend().AllocateArena(planner_.arena_bytes(), &arena_));
  }
  delegate_->stats().RecordPrepare(max_scratch, planner_.arena_bytes());
  delegate_->logger().Debug("partition of " + std::to_string(steps_.size()) + " node(s): arena " +
                            std::to_string(planner_.arena_bytes()) + " bytes, max node scratch " +
                            std::to_string(max_scratch) + " bytes");
  prepared_ = true;
  return Status::Ok();
}

Status PartitionKernel::ResolvePointer(abi::TfLiteContext* context, int tensor, bool is_output, void** out) const {
  auto it = internal_request_.find(tensor);
  if (it != internal_request_.end()) {
    *out = static_cast<char*>(arena_->host_data()) + planner_.offset(it->second);
    return Status::Ok();
  }
  abi::TfLiteTensor* t = nullptr;
  SDGPU_RETURN_IF_ERROR(GetTensor(context, tensor, &t));
  if (t->data.raw == nullptr && t->bytes > 0) {
    return Status::Error(std::string(is_output ? "output" : "input") + " tensor " + std::to_string(tensor) +
                         " has no data");
  }
  *out = t->data.raw;
  return Status::Ok();
}

Status PartitionKernel::Invoke(abi::TfLiteContext* context) {
  if (!prepared_) return Status::Error("invoke before a successful prepare");
  for (Step& step : steps_) {
    KernelIO io;
    io.inputs.resize(step.inputs.size());
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      void* p = nullptr;
      SDGPU_RETURN_IF_ERROR(ResolvePointer(context, step.inputs[k], false, &p));
      io.inputs[k] = p;
    }
    SDGPU_RETURN_IF_ERROR(ResolvePointer(context, step.output, true, &io.output));
    io.scratch = arena_->host_data() == nullptr
                     ? nullptr
                     : static_cast<char*>(arena_->host_data()) + planner_.offset(step.scratch_request);
    Status s = step.kernel->Run(io);
    if (!s.ok()) return Status::Error("node " + std::to_string(step.node_index) + ": " + s.message());
  }
  delegate_->stats().RecordInvoke();
  return Status::Ok();
}

// ---- C ABI thunks: no exception may escape ---------------------------------

void* PartitionKernel::InitThunk(abi::TfLiteContext* context, const char* buffer, size_t) {
  try {
    const auto* params = reinterpret_cast<const abi::TfLiteDelegateParams*>(buffer);
    SdDelegate* delegate = params != nullptr ? SdDelegate::FromTflite(params->delegate) : nullptr;
    if (delegate == nullptr) return nullptr;  // prepare() reports the missing kernel
    auto* kernel = new PartitionKernel(delegate);
    kernel->init_status_ = kernel->Init(context, params);
    if (!kernel->init_status_.ok()) delegate->logger().Error(kernel->init_status_.message());
    return kernel;
  } catch (...) {
    return nullptr;  // prepare() reports the missing kernel
  }
}

void PartitionKernel::FreeThunk(abi::TfLiteContext*, void* buffer) {
  try {
    delete static_cast<PartitionKernel*>(buffer);
  } catch (...) {
  }
}

abi::TfLiteStatus PartitionKernel::PrepareThunk(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  auto* kernel = static_cast<PartitionKernel*>(node->user_data);
  if (kernel == nullptr) {
    ReportToContext(context, "delegate kernel was not initialised (out of memory or foreign delegate)");
    return abi::kTfLiteError;
  }
  Status s;
  try {
    s = kernel->Prepare(context, node);
  } catch (const std::exception& e) {
    s = Status::Error(std::string("prepare: exception: ") + e.what());
  } catch (...) {
    s = Status::Error("prepare: unknown exception");
  }
  if (s.ok()) return abi::kTfLiteOk;
  kernel->delegate_->logger().Error(s.message());
  ReportToContext(context, s.message());
  return abi::kTfLiteError;
}

abi::TfLiteStatus PartitionKernel::InvokeThunk(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  auto* kernel = static_cast<PartitionKernel*>(node->user_data);
  if (kernel == nullptr) return abi::kTfLiteError;
  Status s;
  try {
    s = kernel->Invoke(context);
  } catch (const std::exception& e) {
    s = Status::Error(std::string("invoke: exception: ") + e.what());
  } catch (...) {
    s = Status::Error("invoke: unknown exception");
  }
  if (s.ok()) return abi::kTfLiteOk;
  kernel->delegate_->logger().Error(s.message());
  ReportToContext(context, s.message());
  return abi::kTfLiteError;
}

}  // namespace sdgpu
