#include "abi/abi_check.h"

#include <string>

namespace sdgpu::abi {

namespace {
constexpr size_t kMaxReasonableTensors = size_t{1} << 26;
}  // namespace

bool CheckContextAbi(TfLiteContext* context, std::string* why) {
  if (context == nullptr) {
    *why = "null TfLiteContext";
    return false;
  }
  if (context->GetExecutionPlan == nullptr || context->GetNodeAndRegistration == nullptr ||
      context->ReplaceNodeSubsetsWithDelegateKernels == nullptr || context->ResizeTensor == nullptr) {
    *why = "TfLiteContext is missing required callbacks (ABI mismatch?)";
    return false;
  }
  if (context->tensors_size > kMaxReasonableTensors) {
    *why = "TfLiteContext.tensors_size is implausible (" + std::to_string(context->tensors_size) +
           "); ABI mismatch?";
    return false;
  }
  if (context->tensors_size > 0 && context->tensors == nullptr) {
    *why = "TfLiteContext.tensors is null with tensors_size > 0";
    return false;
  }
  if (context->GetTensor != nullptr && context->tensors_size > 0) {
    const int probes[2] = {0, static_cast<int>(context->tensors_size - 1)};
    for (int idx : probes) {
      if (context->GetTensor(context, idx) != &context->tensors[idx]) {
        *why = "GetTensor(" + std::to_string(idx) +
               ") != &tensors[idx]: TfLiteTensor size or TfLiteContext layout differs from this build";
        return false;
      }
    }
  }
  TfLiteIntArray* plan = nullptr;
  if (context->GetExecutionPlan(context, &plan) != kTfLiteOk || plan == nullptr || plan->size < 0) {
    *why = "GetExecutionPlan failed";
    return false;
  }
  for (int i = 0; i < plan->size; ++i) {
    TfLiteNode* node = nullptr;
    TfLiteRegistration* reg = nullptr;
    if (context->GetNodeAndRegistration(context, plan->data[i], &node, &reg) != kTfLiteOk || node == nullptr ||
        reg == nullptr) {
      *why = "GetNodeAndRegistration failed for node " + std::to_string(plan->data[i]);
      return false;
    }
    const TfLiteIntArray* lists[2] = {node->inputs, node->outputs};
    for (const TfLiteIntArray* list : lists) {
      if (list == nullptr) continue;
      if (list->size < 0 || list->size > 4096) {
        *why = "node " + std::to_string(plan->data[i]) + " has an implausible input/output count";
        return false;
      }
      for (int k = 0; k < list->size; ++k) {
        const int t = list->data[k];
        if (t != kTfLiteOptionalTensor && (t < 0 || static_cast<size_t>(t) >= context->tensors_size)) {
          *why = "node " + std::to_string(plan->data[i]) + " references tensor " + std::to_string(t) +
                 " out of range";
          return false;
        }
      }
    }
    if (reg->builtin_code == kTfLiteBuiltinCustom && reg->custom_name == nullptr) {
      *why = "custom node " + std::to_string(plan->data[i]) + " has no custom_name (ABI mismatch?)";
      return false;
    }
    if (node->custom_initial_data_size < 0) {
      *why = "node " + std::to_string(plan->data[i]) + " has a negative custom_initial_data_size";
      return false;
    }
  }
  return true;
}

}  // namespace sdgpu::abi
