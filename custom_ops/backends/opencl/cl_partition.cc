#include "backends/opencl/cl_partition.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <set>

#include "abi/int_array.h"
#include "backends/opencl/opencl_backend.h"
#include "delegate/partitioner.h"
#include "delegate/sd_delegate.h"
#include "delegate/tflite_graph.h"

namespace sdgpu::ocl {

Status ViewNode(abi::TfLiteContext* context, const OpenClBackend& backend, int node_index, NodeView* view) {
  abi::TfLiteNode* node = nullptr;
  abi::TfLiteRegistration* reg = nullptr;
  if (context->GetNodeAndRegistration(context, node_index, &node, &reg) != abi::kTfLiteOk || node == nullptr ||
      reg == nullptr) {
    return Status::Error("GetNodeAndRegistration failed for node " + std::to_string(node_index));
  }
  ClNodeDesc& d = view->desc;
  d = ClNodeDesc();
  d.builtin_code = reg->builtin_code;
  d.builtin_data = node->builtin_data;
  if (reg->builtin_code == abi::kTfLiteBuiltinCustom) {
    d.name = reg->custom_name != nullptr ? reg->custom_name : "CUSTOM";
    if (FindOpDef(d.name) == nullptr) return Status::Error("custom op '" + d.name + "' is not one of the Sd* ops");
    SDGPU_RETURN_IF_ERROR(CheckNode(context, node, reg, backend, &view->parsed));  // shared parser + shape rule
    d.sd_op = &view->parsed;
  } else {
    d.name = BuiltinName(reg->builtin_code);
  }
  for (int t : abi::IntArrayToVector(node->inputs)) {
    abi::TfLiteTensor* tensor = nullptr;
    if (t >= 0) SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    d.inputs.push_back(tensor);
  }
  for (int t : abi::IntArrayToVector(node->outputs)) {
    abi::TfLiteTensor* tensor = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    d.outputs.push_back(tensor);
  }
  return Status::Ok();
}

abi::TfLiteRegistration ClPartition::Registration() {
  abi::TfLiteRegistration reg{};
  reg.init = &ClPartition::InitThunk;
  reg.free = &ClPartition::FreeThunk;
  reg.prepare = &ClPartition::PrepareThunk;
  reg.invoke = &ClPartition::InvokeThunk;
  reg.builtin_code = abi::kTfLiteBuiltinDelegate;
  reg.custom_name = "SdGpuOpenCL";
  reg.version = 1;
  return reg;
}

Status ClPartition::Init(abi::TfLiteContext* context, const abi::TfLiteDelegateParams* params) {
  if (params == nullptr || params->nodes_to_replace == nullptr) return Status::Error("init: missing delegate params");
  for (int node_index : abi::IntArrayToVector(params->nodes_to_replace)) {
    abi::TfLiteNode* node = nullptr;
    abi::TfLiteRegistration* reg = nullptr;
    if (context->GetNodeAndRegistration(context, node_index, &node, &reg) != abi::kTfLiteOk || node == nullptr) {
      return Status::Error("init: GetNodeAndRegistration failed for node " + std::to_string(node_index));
    }
    Step s;
    s.node_index = node_index;
    s.inputs = abi::IntArrayToVector(node->inputs);
    if (abi::IntArraySize(node->outputs) != 1) return Status::Error("init: node with several outputs");
    s.output = node->outputs->data[0];
    // Ops are built here: node registrations are only readable while the delegate
    // partitions, and the SD graphs have static shapes (prepare re-checks sizes).
    NodeView view;
    SDGPU_RETURN_IF_ERROR(ViewNode(context, *backend_, node_index, &view));
    s.name = view.desc.name;
    Status st = CreateClOp(backend_->runtime(), view.desc, &s.op);
    if (!st.ok()) return Status::Error("node " + std::to_string(node_index) + " (" + s.name + "): " + st.message());
    s.output_bytes = view.desc.outputs[0]->bytes;
    steps_.push_back(std::move(s));
  }
  return Status::Ok();
}

Status ClPartition::Prepare(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  SDGPU_RETURN_IF_ERROR(init_status_);
  prepared_ = false;
  const ClRuntime& rt = backend_->runtime();
  const std::vector<int> part_inputs = abi::IntArrayToVector(node->inputs);
  outputs_ = abi::IntArrayToVector(node->outputs);
  const std::set<int> part_outputs(outputs_.begin(), outputs_.end());

  std::unordered_map<int, int> producer, last_use;
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) producer[steps_[i].output] = i;

  planner_ = MemoryPlanner();
  internal_.clear();
  externals_.clear();
  inputs_to_upload_.clear();
  size_t max_scratch = 0;
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    Step& step = steps_[i];
    for (int k : step.op->device_inputs()) last_use[step.inputs[k]] = i;
  }
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    Step& step = steps_[i];
    abi::TfLiteTensor* out = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, step.output, &out));
    if (out->bytes != step.output_bytes) {
      return Status::Error("node " + std::to_string(step.node_index) +
                           ": tensor shapes changed after delegation (the opencl backend needs static shapes)");
    }
    if (part_outputs.count(step.output) == 0) {
      const int last = last_use.count(step.output) ? last_use[step.output] : i;
      internal_[step.output] = planner_.Add(out->bytes, i, last);
    }
    step.scratch_request = planner_.Add(step.op->scratch_bytes(), i, i);
    max_scratch = std::max(max_scratch, step.op->scratch_bytes());
    for (int k : step.op->device_inputs()) {
      const int t = step.inputs[k];
      if (t < 0 || producer.count(t) || constants_.count(t) || externals_.count(t)) continue;
      abi::TfLiteTensor* tensor = nullptr;
      SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
      if (IsConstant(tensor)) {  // weights: uploaded once, kept for the interpreter's lifetime
        ClMemHandle mem;
        SDGPU_RETURN_IF_ERROR(rt.CreateBuffer(tensor->bytes, &mem));
        SDGPU_RETURN_IF_ERROR(rt.Upload(mem.get(), 0, tensor->bytes, tensor->data.raw, true));
        constants_.emplace(t, std::move(mem));
      } else {
        External e;
        e.bytes = tensor->bytes;
        SDGPU_RETURN_IF_ERROR(rt.CreateBuffer(e.bytes, &e.mem));
        externals_.emplace(t, std::move(e));
        inputs_to_upload_.push_back(t);
      }
    }
  }
  for (int t : outputs_) {
    if (externals_.count(t)) continue;
    abi::TfLiteTensor* tensor = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    External e;
    e.bytes = tensor->bytes;
    SDGPU_RETURN_IF_ERROR(rt.CreateBuffer(e.bytes, &e.mem));
    externals_.emplace(t, std::move(e));
  }
  (void)part_inputs;
  SDGPU_RETURN_IF_ERROR(planner_.Plan());
  if (!arena_ || arena_bytes_ < planner_.arena_bytes()) {
    arena_.reset();
    SDGPU_RETURN_IF_ERROR(rt.CreateBuffer(planner_.arena_bytes(), &arena_));
    arena_bytes_ = planner_.arena_bytes();
  }
  delegate_->stats().RecordPrepare(max_scratch, planner_.arena_bytes());
  delegate_->logger().Info("opencl: partition of " + std::to_string(steps_.size()) + " node(s): arena " +
                           std::to_string(planner_.arena_bytes()) + " bytes for " + std::to_string(internal_.size()) +
                           " internal tensor(s), " + std::to_string(constants_.size()) + " constant buffer(s), " +
                           std::to_string(externals_.size()) + " input/output buffer(s)");
  prepared_ = true;
  return Status::Ok();
}

Status ClPartition::Ref(int tensor, ClTensorRef* out) const {
  auto it = internal_.find(tensor);
  if (it != internal_.end()) {
    *out = ClTensorRef{arena_.get(), planner_.offset(it->second)};
    return Status::Ok();
  }
  auto c = constants_.find(tensor);
  if (c != constants_.end()) {
    *out = ClTensorRef{c->second.get(), 0};
    return Status::Ok();
  }
  auto e = externals_.find(tensor);
  if (e != externals_.end()) {
    *out = ClTensorRef{e->second.mem.get(), 0};
    return Status::Ok();
  }
  return Status::Error("internal error: tensor " + std::to_string(tensor) + " has no device buffer");
}

Status ClPartition::Invoke(abi::TfLiteContext* context, abi::TfLiteNode*) {
  if (!prepared_) return Status::Error("invoke before a successful prepare");
  const ClRuntime& rt = backend_->runtime();
  for (int t : inputs_to_upload_) {
    abi::TfLiteTensor* tensor = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    if (tensor->data.raw == nullptr && tensor->bytes > 0) return Status::Error("input tensor without data");
    SDGPU_RETURN_IF_ERROR(rt.Upload(externals_.at(t).mem.get(), 0, std::min(tensor->bytes, externals_.at(t).bytes),
                                    tensor->data.raw, false));
  }
  std::vector<ClEventHandle> events(rt.profiling() ? steps_.size() : 0);
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    std::vector<ClTensorRef> in(step.inputs.size());
    for (int k : step.op->device_inputs()) SDGPU_RETURN_IF_ERROR(Ref(step.inputs[k], &in[k]));
    ClTensorRef out;
    SDGPU_RETURN_IF_ERROR(Ref(step.output, &out));
    const ClTensorRef scratch{arena_.get(), planner_.offset(step.scratch_request)};
    Status s = step.op->Enqueue(rt, in, out, scratch, rt.profiling() ? &events[i] : nullptr);
    if (!s.ok()) return Status::Error("node " + std::to_string(step.node_index) + " (" + step.name + "): " + s.message());
  }
  for (int t : outputs_) {
    abi::TfLiteTensor* tensor = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    if (tensor->data.raw == nullptr && tensor->bytes > 0) return Status::Error("output tensor without data");
    SDGPU_RETURN_IF_ERROR(rt.Download(externals_.at(t).mem.get(), 0, std::min(tensor->bytes, externals_.at(t).bytes),
                                      tensor->data.raw));
  }
  ++invocations_;
  if (rt.profiling()) {
    SDGPU_RETURN_IF_ERROR(rt.Finish());
    for (size_t i = 0; i < steps_.size(); ++i) {
      if (!events[i]) continue;
      cl_ulong t0 = 0, t1 = 0;
      SDGPU_RETURN_IF_ERROR(ClCheck(rt.api().clGetEventProfilingInfo(events[i].get(), CL_PROFILING_COMMAND_START,
                                                                     sizeof(t0), &t0, nullptr),
                                    "clGetEventProfilingInfo"));
      SDGPU_RETURN_IF_ERROR(ClCheck(rt.api().clGetEventProfilingInfo(events[i].get(), CL_PROFILING_COMMAND_END,
                                                                     sizeof(t1), &t1, nullptr),
                                    "clGetEventProfilingInfo"));
      steps_[i].total_ms += static_cast<double>(t1 - t0) * 1e-6;
    }
    SDGPU_RETURN_IF_ERROR(WriteProfile());
  }
  delegate_->stats().RecordInvoke();
  return Status::Ok();
}

Status ClPartition::WriteProfile() const {
  const std::string& path = backend_->options().profile_path;
  if (path.empty()) return Status::Ok();
  // Profile of the last kernel launch of each node (multi-launch ops: the last one), averaged over invocations.
  std::string j = "{\"device\":\"" + backend_->runtime().device_name() + "\",\"invocations\":" +
                  std::to_string(invocations_) + ",\"nodes\":[";
  for (size_t i = 0; i < steps_.size(); ++i) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6f", steps_[i].total_ms / static_cast<double>(std::max(1LL, invocations_)));
    j += (i ? "," : "");
    j += "{\"node\":" + std::to_string(steps_[i].node_index) + ",\"op\":\"" + steps_[i].name + "\",\"ms\":" + buf + "}";
  }
  j += "]}\n";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status::Error("opencl: cannot write the profile to " + path);
  std::fwrite(j.data(), 1, j.size(), f);
  std::fclose(f);
  return Status::Ok();
}

// ---- C ABI thunks: no exception may escape ---------------------------------

void* ClPartition::InitThunk(abi::TfLiteContext* context, const char* buffer, size_t) {
  try {
    const auto* params = reinterpret_cast<const abi::TfLiteDelegateParams*>(buffer);
    SdDelegate* d = params != nullptr ? SdDelegate::FromTflite(params->delegate) : nullptr;
    if (d == nullptr) return nullptr;
    auto* backend = dynamic_cast<OpenClBackend*>(&d->backend());
    if (backend == nullptr) return nullptr;
    auto* k = new ClPartition(d, backend);
    k->init_status_ = k->Init(context, params);
    if (!k->init_status_.ok()) d->logger().Error(k->init_status_.message());
    return k;
  } catch (...) {
    return nullptr;
  }
}

void ClPartition::FreeThunk(abi::TfLiteContext*, void* buffer) {
  try {
    delete static_cast<ClPartition*>(buffer);
  } catch (...) {
  }
}

abi::TfLiteStatus ClPartition::PrepareThunk(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  auto* k = static_cast<ClPartition*>(node->user_data);
  if (k == nullptr) {
    ReportToContext(context, "opencl partition was not initialised");
    return abi::kTfLiteError;
  }
  Status s;
  try {
    s = k->Prepare(context, node);
  } catch (const std::exception& e) {
    s = Status::Error(std::string("prepare: exception: ") + e.what());
  } catch (...) {
    s = Status::Error("prepare: unknown exception");
  }
  if (s.ok()) return abi::kTfLiteOk;
  k->delegate_->logger().Error(s.message());
  ReportToContext(context, s.message());
  return abi::kTfLiteError;
}

abi::TfLiteStatus ClPartition::InvokeThunk(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  auto* k = static_cast<ClPartition*>(node->user_data);
  if (k == nullptr) return abi::kTfLiteError;
  Status s;
  try {
    s = k->Invoke(context, node);
  } catch (const std::exception& e) {
    s = Status::Error(std::string("invoke: exception: ") + e.what());
  } catch (...) {
    s = Status::Error("invoke: unknown exception");
  }
  if (s.ok()) return abi::kTfLiteOk;
  k->delegate_->logger().Error(s.message());
  ReportToContext(context, s.message());
  return abi::kTfLiteError;
}

}  // namespace sdgpu::ocl
