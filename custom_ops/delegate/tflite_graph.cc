#include "delegate/tflite_graph.h"

#include "abi/int_array.h"

namespace sdgpu {

Status GetTensor(abi::TfLiteContext* context, int index, abi::TfLiteTensor** out) {
  if (index < 0 || static_cast<size_t>(index) >= context->tensors_size) {
    return Status::Error(index == abi::kTfLiteOptionalTensor ? "optional (missing) tensor input is not supported"
                                                             : "tensor index " + std::to_string(index) +
                                                                   " out of range");
  }
  *out = &context->tensors[index];
  return Status::Ok();
}

Status GetTensorInfo(abi::TfLiteContext* context, int index, TensorInfo* out) {
  abi::TfLiteTensor* t = nullptr;
  SDGPU_RETURN_IF_ERROR(GetTensor(context, index, &t));
  if (t->dims == nullptr || t->dims->size < 0 || t->dims->size > 16) {
    return Status::Error("tensor " + std::to_string(index) + " has no valid dims");
  }
  out->type = t->type;
  out->dims.assign(t->dims->data, t->dims->data + t->dims->size);
  return Status::Ok();
}

Status ResizeIfNeeded(abi::TfLiteContext* context, int index, const Dims& dims) {
  abi::TfLiteTensor* t = nullptr;
  SDGPU_RETURN_IF_ERROR(GetTensor(context, index, &t));
  bool same = t->dims != nullptr && t->dims->size == static_cast<int>(dims.size());
  for (size_t i = 0; same && i < dims.size(); ++i) same = t->dims->data[i] == dims[i];
  if (same) return Status::Ok();
  std::vector<int> shape;
  for (int64_t d : dims) {
    if (d < 0 || d > INT32_MAX) return Status::Error("output dimension out of int32 range");
    shape.push_back(static_cast<int>(d));
  }
  abi::TfLiteStatus st;
  if (context->ResizeTensorExplicit != nullptr) {
    // Copies the shape internally: no ownership transfer.
    st = context->ResizeTensorExplicit(context, t, static_cast<int>(shape.size()), shape.data());
  } else {
    abi::OwnedIntArray arr;
    if (!arr.Assign(shape)) return Status::Error("out of memory");
    st = context->ResizeTensor(context, t, arr.release());  // takes ownership
  }
  if (st != abi::kTfLiteOk) return Status::Error("ResizeTensor failed for tensor " + std::to_string(index));
  return Status::Ok();
}

Status PreviewPartitions(abi::TfLiteContext* context, abi::TfLiteIntArray* nodes, int* partitions) {
  *partitions = 0;
  abi::TfLiteDelegateParams* params = nullptr;
  if (context->PreviewDelegatePartitioning == nullptr ||
      context->PreviewDelegatePartitioning(context, nodes, &params, partitions) != abi::kTfLiteOk) {
    *partitions = -1;
    return Status::Ok();
  }
  for (int p = 0; p < *partitions && params != nullptr; ++p) {
    for (const abi::TfLiteIntArray* list : {params[p].input_tensors, params[p].output_tensors}) {
      for (int t : abi::IntArrayToVector(list)) {
        if (t < 0 || static_cast<size_t>(t) >= context->tensors_size) {
          return Status::Error("a delegated partition would read or write tensor " + std::to_string(t) +
                               ", which does not exist (a graph input or output listed as " + std::to_string(t) +
                               "?); the model is malformed");
        }
      }
    }
  }
  return Status::Ok();
}

void ReportToContext(abi::TfLiteContext* context, const std::string& message) {
  if (context != nullptr && context->ReportError != nullptr) {
    context->ReportError(context, "%s", ("sdgpu: " + message).c_str());
  }
}

}  // namespace sdgpu
