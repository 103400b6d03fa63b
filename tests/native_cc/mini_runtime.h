// The runtime side of the TFLite delegate C ABI, just enough to run graphs of custom ops through an external delegate
// without TFLite: what benchmark_model's `--external_delegate_path` does, written against our own declarations
// (custom_ops/abi/tflite_abi.h), so the native tests need no TFLite library and run anywhere the delegate builds
// (x86-64, aarch64 under qemu-user).
//
//   ExternalDelegate  dlopen()s a delegate library and calls its plugin entry points
//                     (tflite_plugin_create_delegate / _destroy_delegate, like TFLite's external delegate adaptor)
//                     and the test entry points of entry/plugin.cc (sdgpu_delegate_stats_json, sdgpu_version).
//   MiniRuntime       one subgraph of float32 tensors and custom-op nodes; ModifyGraphWithDelegate() calls the
//                     delegate's Prepare, which replaces nodes through ReplaceNodeSubsetsWithDelegateKernels, then
//                     init()s and prepare()s the delegate kernels; Invoke() runs them in execution-plan order.
//
// Simplifications (documented, not hidden): a partition is a maximal run of consecutive replaced nodes in the
// execution plan (TFLite partitions by dependencies; the same for chains), and the runtime has no kernels of its own,
// so every node must end up in a delegate kernel.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "abi/int_array.h"
#include "abi/tflite_abi.h"

namespace sdtest {

namespace abi = sdgpu::abi;

class ExternalDelegate {
 public:
  ExternalDelegate() = default;
  ExternalDelegate(const ExternalDelegate&) = delete;
  ExternalDelegate& operator=(const ExternalDelegate&) = delete;
  ~ExternalDelegate();

  // dlopen()s `library` and creates a delegate with `options`; false with the reason in `error`.
  bool Load(const std::string& library, const std::map<std::string, std::string>& options, std::string* error);
  abi::TfLiteDelegate* get() const { return delegate_; }
  // sdgpu_delegate_stats_json of this delegate ("" when the library lacks it).
  std::string StatsJson() const;
  // sdgpu_version ("" when the library lacks it).
  std::string Version() const;

 private:
  using CreateFn = abi::TfLiteDelegate* (*)(const char* const*, const char* const*, size_t, void (*)(const char*));
  using DestroyFn = void (*)(abi::TfLiteDelegate*);
  using StatsFn = int (*)(const abi::TfLiteDelegate*, char*, size_t);
  using VersionFn = const char* (*)();

  void* handle_ = nullptr;
  abi::TfLiteDelegate* delegate_ = nullptr;
  DestroyFn destroy_ = nullptr;
  StatsFn stats_ = nullptr;
  VersionFn version_ = nullptr;
};

class MiniRuntime {
 public:
  MiniRuntime();
  MiniRuntime(const MiniRuntime&) = delete;
  MiniRuntime& operator=(const MiniRuntime&) = delete;
  ~MiniRuntime();

  // Graph construction, before ModifyGraphWithDelegate. A constant is read-only memory (kTfLiteMmapRo), the rest
  // are arena tensors (kTfLiteArenaRw); all are float32 and get zeroed storage of their shape.
  int AddTensor(const std::vector<int>& dims, bool constant);
  void AddCustomNode(const std::string& op, const std::string& options, const std::vector<int>& inputs,
                     const std::vector<int>& outputs);
  float* data(int tensor);
  size_t size(int tensor) const;  // elements

  // delegate->Prepare, then init + prepare of each delegate kernel. False with the reason in error().
  bool ModifyGraphWithDelegate(abi::TfLiteDelegate* delegate);
  bool Invoke();
  // Number of delegate kernels (partitions) in the execution plan.
  int delegate_kernels() const;
  const std::string& error() const { return error_; }

 private:
  struct Node {
    abi::TfLiteNode node{};
    abi::TfLiteRegistration reg{};
    abi::OwnedIntArray inputs, outputs;
    std::string custom_name, options;
    bool is_delegate_kernel = false;
    bool initialised = false;
    // A delegate kernel's init() argument and the arrays it points at.
    abi::TfLiteDelegateParams params{};
    abi::OwnedIntArray params_nodes, params_inputs, params_outputs;
  };

  static MiniRuntime* Self(const abi::TfLiteContext* context);
  abi::TfLiteStatus Replace(const abi::TfLiteRegistration& registration, const abi::TfLiteIntArray* nodes,
                            abi::TfLiteDelegate* delegate);
  abi::TfLiteStatus Resize(abi::TfLiteTensor* tensor, const std::vector<int>& dims);
  bool Fail(const std::string& message);

  // C ABI callbacks (TfLiteContext members).
  static abi::TfLiteStatus GetExecutionPlan(abi::TfLiteContext* context, abi::TfLiteIntArray** plan);
  static abi::TfLiteStatus GetNodeAndRegistration(abi::TfLiteContext* context, int index, abi::TfLiteNode** node,
                                                  abi::TfLiteRegistration** reg);
  static abi::TfLiteStatus ReplaceNodeSubsets(abi::TfLiteContext* context, abi::TfLiteRegistration registration,
                                              const abi::TfLiteIntArray* nodes, abi::TfLiteDelegate* delegate);
  static abi::TfLiteStatus ResizeTensor(abi::TfLiteContext* context, abi::TfLiteTensor* tensor,
                                        abi::TfLiteIntArray* new_size);
  static abi::TfLiteStatus ResizeTensorExplicit(abi::TfLiteContext* context, abi::TfLiteTensor* tensor, int dims,
                                                const int* shape);
  static abi::TfLiteStatus AddTensors(abi::TfLiteContext* context, int count, int* first);
  static void ReportError(abi::TfLiteContext* context, const char* format, ...);
  static abi::TfLiteTensor* GetTensor(const abi::TfLiteContext* context, int index);

  abi::TfLiteContext context_{};
  std::vector<abi::TfLiteTensor> tensors_;
  std::vector<abi::OwnedIntArray> dims_;
  std::vector<std::vector<float>> storage_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<int> plan_;
  abi::OwnedIntArray plan_array_;  // what GetExecutionPlan hands out
  std::string error_;
};

}  // namespace sdtest
