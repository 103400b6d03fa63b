#include "backends/opencl/opencl_backend.h"

#include <cstdlib>

#include "abi/int_array.h"
#include "backends/opencl/cl_partition.h"
#include "delegate/sd_delegate.h"

namespace sdgpu {
namespace {

// "" -> $XDG_CACHE_HOME/sdgpu/opencl or ~/.cache/sdgpu/opencl; "none" -> no cache.
std::string ResolveCacheDir(const std::string& option) {
  if (option == "none") return "";
  if (!option.empty()) return option;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/sdgpu/opencl";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/sdgpu/opencl";
  }
  return "";
}

}  // namespace

Status OpenClBackend::Create(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out) {
  auto b = std::make_unique<OpenClBackend>();
  b->options_ = options;
  ocl::ClRuntimeOptions ro;
  ro.profiling = !options.profile_path.empty();
  ro.cache_dir = ResolveCacheDir(options.opencl_cache_dir);
  SDGPU_RETURN_IF_ERROR(ocl::ClRuntime::Create(ro, logger, &b->rt_));
  *out = std::move(b);
  return Status::Ok();
}

Status OpenClBackend::Supports(const ParsedOp&, const std::vector<TensorInfo>&) const { return Status::Ok(); }

Status OpenClBackend::CreateKernel(const ParsedOp&, std::unique_ptr<BackendKernel>*) {
  return Status::Error("opencl backend runs whole partitions (PrepareGraph), not per-op host kernels");
}

Status OpenClBackend::AllocateArena(size_t, std::unique_ptr<Arena>*) {
  return Status::Error("opencl backend allocates device arenas per partition");
}

Status OpenClBackend::PrepareGraph(abi::TfLiteContext* context, SdDelegate* delegate, bool* handled) {
  *handled = true;
  const Logger& logger = delegate->logger();
  abi::TfLiteIntArray* exec_plan = nullptr;
  if (context->GetExecutionPlan(context, &exec_plan) != abi::kTfLiteOk || exec_plan == nullptr) {
    return Status::Error("GetExecutionPlan failed");
  }
  const std::vector<int> nodes = abi::IntArrayToVector(exec_plan);
  PartitionPlan plan;
  for (int node_index : nodes) {
    ocl::NodeView view;
    Status s = ocl::ViewNode(context, *this, node_index, &view);
    std::unique_ptr<ocl::ClOp> op;
    if (s.ok()) s = ocl::CreateClOp(*rt_, view.desc, &op);  // the same validation prepare will run
    const std::string name = view.desc.name.empty() ? "node" : view.desc.name;
    if (s.ok()) {
      plan.claimed.push_back(node_index);
      plan.claimed_ops.push_back(name);
    } else {
      plan.declined.push_back(DeclinedNode{node_index, name, s.message()});
      logger.Warning("opencl: node " + std::to_string(node_index) + " (" + name + ") stays on CPU: " + s.message());
    }
  }
  delegate->stats().RecordPartitioning(plan);
  int partitions = 0;
  if (!plan.claimed.empty()) {
    abi::OwnedIntArray claimed;
    if (!claimed.Assign(plan.claimed)) return Status::Error("out of memory while partitioning");
    abi::TfLiteDelegateParams* params = nullptr;
    if (context->PreviewDelegatePartitioning != nullptr &&
        context->PreviewDelegatePartitioning(context, claimed.get(), &params, &partitions) != abi::kTfLiteOk) {
      partitions = -1;
    }
    if (context->ReplaceNodeSubsetsWithDelegateKernels(context, ocl::ClPartition::Registration(), claimed.get(),
                                                       delegate->tflite()) != abi::kTfLiteOk) {
      return Status::Error("ReplaceNodeSubsetsWithDelegateKernels failed");
    }
  }
  delegate->stats().RecordPartitions(partitions);
  logger.Info("opencl: " + std::to_string(partitions) + " partition(s), " + std::to_string(plan.claimed.size()) +
              " node(s) delegated, " + std::to_string(plan.declined.size()) + " node(s) left on CPU (device '" +
              rt_->device_name() + "')");
  return Status::Ok();
}

}  // namespace sdgpu
