#include "gpu/gpu_backend.h"

#include "abi/int_array.h"
#include "delegate/partitioner.h"
#include "delegate/sd_delegate.h"
#include "delegate/tflite_graph.h"
#include "gpu/partition.h"

namespace sdgpu::gpu {

Status GpuBackend::Supports(const ParsedOp&, const std::vector<TensorInfo>&) const { return Status::Ok(); }

Status GpuBackend::CreateKernel(const ParsedOp&, std::unique_ptr<BackendKernel>*) {
  return Status::Error(std::string(name()) + " backend runs whole partitions (PrepareGraph), not per-op host kernels");
}

Status GpuBackend::AllocateArena(size_t, std::unique_ptr<Arena>*) {
  return Status::Error(std::string(name()) + " backend allocates device arenas per partition");
}

Status GpuBackend::PrepareGraph(abi::TfLiteContext* context, SdDelegate* delegate, bool* handled) {
  *handled = true;
  const Logger& logger = delegate->logger();
  const std::string tag = name();
  abi::TfLiteIntArray* exec_plan = nullptr;
  if (context->GetExecutionPlan(context, &exec_plan) != abi::kTfLiteOk || exec_plan == nullptr) {
    return Status::Error("GetExecutionPlan failed");
  }
  PartitionPlan plan;
  for (int node_index : abi::IntArrayToVector(exec_plan)) {
    NodeView view;
    Status s = ViewNode(context, *this, node_index, &view);
    std::unique_ptr<GpuOp> op;
    if (s.ok()) s = CreateGpuOp(*device_, view.desc, &op);  // the same validation partition init will run
    const std::string op_name = view.desc.name.empty() ? "node" : view.desc.name;
    if (s.ok()) {
      plan.claimed.push_back(node_index);
      plan.claimed_ops.push_back(op_name);
    } else {
      plan.declined.push_back(DeclinedNode{node_index, op_name, s.message()});
      logger.Warning(tag + ": node " + std::to_string(node_index) + " (" + op_name + ") stays on CPU: " + s.message());
    }
  }
  delegate->stats().RecordPartitioning(plan);
  int partitions = 0;
  if (!plan.claimed.empty()) {
    abi::OwnedIntArray claimed;
    if (!claimed.Assign(plan.claimed)) return Status::Error("out of memory while partitioning");
    SDGPU_RETURN_IF_ERROR(PreviewPartitions(context, claimed.get(), &partitions));
    if (context->ReplaceNodeSubsetsWithDelegateKernels(context, GpuPartition::Registration(registration_name_),
                                                       claimed.get(), delegate->tflite()) != abi::kTfLiteOk) {
      return Status::Error("ReplaceNodeSubsetsWithDelegateKernels failed");
    }
  }
  // The Sd* nodes this device declined run on the delegate's CPU kernels, in the same model.
  std::vector<int> declined, on_host;
  for (const DeclinedNode& d : plan.declined) declined.push_back(d.node_index);
  SDGPU_RETURN_IF_ERROR(delegate->ReplaceWithHostKernels(context, declined, &on_host));
  delegate->stats().RecordPartitions(partitions);
  delegate->stats().RecordHostFallback(on_host);
  logger.Info(tag + ": " + std::to_string(partitions) + " partition(s), " + std::to_string(plan.claimed.size()) +
              " node(s) delegated, " + std::to_string(plan.declined.size()) + " node(s) left on CPU (" +
              std::to_string(on_host.size()) + " of them on the delegate's CPU kernels; device '" + device_->name() +
              "')");
  return Status::Ok();
}

}  // namespace sdgpu::gpu
