#include "gpu/gpu_backend.h"

#include <algorithm>
#include <cstdio>

#include "abi/int_array.h"
#include "delegate/partitioner.h"
#include "delegate/sd_delegate.h"
#include "delegate/stats.h"
#include "delegate/tflite_graph.h"
#include "gpu/partition.h"

namespace sdgpu::gpu {

std::shared_ptr<const DiskCache> OpenCache(const DelegateOptions& options, const Logger& logger) {
  if (options.cache_dir_from_alias) {
    logger.Warning("option opencl_cache_dir is deprecated: it now names the cache of every GPU backend; use cache_dir");
  }
  return std::make_shared<DiskCache>(ResolvedCacheDir(options), static_cast<uint64_t>(options.cache_max_mb) << 20,
                                     logger);
}

std::string GpuBackend::ExtraStatsJson() const {
  // {"program":n,"tiles":n} per counter
  auto per_kind = [&](long long DiskCache::Counters::*field) {
    std::string out = "{";
    for (int k = 0; k < kNumCacheKinds; ++k) {
      const auto kind = static_cast<CacheKind>(k);
      out += (k ? "," : "") + JsonString(CacheKindName(kind)) + ":" +
             std::to_string(device_->cache().counters(kind).*field);
    }
    return out + "}";
  };
  const DiskCache& cache = device_->cache();
  std::string j = ",\"cache_dir\":" + JsonString(cache.dir()) + ",\"cache_max_bytes\":" +
                  std::to_string(cache.max_bytes()) + ",\"cache_hits\":" + per_kind(&DiskCache::Counters::hits) +
                  ",\"cache_misses\":" + per_kind(&DiskCache::Counters::misses) +
                  ",\"cache_rejected\":" + per_kind(&DiskCache::Counters::rejected) +
                  ",\"cache_stores\":" + per_kind(&DiskCache::Counters::stores) +
                  ",\"cache_store_failures\":" + std::to_string(cache.store_failures()) +
                  ",\"cache_evictions\":" + std::to_string(cache.evictions());
  const SetupProgress::Snapshot p = device_->progress().snapshot();
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.3f", p.seconds);
  j += ",\"setup_phase\":" + JsonString(p.phase) + ",\"setup_detail\":" + JsonString(p.detail) +
       ",\"setup_done\":" + std::to_string(p.done) + ",\"setup_total\":" + std::to_string(p.total) +
       ",\"setup_phase_s\":" + seconds + ",\"setup_phases_ms\":{";
  bool first = true;
  for (const auto& [name, ms] : p.phase_ms) {
    j += (first ? "" : ",") + JsonString(name) + ":" + std::to_string(static_cast<long long>(ms + 0.5));
    first = false;
  }
  j += "},\"tuning_budget_ms\":" + std::to_string(options_.tuning_budget_ms) +
       ",\"tiles_tuned\":" + std::to_string(device_->tuning(Device::Tuning::kTuned)) +
       ",\"tiles_from_cache\":" + std::to_string(device_->tuning(Device::Tuning::kFromCache)) +
       ",\"tiles_untuned\":" + std::to_string(device_->tuning(Device::Tuning::kUntuned)) +
       ",\"upload_waits\":" + std::to_string(device_->upload_waits()) +
       ",\"upload_drains\":" + std::to_string(device_->upload_drains());
  return j;
}

Status GpuBackend::Supports(const ParsedOp&, const std::vector<TensorInfo>&) const { return Status::Ok(); }

Status GpuBackend::CreateKernel(const ParsedOp&, std::unique_ptr<BackendKernel>*) {
  return Status::Error(std::string(name()) + " backend runs whole partitions (PrepareGraph), not per-op host kernels");
}

Status GpuBackend::AllocateArena(size_t, std::unique_ptr<Arena>*) {
  return Status::Error(std::string(name()) + " backend allocates device arenas per partition");
}

namespace {

// The bytes a tensor takes on the device: a float tensor the kernels read and write as activation storage -- a
// computed one, or a constant the op reads in place through an activation parameter (GpuPartition::Prepare uploads
// it so) -- as that storage has it (half with activations_fp16: SD's VAE at 512 x 512 has a 256 MiB float32 tensor
// that fits a 128 MiB storage block as half, and the text encoder's 152 MB token embedding table is 76 MB); a
// constant read as float32 or made into packed weights, and the rest, as the model has them.
size_t DeviceBytes(const Device& dev, const abi::TfLiteTensor* t, bool activation_storage) {
  return t->type == abi::kTfLiteFloat32 && activation_storage ? t->bytes / 4 * dev.act_bytes() : t->bytes;
}

// A tensor larger than one kernel argument can address (GL: the storage block size) cannot be a GPU operand; its
// node runs on the CPU kernels instead of failing the load.
Status CheckTensorSizes(const Device& dev, const NodeDesc& desc, const GpuOp& op) {
  const size_t limit = dev.max_tensor_bytes();
  auto listed = [](const std::vector<int>& list, int i) { return std::find(list.begin(), list.end(), i) != list.end(); };
  auto check = [&](const abi::TfLiteTensor* t, bool activation_storage) {
    const size_t bytes = t == nullptr ? 0 : DeviceBytes(dev, t, activation_storage);
    if (bytes <= limit) return Status::Ok();
    return Status::Error("a " + std::to_string(bytes) + "-byte tensor is above the " + std::string(dev.backend_name()) +
                         " device's " + std::to_string(limit) + "-byte limit for one kernel operand");
  };
  for (size_t i = 0; i < desc.inputs.size(); ++i) {
    const abi::TfLiteTensor* t = desc.inputs[i];
    const int k = static_cast<int>(i);
    const bool in_place = listed(op.device_inputs(), k) && !listed(op.float32_inputs(), k);
    SDGPU_RETURN_IF_ERROR(check(t, t != nullptr && (!IsConstant(t) || in_place)));
  }
  for (const abi::TfLiteTensor* t : desc.outputs) SDGPU_RETURN_IF_ERROR(check(t, true));
  return Status::Ok();
}

}  // namespace

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
    if (s.ok()) s = CheckTensorSizes(*device_, view.desc, *op);
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
