#include "tests/native_cc/mini_runtime.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <set>

namespace sdtest {
namespace {

std::string* g_create_error = nullptr;  // collects report_error messages during one create call (single-threaded)

void CollectCreateError(const char* message) {
  if (g_create_error != nullptr && message != nullptr) *g_create_error += message;
}

}  // namespace

// ---- ExternalDelegate --------------------------------------------------------------------------------------------

ExternalDelegate::~ExternalDelegate() {
  if (delegate_ != nullptr && destroy_ != nullptr) destroy_(delegate_);
  if (handle_ != nullptr) dlclose(handle_);
}

bool ExternalDelegate::Load(const std::string& library, const std::map<std::string, std::string>& options,
                            std::string* error) {
  handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    *error = std::string("dlopen failed: ") + dlerror();
    return false;
  }
  auto create = reinterpret_cast<CreateFn>(dlsym(handle_, "tflite_plugin_create_delegate"));
  destroy_ = reinterpret_cast<DestroyFn>(dlsym(handle_, "tflite_plugin_destroy_delegate"));
  stats_ = reinterpret_cast<StatsFn>(dlsym(handle_, "sdgpu_delegate_stats_json"));
  version_ = reinterpret_cast<VersionFn>(dlsym(handle_, "sdgpu_version"));
  if (create == nullptr || destroy_ == nullptr) {
    *error = library + " is not a TFLite external delegate (no tflite_plugin_create_delegate / _destroy_delegate)";
    return false;
  }
  std::vector<const char*> keys, values;
  for (const auto& kv : options) {
    keys.push_back(kv.first.c_str());
    values.push_back(kv.second.c_str());
  }
  std::string reported;
  g_create_error = &reported;
  delegate_ = create(keys.data(), values.data(), keys.size(), &CollectCreateError);
  g_create_error = nullptr;
  if (delegate_ == nullptr) {
    *error = "tflite_plugin_create_delegate failed: " + reported;
    return false;
  }
  return true;
}

std::string ExternalDelegate::StatsJson() const {
  if (stats_ == nullptr || delegate_ == nullptr) return "";
  const int n = stats_(delegate_, nullptr, 0);
  if (n < 0) return "";
  std::string out(static_cast<size_t>(n) + 1, '\0');
  stats_(delegate_, &out[0], out.size());
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string ExternalDelegate::Version() const { return version_ != nullptr ? version_() : ""; }

// ---- MiniRuntime ---------------------------------------------------------------------------------------------------

MiniRuntime::MiniRuntime() {
  context_.impl_ = this;
  context_.GetExecutionPlan = &MiniRuntime::GetExecutionPlan;
  context_.GetNodeAndRegistration = &MiniRuntime::GetNodeAndRegistration;
  context_.ReplaceNodeSubsetsWithDelegateKernels = &MiniRuntime::ReplaceNodeSubsets;
  context_.ResizeTensor = &MiniRuntime::ResizeTensor;
  context_.ResizeTensorExplicit = &MiniRuntime::ResizeTensorExplicit;
  context_.AddTensors = &MiniRuntime::AddTensors;
  context_.ReportError = &MiniRuntime::ReportError;
  context_.GetTensor = &MiniRuntime::GetTensor;
  context_.recommended_num_threads = -1;
}

MiniRuntime::~MiniRuntime() {
  for (auto& n : nodes_) {
    if (n->is_delegate_kernel && n->initialised && n->reg.free != nullptr) n->reg.free(&context_, n->node.user_data);
  }
}

int MiniRuntime::AddTensor(const std::vector<int>& dims, bool constant) {
  abi::TfLiteTensor t{};
  t.type = abi::kTfLiteFloat32;
  t.allocation_type = constant ? abi::kTfLiteMmapRo : abi::kTfLiteArenaRw;
  t.buffer_handle = abi::kTfLiteNullBufferHandle;
  tensors_.push_back(t);
  dims_.emplace_back();
  storage_.emplace_back();
  const int index = static_cast<int>(tensors_.size()) - 1;
  Resize(&tensors_[index], dims);
  return index;
}

void MiniRuntime::AddCustomNode(const std::string& op, const std::string& options, const std::vector<int>& inputs,
                                const std::vector<int>& outputs) {
  auto n = std::make_unique<Node>();
  n->custom_name = op;
  n->options = options;
  n->inputs.Assign(inputs);
  n->outputs.Assign(outputs);
  n->node.inputs = n->inputs.get();
  n->node.outputs = n->outputs.get();
  n->node.custom_initial_data = n->options.data();
  n->node.custom_initial_data_size = static_cast<int>(n->options.size());
  // What TFLite hands a delegate for a custom op that no resolver knows: builtin CUSTOM, version 1, no kernel.
  n->reg.builtin_code = abi::kTfLiteBuiltinCustom;
  n->reg.custom_name = n->custom_name.c_str();
  n->reg.version = 1;
  plan_.push_back(static_cast<int>(nodes_.size()));
  nodes_.push_back(std::move(n));
}

float* MiniRuntime::data(int tensor) { return storage_[tensor].data(); }

size_t MiniRuntime::size(int tensor) const { return storage_[tensor].size(); }

bool MiniRuntime::Fail(const std::string& message) {
  if (!error_.empty()) error_ += "; ";
  error_ += message;
  return false;
}

bool MiniRuntime::ModifyGraphWithDelegate(abi::TfLiteDelegate* delegate) {
  context_.tensors = tensors_.data();
  context_.tensors_size = tensors_.size();
  if (delegate == nullptr || delegate->Prepare == nullptr) return Fail("no delegate");
  if (delegate->Prepare(&context_, delegate) != abi::kTfLiteOk) return Fail("delegate Prepare failed");
  // AllocateTensors: prepare every node of the (new) execution plan. We have no kernels of our own.
  for (int index : plan_) {
    Node& n = *nodes_[index];
    if (!n.is_delegate_kernel) {
      return Fail("node " + std::to_string(index) + " (" + n.custom_name + ") was not taken by the delegate");
    }
    if (n.node.user_data == nullptr) return Fail("delegate kernel init returned null");
    if (n.reg.prepare != nullptr && n.reg.prepare(&context_, &n.node) != abi::kTfLiteOk) {
      return Fail("delegate kernel prepare failed");
    }
  }
  return true;
}

bool MiniRuntime::Invoke() {
  for (int index : plan_) {
    Node& n = *nodes_[index];
    if (n.reg.invoke == nullptr || n.reg.invoke(&context_, &n.node) != abi::kTfLiteOk) {
      return Fail("invoke of node " + std::to_string(index) + " failed");
    }
  }
  return true;
}

int MiniRuntime::delegate_kernels() const {
  int count = 0;
  for (int index : plan_) count += nodes_[index]->is_delegate_kernel ? 1 : 0;
  return count;
}

abi::TfLiteStatus MiniRuntime::Resize(abi::TfLiteTensor* tensor, const std::vector<int>& dims) {
  const size_t index = static_cast<size_t>(tensor - tensors_.data());
  if (index >= tensors_.size()) return abi::kTfLiteError;
  size_t elements = 1;
  for (int d : dims) {
    if (d < 0) return abi::kTfLiteError;
    elements *= static_cast<size_t>(d);
  }
  if (!dims_[index].Assign(dims)) return abi::kTfLiteError;
  storage_[index].assign(elements, 0.0f);
  tensor->dims = dims_[index].get();
  tensor->bytes = elements * sizeof(float);
  tensor->data.f = storage_[index].data();
  return abi::kTfLiteOk;
}

abi::TfLiteStatus MiniRuntime::Replace(const abi::TfLiteRegistration& registration, const abi::TfLiteIntArray* nodes,
                                       abi::TfLiteDelegate* delegate) {
  std::set<int> replaced;
  for (int i = 0; i < abi::IntArraySize(nodes); ++i) {
    const int index = nodes->data[i];
    if (index < 0 || static_cast<size_t>(index) >= nodes_.size()) return abi::kTfLiteError;
    replaced.insert(index);
  }
  std::vector<int> new_plan;
  for (size_t pos = 0; pos < plan_.size();) {
    if (replaced.count(plan_[pos]) == 0) {
      new_plan.push_back(plan_[pos++]);
      continue;
    }
    std::vector<int> members;
    while (pos < plan_.size() && replaced.count(plan_[pos]) != 0) members.push_back(plan_[pos++]);
    // Partition inputs: read but not produced inside; outputs: produced inside and read outside or not read at all
    // (graph outputs).
    std::set<int> produced, inputs_seen;
    std::vector<int> inputs, outputs;
    for (int m : members) {
      for (int t : abi::IntArrayToVector(nodes_[m]->node.inputs)) {
        if (produced.count(t) == 0 && inputs_seen.insert(t).second) inputs.push_back(t);
      }
      for (int t : abi::IntArrayToVector(nodes_[m]->node.outputs)) produced.insert(t);
    }
    const std::set<int> member_set(members.begin(), members.end());
    for (int m : members) {
      for (int t : abi::IntArrayToVector(nodes_[m]->node.outputs)) {
        bool read_inside = false, read_outside = false;
        for (size_t k = 0; k < nodes_.size(); ++k) {
          for (int u : abi::IntArrayToVector(nodes_[k]->node.inputs)) {
            if (u != t) continue;
            (member_set.count(static_cast<int>(k)) != 0 ? read_inside : read_outside) = true;
          }
        }
        if (read_outside || !read_inside) outputs.push_back(t);
      }
      nodes_[m]->node.delegate = delegate;
    }
    auto k = std::make_unique<Node>();
    k->is_delegate_kernel = true;
    k->reg = registration;
    if (!k->inputs.Assign(inputs) || !k->outputs.Assign(outputs) || !k->params_nodes.Assign(members) ||
        !k->params_inputs.Assign(inputs) || !k->params_outputs.Assign(outputs)) {
      return abi::kTfLiteError;
    }
    k->node.inputs = k->inputs.get();
    k->node.outputs = k->outputs.get();
    k->node.delegate = delegate;
    k->params.delegate = delegate;
    k->params.nodes_to_replace = k->params_nodes.get();
    k->params.input_tensors = k->params_inputs.get();
    k->params.output_tensors = k->params_outputs.get();
    if (registration.init != nullptr) {
      k->node.user_data = registration.init(&context_, reinterpret_cast<const char*>(&k->params), 0);
    }
    k->initialised = true;
    new_plan.push_back(static_cast<int>(nodes_.size()));
    nodes_.push_back(std::move(k));
  }
  plan_ = new_plan;
  return abi::kTfLiteOk;
}

MiniRuntime* MiniRuntime::Self(const abi::TfLiteContext* context) { return static_cast<MiniRuntime*>(context->impl_); }

abi::TfLiteStatus MiniRuntime::GetExecutionPlan(abi::TfLiteContext* context, abi::TfLiteIntArray** plan) {
  MiniRuntime* self = Self(context);
  if (!self->plan_array_.Assign(self->plan_)) return abi::kTfLiteError;
  *plan = self->plan_array_.get();
  return abi::kTfLiteOk;
}

abi::TfLiteStatus MiniRuntime::GetNodeAndRegistration(abi::TfLiteContext* context, int index, abi::TfLiteNode** node,
                                                      abi::TfLiteRegistration** reg) {
  MiniRuntime* self = Self(context);
  if (index < 0 || static_cast<size_t>(index) >= self->nodes_.size()) return abi::kTfLiteError;
  *node = &self->nodes_[index]->node;
  *reg = &self->nodes_[index]->reg;
  return abi::kTfLiteOk;
}

abi::TfLiteStatus MiniRuntime::ReplaceNodeSubsets(abi::TfLiteContext* context, abi::TfLiteRegistration registration,
                                                  const abi::TfLiteIntArray* nodes, abi::TfLiteDelegate* delegate) {
  return Self(context)->Replace(registration, nodes, delegate);
}

abi::TfLiteStatus MiniRuntime::ResizeTensor(abi::TfLiteContext* context, abi::TfLiteTensor* tensor,
                                            abi::TfLiteIntArray* new_size) {
  // Takes ownership of new_size (malloc'd by the caller), as TFLite does.
  std::unique_ptr<abi::TfLiteIntArray, abi::FreeDeleter> owned(new_size);
  if (new_size == nullptr) return abi::kTfLiteError;
  return Self(context)->Resize(tensor, abi::IntArrayToVector(new_size));
}

abi::TfLiteStatus MiniRuntime::ResizeTensorExplicit(abi::TfLiteContext* context, abi::TfLiteTensor* tensor, int dims,
                                                    const int* shape) {
  if (dims < 0 || (dims > 0 && shape == nullptr)) return abi::kTfLiteError;
  return Self(context)->Resize(tensor, std::vector<int>(shape, shape + dims));
}

abi::TfLiteStatus MiniRuntime::AddTensors(abi::TfLiteContext* context, int, int*) {
  Self(context)->Fail("AddTensors is not supported by the mini runtime");
  return abi::kTfLiteError;
}

void MiniRuntime::ReportError(abi::TfLiteContext* context, const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  Self(context)->Fail(buf);
}

abi::TfLiteTensor* MiniRuntime::GetTensor(const abi::TfLiteContext* context, int index) {
  if (index < 0 || static_cast<size_t>(index) >= context->tensors_size) return nullptr;
  return &context->tensors[index];
}

}  // namespace sdtest
