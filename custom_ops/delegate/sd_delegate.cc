#include "delegate/sd_delegate.h"

#include <exception>

#include "abi/abi_check.h"
#include "abi/int_array.h"
#include "delegate/cpu_backend.h"
#include "delegate/partition_kernel.h"
#include "delegate/partitioner.h"
#include "delegate/tflite_graph.h"

namespace sdgpu {

Status SdDelegate::Create(const DelegateOptions& options, std::unique_ptr<Backend> backend,
                          std::unique_ptr<SdDelegate>* out) {
  if (backend == nullptr) return Status::Error("no backend");
  std::unique_ptr<SdDelegate> d(new SdDelegate());
  d->options_ = options;
  d->logger_.set_level(options.log_level);
  d->backend_ = std::move(backend);
  d->tflite_.data_ = d.get();
  d->tflite_.Prepare = &SdDelegate::PrepareThunk;
  d->tflite_.CopyFromBufferHandle = nullptr;
  d->tflite_.CopyToBufferHandle = nullptr;
  d->tflite_.FreeBufferHandle = nullptr;
  d->tflite_.flags = abi::kTfLiteDelegateFlagsAllowDynamicTensors;
  d->tflite_.opaque_delegate_builder = nullptr;
  for (const std::string& w : OptionWarnings(options)) d->logger_.Warning(w);
  d->logger_.Info("created delegate: backend=" + options.backend +
                  " num_threads=" + std::to_string(ResolvedNumThreads(options)));
  *out = std::move(d);
  return Status::Ok();
}

SdDelegate::~SdDelegate() { magic_ = 0; }

Backend& SdDelegate::host_backend() {
  if (backend_->name() == std::string("cpu")) return *backend_;
  if (host_fallback_ == nullptr) host_fallback_ = std::make_unique<CpuBackend>(options_);
  return *host_fallback_;
}

SdDelegate* SdDelegate::FromTflite(const abi::TfLiteDelegate* d) {
  if (d == nullptr || d->data_ == nullptr) return nullptr;
  auto* self = static_cast<SdDelegate*>(d->data_);
  if (&self->tflite_ != d || self->magic_ != kMagic) return nullptr;
  return self;
}

std::string SdDelegate::StatsJson() const {
  return stats_.ToJson(backend_->name(), ResolvedNumThreads(options_), backend_->counters(),
                       backend_->ExtraStatsJson());
}

abi::TfLiteStatus SdDelegate::Prepare(abi::TfLiteContext* context) {
  std::string why;
  if (!abi::CheckContextAbi(context, &why)) {
    logger_.Error("TFLite ABI sanity check failed: " + why);
    ReportToContext(context, "TFLite ABI sanity check failed: " + why);
    return abi::kTfLiteDelegateError;
  }
  bool handled = false;
  Status graph = backend_->PrepareGraph(context, this, &handled);
  if (handled) {
    if (graph.ok()) return abi::kTfLiteOk;
    logger_.Error("partitioning failed: " + graph.message());
    ReportToContext(context, "partitioning failed: " + graph.message());
    return abi::kTfLiteDelegateError;
  }
  PartitionPlan plan;
  Status s = SelectNodes(context, *backend_, logger_, &plan);
  if (!s.ok()) {
    logger_.Error("partitioning failed: " + s.message());
    ReportToContext(context, "partitioning failed: " + s.message());
    return abi::kTfLiteDelegateError;
  }
  stats_.RecordPartitioning(plan);
  for (const DeclinedNode& d : plan.declined) {
    logger_.Warning("declining node " + std::to_string(d.node_index) + " (" + d.op_name + "): " + d.reason);
  }
  logger_.Info("claimed " + std::to_string(plan.claimed.size()) + " node(s), declined " +
               std::to_string(plan.declined.size()) + ", left " + std::to_string(plan.other_nodes) +
               " other node(s) to the runtime");
  if (plan.claimed.empty()) return abi::kTfLiteOk;

  abi::OwnedIntArray nodes;
  if (!nodes.Assign(plan.claimed)) {
    logger_.Error("out of memory while partitioning");
    return abi::kTfLiteDelegateError;
  }
  int partitions = 0;
  if (Status p = PreviewPartitions(context, nodes.get(), &partitions); !p.ok()) {
    logger_.Error("partitioning failed: " + p.message());
    ReportToContext(context, "partitioning failed: " + p.message());
    return abi::kTfLiteDelegateError;
  }
  const abi::TfLiteStatus st = context->ReplaceNodeSubsetsWithDelegateKernels(
      context, PartitionKernel::Registration(), nodes.get(), &tflite_);
  if (st != abi::kTfLiteOk) logger_.Error("ReplaceNodeSubsetsWithDelegateKernels failed");
  return st;
}

Status SdDelegate::ReplaceWithHostKernels(abi::TfLiteContext* context, const std::vector<int>& candidates,
                                          std::vector<int>* replaced) {
  replaced->clear();
  Backend& host = host_backend();
  for (int node_index : candidates) {
    abi::TfLiteNode* node = nullptr;
    abi::TfLiteRegistration* reg = nullptr;
    if (context->GetNodeAndRegistration(context, node_index, &node, &reg) != abi::kTfLiteOk || node == nullptr ||
        reg == nullptr || reg->builtin_code != abi::kTfLiteBuiltinCustom || reg->custom_name == nullptr) {
      continue;  // a builtin: the runtime has its own kernel
    }
    ParsedOp op;
    Status s = CheckNode(context, node, reg, host, &op);
    if (s.ok()) {
      replaced->push_back(node_index);
    } else {
      logger_.Warning("node " + std::to_string(node_index) + " (" + reg->custom_name + ") has no kernel: " +
                      s.message());
    }
  }
  if (replaced->empty()) return Status::Ok();
  abi::OwnedIntArray nodes;
  if (!nodes.Assign(*replaced)) return Status::Error("out of memory while partitioning");
  if (context->ReplaceNodeSubsetsWithDelegateKernels(context, PartitionKernel::Registration(), nodes.get(),
                                                     &tflite_) != abi::kTfLiteOk) {
    return Status::Error("ReplaceNodeSubsetsWithDelegateKernels failed (CPU kernels)");
  }
  return Status::Ok();
}

abi::TfLiteStatus SdDelegate::PrepareThunk(abi::TfLiteContext* context, abi::TfLiteDelegate* delegate) {
  SdDelegate* self = FromTflite(delegate);
  if (self == nullptr) return abi::kTfLiteDelegateError;
  try {
    return self->Prepare(context);
  } catch (const std::exception& e) {
    self->logger_.Error(std::string("delegate prepare: exception: ") + e.what());
  } catch (...) {
    self->logger_.Error("delegate prepare: unknown exception");
  }
  return abi::kTfLiteDelegateError;
}

}  // namespace sdgpu
