// Small, checked accessors over the TFLite context/graph used by the
// partitioner and the partition kernel. Everything that dereferences runtime
// structures goes through here so index and null checks live in one place.
#pragma once

#include <string>
#include <vector>

#include "abi/tflite_abi.h"
#include "common/status.h"
#include "ops/tensor_info.h"

namespace sdgpu {

// Tensor `index` of the context, or an error when out of range / optional.
Status GetTensor(abi::TfLiteContext* context, int index, abi::TfLiteTensor** out);

// type + dims of a tensor (dims must be present).
Status GetTensorInfo(abi::TfLiteContext* context, int index, TensorInfo* out);

// Resizes `index` to `dims` if its current dims differ.
Status ResizeIfNeeded(abi::TfLiteContext* context, int index, const Dims& dims);

// Number of partitions TFLite would make of `nodes` (-1 if it cannot say), or an error when one of them would
// read or write a tensor that does not exist (a malformed model listing -1 as a graph output): such a partition
// could never be prepared, and declining it here keeps the runtime out of its delegate-failure path.
Status PreviewPartitions(abi::TfLiteContext* context, abi::TfLiteIntArray* nodes, int* partitions);

// Reports `message` through the context's error reporter (safe format).
void ReportToContext(abi::TfLiteContext* context, const std::string& message);

}  // namespace sdgpu
