// Layouts of the TFLite builtin-op parameter structs (node->builtin_data) and
// builtin operator codes the GPU ops read, declared from the public
// TFLite `builtin_op_data.h` / schema (we never include TFLite headers).
// Only leading fields are declared: we never read past them.
#pragma once

#include <cstdint>

#include "abi/tflite_abi.h"

namespace sdgpu::gpu {

enum BuiltinCode : int {
  kAdd = 0, kConcatenation = 2, kConv2D = 3, kDequantize = 6, kEmbeddingLookup = 7, kFullyConnected = 9,
  kLogistic = 14, kMul = 18, kRelu = 19, kReshape = 22, kSoftmax = 25, kTanh = 28, kCustom = 32, kPad = 34,
  kGather = 36, kTranspose = 39, kMean = 40, kSub = 41, kDiv = 42, kSqueeze = 43, kStridedSlice = 45, kExp = 47,
  kMaximum = 55, kMinimum = 57, kNeg = 59, kSlice = 65, kSin = 66, kExpandDims = 70, kLog = 73, kSum = 74,
  kSqrt = 75, kRsqrt = 76, kPow = 78, kReduceMax = 82, kSquare = 92, kResizeNearestNeighbor = 97,
  kSquaredDifference = 99, kAbs = 101, kCos = 108, kSelectV2 = 123, kBatchMatMul = 126, kBroadcastTo = 130,
  kGelu = 150,
};

enum Padding : int { kPaddingUnknown = 0, kPaddingSame = 1, kPaddingValid = 2 };

struct ActivationParams { int activation; };  // ADD/SUB/MUL/DIV: activation is the first field
struct ConvParams { int padding, stride_width, stride_height, activation, dilation_width, dilation_height; };
struct FullyConnectedParams { int activation; int weights_format; bool keep_num_dims; };
struct BatchMatMulParams { bool adj_x; bool adj_y; };
struct SoftmaxParams { float beta; };
struct ConcatenationParams { int axis; int activation; };
struct ReducerParams { bool keep_dims; };
struct ResizeNearestParams { bool align_corners; bool half_pixel_centers; };
struct GeluParams { bool approximate; };
struct GatherParams { int axis; int batch_dims; };
struct StridedSliceParams { int begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask; bool offset; };

// TfLiteAffineQuantization (quantization.type == 1).
struct FloatArray { int size; float data[]; };
struct AffineQuantization { FloatArray* scale; abi::TfLiteIntArray* zero_point; int32_t quantized_dimension; };

}  // namespace sdgpu::gpu
