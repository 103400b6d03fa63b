// Our own declarations of the subset of the TensorFlow Lite 2.x C ABI that the
// delegate touches. Written from the public `common.h` / `c_api_types.h` layout
// (LiteRT / ai-edge-litert 2.x). We never include TFLite headers and never link
// against TFLite: the runtime hands us pointers, and these declarations only
// describe the memory layout behind them.
//
// Rules:
//   * Field ORDER and SIZES must match the runtime exactly. New fields in
//     upstream are only ever appended, so the structs below stop at the last
//     field we know; we only ever read fields, except for TfLiteDelegate (which
//     we allocate) and TfLiteRegistration (which we pass by value).
//   * The static_asserts at the end pin the LP64 layout we rely on; a runtime
//     sanity check (abi_check.h) verifies the pieces that can be probed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sdgpu::abi {

// ---- enums ----------------------------------------------------------------

enum TfLiteStatus : int {
  kTfLiteOk = 0,
  kTfLiteError = 1,
  kTfLiteDelegateError = 2,
  kTfLiteApplicationError = 3,
  kTfLiteDelegateDataNotFound = 4,
  kTfLiteDelegateDataWriteError = 5,
  kTfLiteDelegateDataReadError = 6,
  kTfLiteUnresolvedOps = 7,
  kTfLiteCancelled = 8,
};

enum TfLiteType : int {
  kTfLiteNoType = 0,
  kTfLiteFloat32 = 1,
  kTfLiteInt32 = 2,
  kTfLiteUInt8 = 3,
  kTfLiteInt64 = 4,
  kTfLiteString = 5,
  kTfLiteBool = 6,
  kTfLiteInt16 = 7,
  kTfLiteComplex64 = 8,
  kTfLiteInt8 = 9,
  kTfLiteFloat16 = 10,
  kTfLiteFloat64 = 11,
};

enum TfLiteAllocationType : int {
  kTfLiteMemNone = 0,
  kTfLiteMmapRo = 1,
  kTfLiteArenaRw = 2,
  kTfLiteArenaRwPersistent = 3,
  kTfLiteDynamic = 4,
  kTfLitePersistentRo = 5,
  kTfLiteCustom = 6,
  kTfLiteVariantObject = 7,
};

enum TfLiteDelegateFlags : int64_t {
  kTfLiteDelegateFlagsNone = 0,
  kTfLiteDelegateFlagsAllowDynamicTensors = 1,
  kTfLiteDelegateFlagsRequirePropagatedShapes = 2,
  kTfLiteDelegateFlagsPerOperatorProfiling = 4,
};

// Builtin operator codes (schema.fbs BuiltinOperator) that we refer to.
enum TfLiteBuiltinOperator : int32_t {
  kTfLiteBuiltinAdd = 0,
  kTfLiteBuiltinCustom = 32,
  kTfLiteBuiltinDelegate = 51,
};

typedef int TfLiteBufferHandle;
constexpr int kTfLiteNullBufferHandle = -1;
constexpr int kTfLiteOptionalTensor = -1;

// ---- plain data -----------------------------------------------------------

struct TfLiteIntArray {
  int size;
  int data[];  // flexible array member (GNU extension in C++, as upstream)
};

struct TfLiteQuantizationParams {
  float scale;
  int32_t zero_point;
};

struct TfLiteQuantization {
  int type;  // TfLiteQuantizationType
  void* params;
};

union TfLitePtrUnion {
  int32_t* i32;
  int64_t* i64;
  float* f;
  char* raw;
  const char* raw_const;
  uint8_t* uint8;
  void* data;
};

struct TfLiteDelegate;
struct TfLiteContext;
struct TfLiteRegistration;

struct TfLiteTensor {
  TfLiteType type;
  TfLitePtrUnion data;
  TfLiteIntArray* dims;
  TfLiteQuantizationParams params;
  TfLiteAllocationType allocation_type;
  size_t bytes;
  const void* allocation;
  const char* name;
  TfLiteDelegate* delegate;
  TfLiteBufferHandle buffer_handle;
  bool data_is_stale;
  bool is_variable;
  TfLiteQuantization quantization;
  void* sparsity;  // TfLiteSparsity*
  const TfLiteIntArray* dims_signature;
};

struct TfLiteNode {
  TfLiteIntArray* inputs;
  TfLiteIntArray* outputs;
  TfLiteIntArray* intermediates;
  TfLiteIntArray* temporaries;
  void* user_data;
  void* builtin_data;
  const void* custom_initial_data;
  int custom_initial_data_size;
  TfLiteDelegate* delegate;
  bool might_have_side_effect;
};

struct TfLiteDelegateParams {
  TfLiteDelegate* delegate;
  TfLiteIntArray* nodes_to_replace;
  TfLiteIntArray* input_tensors;
  TfLiteIntArray* output_tensors;
};

// ---- callbacks --------------------------------------------------------------

struct TfLiteRegistration {
  void* (*init)(TfLiteContext* context, const char* buffer, size_t length);
  void (*free)(TfLiteContext* context, void* buffer);
  TfLiteStatus (*prepare)(TfLiteContext* context, TfLiteNode* node);
  TfLiteStatus (*invoke)(TfLiteContext* context, TfLiteNode* node);
  const char* (*profiling_string)(const TfLiteContext* context, const TfLiteNode* node);
  int32_t builtin_code;
  const char* custom_name;
  int version;
  void* registration_external;  // TfLiteOperator*
  void* (*async_kernel)(TfLiteContext* context, TfLiteNode* node);
  uint64_t inplace_operator;
};

struct TfLiteContext {
  size_t tensors_size;
  TfLiteStatus (*GetExecutionPlan)(TfLiteContext* context, TfLiteIntArray** execution_plan);
  TfLiteTensor* tensors;
  void* impl_;
  TfLiteStatus (*ResizeTensor)(TfLiteContext*, TfLiteTensor* tensor, TfLiteIntArray* new_size);
  void (*ReportError)(TfLiteContext*, const char* msg, ...);
  TfLiteStatus (*AddTensors)(TfLiteContext*, int tensors_to_add, int* first_new_tensor_index);
  TfLiteStatus (*GetNodeAndRegistration)(TfLiteContext*, int node_index, TfLiteNode** node,
                                         TfLiteRegistration** registration);
  TfLiteStatus (*ReplaceNodeSubsetsWithDelegateKernels)(TfLiteContext*, TfLiteRegistration registration,
                                                        const TfLiteIntArray* nodes_to_replace,
                                                        TfLiteDelegate* delegate);
  int recommended_num_threads;
  void* (*GetExternalContext)(TfLiteContext*, int type);
  void (*SetExternalContext)(TfLiteContext*, int type, void* external_context);
  bool allow_fp32_relax_to_fp16;
  void* profiler;
  void* (*AllocatePersistentBuffer)(TfLiteContext* ctx, size_t bytes);
  TfLiteStatus (*AllocateBufferForEval)(TfLiteContext* ctx, size_t bytes, void** ptr);
  TfLiteStatus (*RequestScratchBufferInArena)(TfLiteContext* ctx, size_t bytes, int* buffer_idx);
  void* (*GetScratchBuffer)(TfLiteContext* ctx, int buffer_idx);
  TfLiteStatus (*ResizeTensorExplicit)(TfLiteContext* ctx, TfLiteTensor* tensor, int dims, const int* shape);
  TfLiteStatus (*PreviewDelegatePartitioning)(TfLiteContext* context, const TfLiteIntArray* nodes_to_replace,
                                              TfLiteDelegateParams** partition_params_array,
                                              int* num_partitions);
  TfLiteTensor* (*GetTensor)(const TfLiteContext* context, int tensor_idx);
  // Later fields (GetEvalTensor, GetModelMetadata, Acquire/ReleaseSubgraphContext)
  // are never touched by us, so they are not declared.
};

struct TfLiteDelegate {
  void* data_;
  TfLiteStatus (*Prepare)(TfLiteContext* context, TfLiteDelegate* delegate);
  TfLiteStatus (*CopyFromBufferHandle)(TfLiteContext* context, TfLiteDelegate* delegate,
                                       TfLiteBufferHandle buffer_handle, TfLiteTensor* tensor);
  TfLiteStatus (*CopyToBufferHandle)(TfLiteContext* context, TfLiteDelegate* delegate,
                                     TfLiteBufferHandle buffer_handle, TfLiteTensor* tensor);
  void (*FreeBufferHandle)(TfLiteContext* context, TfLiteDelegate* delegate, TfLiteBufferHandle* handle);
  int64_t flags;
  void* opaque_delegate_builder;  // must stay null: we use the non-opaque path
};

// ---- layout pins (LP64: Linux/macOS x86-64, Linux/Android aarch64) ------------
// Every field's offset as in upstream common.h on these targets (AAPCS64 and the SysV x86-64 ABI lay these structs
// out identically). Both CI builds compile them: x86-64, and the aarch64 cross-builds (Bazel --config=aarch64, CMake
// cmake/aarch64-linux-gnu.cmake). An ILP32 target (arm64_32, aarch64 -mabi=ilp32, 32-bit Arm) fails the first one.

static_assert(sizeof(void*) == 8 && sizeof(size_t) == 8, "sdgpu delegate supports LP64 targets only");
static_assert(sizeof(int) == 4 && sizeof(bool) == 1 && alignof(int64_t) == 8, "LP64 scalar sizes");
static_assert(sizeof(TfLiteType) == 4 && sizeof(TfLiteStatus) == 4 && sizeof(TfLiteAllocationType) == 4,
              "C enums are int-sized");
static_assert(sizeof(TfLiteIntArray) == sizeof(int) && offsetof(TfLiteIntArray, data) == 4, "TfLiteIntArray header");
static_assert(sizeof(TfLiteQuantizationParams) == 8, "TfLiteQuantizationParams");
static_assert(sizeof(TfLiteQuantization) == 16 && offsetof(TfLiteQuantization, params) == 8, "TfLiteQuantization");
static_assert(sizeof(TfLitePtrUnion) == 8, "TfLitePtrUnion");

static_assert(offsetof(TfLiteTensor, type) == 0, "TfLiteTensor.type");
static_assert(offsetof(TfLiteTensor, data) == 8, "TfLiteTensor.data");
static_assert(offsetof(TfLiteTensor, dims) == 16, "TfLiteTensor.dims");
static_assert(offsetof(TfLiteTensor, params) == 24, "TfLiteTensor.params");
static_assert(offsetof(TfLiteTensor, allocation_type) == 32, "TfLiteTensor.allocation_type");
static_assert(offsetof(TfLiteTensor, bytes) == 40, "TfLiteTensor.bytes");
static_assert(offsetof(TfLiteTensor, allocation) == 48, "TfLiteTensor.allocation");
static_assert(offsetof(TfLiteTensor, name) == 56, "TfLiteTensor.name");
static_assert(offsetof(TfLiteTensor, delegate) == 64, "TfLiteTensor.delegate");
static_assert(offsetof(TfLiteTensor, buffer_handle) == 72, "TfLiteTensor.buffer_handle");
static_assert(offsetof(TfLiteTensor, data_is_stale) == 76, "TfLiteTensor.data_is_stale");
static_assert(offsetof(TfLiteTensor, is_variable) == 77, "TfLiteTensor.is_variable");
static_assert(offsetof(TfLiteTensor, quantization) == 80, "TfLiteTensor.quantization");
static_assert(offsetof(TfLiteTensor, sparsity) == 96, "TfLiteTensor.sparsity");
static_assert(offsetof(TfLiteTensor, dims_signature) == 104, "TfLiteTensor.dims_signature");
static_assert(sizeof(TfLiteTensor) == 112, "TfLiteTensor size (tensors[] stride)");

static_assert(offsetof(TfLiteNode, inputs) == 0, "TfLiteNode.inputs");
static_assert(offsetof(TfLiteNode, outputs) == 8, "TfLiteNode.outputs");
static_assert(offsetof(TfLiteNode, intermediates) == 16, "TfLiteNode.intermediates");
static_assert(offsetof(TfLiteNode, temporaries) == 24, "TfLiteNode.temporaries");
static_assert(offsetof(TfLiteNode, user_data) == 32, "TfLiteNode.user_data");
static_assert(offsetof(TfLiteNode, builtin_data) == 40, "TfLiteNode.builtin_data");
static_assert(offsetof(TfLiteNode, custom_initial_data) == 48, "TfLiteNode.custom_initial_data");
static_assert(offsetof(TfLiteNode, custom_initial_data_size) == 56, "TfLiteNode.custom_initial_data_size");
static_assert(offsetof(TfLiteNode, delegate) == 64, "TfLiteNode.delegate");
static_assert(offsetof(TfLiteNode, might_have_side_effect) == 72, "TfLiteNode.might_have_side_effect");
static_assert(sizeof(TfLiteNode) == 80, "TfLiteNode size");

static_assert(offsetof(TfLiteDelegateParams, nodes_to_replace) == 8, "TfLiteDelegateParams.nodes_to_replace");
static_assert(offsetof(TfLiteDelegateParams, input_tensors) == 16, "TfLiteDelegateParams.input_tensors");
static_assert(offsetof(TfLiteDelegateParams, output_tensors) == 24, "TfLiteDelegateParams.output_tensors");
static_assert(sizeof(TfLiteDelegateParams) == 32, "TfLiteDelegateParams size");

static_assert(offsetof(TfLiteRegistration, init) == 0, "TfLiteRegistration.init");
static_assert(offsetof(TfLiteRegistration, free) == 8, "TfLiteRegistration.free");
static_assert(offsetof(TfLiteRegistration, prepare) == 16, "TfLiteRegistration.prepare");
static_assert(offsetof(TfLiteRegistration, invoke) == 24, "TfLiteRegistration.invoke");
static_assert(offsetof(TfLiteRegistration, profiling_string) == 32, "TfLiteRegistration.profiling_string");
static_assert(offsetof(TfLiteRegistration, builtin_code) == 40, "TfLiteRegistration.builtin_code");
static_assert(offsetof(TfLiteRegistration, custom_name) == 48, "TfLiteRegistration.custom_name");
static_assert(offsetof(TfLiteRegistration, version) == 56, "TfLiteRegistration.version");
static_assert(offsetof(TfLiteRegistration, registration_external) == 64, "TfLiteRegistration.registration_external");
static_assert(offsetof(TfLiteRegistration, async_kernel) == 72, "TfLiteRegistration.async_kernel");
static_assert(offsetof(TfLiteRegistration, inplace_operator) == 80, "TfLiteRegistration.inplace_operator");
static_assert(sizeof(TfLiteRegistration) == 88, "TfLiteRegistration size (passed by value!)");

static_assert(offsetof(TfLiteContext, tensors_size) == 0, "TfLiteContext.tensors_size");
static_assert(offsetof(TfLiteContext, GetExecutionPlan) == 8, "TfLiteContext.GetExecutionPlan");
static_assert(offsetof(TfLiteContext, tensors) == 16, "TfLiteContext.tensors");
static_assert(offsetof(TfLiteContext, impl_) == 24, "TfLiteContext.impl_");
static_assert(offsetof(TfLiteContext, ResizeTensor) == 32, "TfLiteContext.ResizeTensor");
static_assert(offsetof(TfLiteContext, ReportError) == 40, "TfLiteContext.ReportError");
static_assert(offsetof(TfLiteContext, AddTensors) == 48, "TfLiteContext.AddTensors");
static_assert(offsetof(TfLiteContext, GetNodeAndRegistration) == 56, "TfLiteContext.GetNodeAndRegistration");
static_assert(offsetof(TfLiteContext, ReplaceNodeSubsetsWithDelegateKernels) == 64,
              "TfLiteContext.ReplaceNodeSubsetsWithDelegateKernels");
static_assert(offsetof(TfLiteContext, recommended_num_threads) == 72, "TfLiteContext.recommended_num_threads");
static_assert(offsetof(TfLiteContext, GetExternalContext) == 80, "TfLiteContext.GetExternalContext");
static_assert(offsetof(TfLiteContext, SetExternalContext) == 88, "TfLiteContext.SetExternalContext");
static_assert(offsetof(TfLiteContext, allow_fp32_relax_to_fp16) == 96, "TfLiteContext.allow_fp32_relax_to_fp16");
static_assert(offsetof(TfLiteContext, profiler) == 104, "TfLiteContext.profiler");
static_assert(offsetof(TfLiteContext, AllocatePersistentBuffer) == 112, "TfLiteContext.AllocatePersistentBuffer");
static_assert(offsetof(TfLiteContext, AllocateBufferForEval) == 120, "TfLiteContext.AllocateBufferForEval");
static_assert(offsetof(TfLiteContext, RequestScratchBufferInArena) == 128, "TfLiteContext.RequestScratchBufferInArena");
static_assert(offsetof(TfLiteContext, GetScratchBuffer) == 136, "TfLiteContext.GetScratchBuffer");
static_assert(offsetof(TfLiteContext, ResizeTensorExplicit) == 144, "TfLiteContext.ResizeTensorExplicit");
static_assert(offsetof(TfLiteContext, PreviewDelegatePartitioning) == 152, "TfLiteContext.PreviewDelegatePartitioning");
static_assert(offsetof(TfLiteContext, GetTensor) == 160, "TfLiteContext.GetTensor");

static_assert(offsetof(TfLiteDelegate, data_) == 0, "TfLiteDelegate.data_");
static_assert(offsetof(TfLiteDelegate, Prepare) == 8, "TfLiteDelegate.Prepare");
static_assert(offsetof(TfLiteDelegate, CopyFromBufferHandle) == 16, "TfLiteDelegate.CopyFromBufferHandle");
static_assert(offsetof(TfLiteDelegate, CopyToBufferHandle) == 24, "TfLiteDelegate.CopyToBufferHandle");
static_assert(offsetof(TfLiteDelegate, FreeBufferHandle) == 32, "TfLiteDelegate.FreeBufferHandle");
static_assert(offsetof(TfLiteDelegate, flags) == 40, "TfLiteDelegate.flags");
static_assert(offsetof(TfLiteDelegate, opaque_delegate_builder) == 48, "TfLiteDelegate.opaque_delegate_builder");
static_assert(sizeof(TfLiteDelegate) == 56, "TfLiteDelegate size");

}  // namespace sdgpu::abi
