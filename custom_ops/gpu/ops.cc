// The op factory: maps a node to its GpuOp (gpu/op_factories.h) or to the
// one-line reason it cannot run on the device.
#include "gpu/ops.h"

#include "gpu/builtin_params.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

int ActivationOf(const NodeDesc& node) {
  const auto* p = static_cast<const ActivationParams*>(node.builtin_data);
  return p != nullptr ? p->activation : 0;
}

// activations_fp16: whether the node's op reads and writes its float tensors through the kernels' ACT_* macros
// (gpu/dialect/README.md, "Activation storage"); the others run on the CPU while the option is on.
bool ActHalfReady(const NodeDesc& node) {
  if (node.builtin_code == kCustom) {
    if (node.sd_op == nullptr) return false;
    switch (node.sd_op->def->kind) {
      // ops/attention, ops/group_norm and ops/gelu (gated; the plain form launches unary_f32 of
      // gpu/kernels/elementwise.kern, converted with the elementwise builtins)
      case OpKind::kAttention:
      case OpKind::kGroupNorm:
      case OpKind::kGelu:
      // ops/conv2d_winograd: the transforms, the tiled GEMM between them (gpu/kernels/gemm_tiled.kern)
      case OpKind::kConv2DWinograd:
        return true;
      default:
        return false;
    }
  }
  switch (node.builtin_code) {
    // elementwise (gpu/kernels/elementwise.kern)
    case kAdd: case kSub: case kMul: case kDiv: case kSquaredDifference: case kMaximum: case kMinimum: case kPow:
    case kLogistic: case kRsqrt: case kSin: case kCos: case kExp: case kLog: case kSqrt: case kNeg: case kAbs:
    case kTanh: case kSquare: case kRelu: case kGelu: case kSelectV2:
    // layout (gpu/kernels/copy.kern: the _act twins for float tensors)
    case kReshape: case kSqueeze: case kExpandDims: case kTranspose: case kBroadcastTo: case kSlice:
    case kStridedSlice: case kPad: case kConcatenation: case kGather: case kEmbeddingLookup:
    case kResizeNearestNeighbor:
    // reductions (gpu/kernels/reduce.kern)
    case kMean: case kSum: case kReduceMax: case kSoftmax:
    // sd_ops.cc: dequant_f16 and, for a constant, unary_f32's copy (gpu/kernels/elementwise.kern)
    case kDequantize:
    // the GEMM family (gemm.kern, gemm_tiled.kern)
    case kFullyConnected:
    case kBatchMatMul:
    case kConv2D:
      return true;
    default:
      return false;
  }
}

}  // namespace

void AddResidualArgs(const Residual& r, const TensorRef& input, const TensorRef& placeholder, Args* args) {
  const TensorRef& ref = r.rows > 0 ? input : placeholder;
  args->Buf(ref).Int(r.rows).Int(r.row_stride);
}

std::string BuiltinName(int code) {
  switch (code) {
#define N(c, s) \
  case c:       \
    return s;
    N(kAdd, "ADD") N(kConcatenation, "CONCATENATION") N(kConv2D, "CONV_2D") N(kDequantize, "DEQUANTIZE")
    N(kEmbeddingLookup, "EMBEDDING_LOOKUP") N(kFullyConnected, "FULLY_CONNECTED") N(kLogistic, "LOGISTIC")
    N(kMul, "MUL") N(kRelu, "RELU") N(kReshape, "RESHAPE") N(kSoftmax, "SOFTMAX") N(kTanh, "TANH") N(kPad, "PAD")
    N(kGather, "GATHER") N(kTranspose, "TRANSPOSE") N(kMean, "MEAN") N(kSub, "SUB") N(kDiv, "DIV")
    N(kSqueeze, "SQUEEZE") N(kStridedSlice, "STRIDED_SLICE") N(kExp, "EXP") N(kMaximum, "MAXIMUM")
    N(kMinimum, "MINIMUM") N(kNeg, "NEG") N(kSlice, "SLICE") N(kSin, "SIN") N(kExpandDims, "EXPAND_DIMS")
    N(kLog, "LOG") N(kSum, "SUM") N(kSqrt, "SQRT") N(kRsqrt, "RSQRT") N(kPow, "POW") N(kReduceMax, "REDUCE_MAX")
    N(kSquare, "SQUARE") N(kResizeNearestNeighbor, "RESIZE_NEAREST_NEIGHBOR")
    N(kSquaredDifference, "SQUARED_DIFFERENCE") N(kAbs, "ABS") N(kCos, "COS") N(kSelectV2, "SELECT_V2")
    N(kBatchMatMul, "BATCH_MATMUL") N(kBroadcastTo, "BROADCAST_TO") N(kGelu, "GELU")
#undef N
    default:
      return "BUILTIN_" + std::to_string(code);
  }
}

Status CreateGpuOp(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  if (node.act_half && !ActHalfReady(node)) {
    return Status::Error("activations_fp16: its kernels keep float32 storage");
  }
  if (node.builtin_code == kCustom) {
    if (node.sd_op == nullptr) return Status::Error("custom op is not one of the Sd* ops");
    return MakeSdOp(dev, node, out);
  }
  SDGPU_RETURN_IF_ERROR(Need(node.outputs.size() == 1, "multiple outputs are not supported"));
  SDGPU_RETURN_IF_ERROR(Need(!node.inputs.empty() && node.inputs[0] != nullptr, "missing input"));
  const int64_t n = NumElements(DimsOf(node.outputs[0]));
  // Operation codes of unary_f32 / binary_f32 (sd_unary / sd_binary in the elementwise kernels).
  auto unary = [&](int op) -> Status {
    SDGPU_RETURN_IF_ERROR(Need(node.inputs[0]->type == abi::kTfLiteFloat32, "only float32"));
    SDGPU_RETURN_IF_ERROR(Need(NumElements(DimsOf(node.inputs[0])) == n, "shape mismatch"));
    return MakeUnary(dev, op, n, out);
  };
  switch (node.builtin_code) {
    case kAdd: return MakeBinary(dev, node, 0, ActivationOf(node), out);
    case kSub: return MakeBinary(dev, node, 1, ActivationOf(node), out);
    case kMul: return MakeBinary(dev, node, 2, ActivationOf(node), out);
    case kDiv: return MakeBinary(dev, node, 3, ActivationOf(node), out);
    case kSquaredDifference: return MakeBinary(dev, node, 4, 0, out);
    case kMaximum: return MakeBinary(dev, node, 5, 0, out);
    case kMinimum: return MakeBinary(dev, node, 6, 0, out);
    case kPow: return MakeBinary(dev, node, 7, 0, out);
    case kLogistic: return unary(1);
    case kRsqrt: return unary(2);
    case kSin: return unary(3);
    case kCos: return unary(4);
    case kExp: return unary(5);
    case kLog: return unary(6);
    case kSqrt: return unary(7);
    case kNeg: return unary(8);
    case kAbs: return unary(9);
    case kTanh: return unary(10);
    case kSquare: return unary(11);
    case kRelu: return unary(15);
    case kGelu: {
      const auto* p = static_cast<const GeluParams*>(node.builtin_data);
      return unary(p != nullptr && p->approximate ? 13 : 12);
    }
    case kSelectV2: return MakeSelect(dev, node, out);
    case kReshape:
    case kSqueeze:
    case kExpandDims: return MakeReshape(dev, node, out);
    case kTranspose: return MakeTranspose(dev, node, out);
    case kBroadcastTo: return MakeBroadcastTo(dev, node, out);
    case kSlice: return MakeSlice(dev, node, false, out);
    case kStridedSlice: return MakeSlice(dev, node, true, out);
    case kPad: return MakePad(dev, node, out);
    case kConcatenation: return MakeConcat(dev, node, out);
    case kGather: {
      const auto* p = static_cast<const GatherParams*>(node.builtin_data);
      SDGPU_RETURN_IF_ERROR(Need(p != nullptr && p->batch_dims == 0, "batch_dims != 0"));
      return MakeGather(dev, node, 0, p->axis, out);
    }
    case kEmbeddingLookup: return MakeGather(dev, node, 1, 0, out);
    case kResizeNearestNeighbor: return MakeResizeNearest(dev, node, out);
    case kMean: return MakeReduce(dev, node, 0, out);
    case kSum: return MakeReduce(dev, node, 1, out);
    case kReduceMax: return MakeReduce(dev, node, 2, out);
    case kSoftmax: return MakeSoftmax(dev, node, out);
    case kFullyConnected: return MakeFullyConnected(dev, node, out);
    case kBatchMatMul: return MakeBatchMatMul(dev, node, out);
    case kConv2D: return MakeConv2D(dev, node, out);
    case kDequantize: return MakeDequantize(dev, node, out);
    default:
      return Status::Error(std::string("op not implemented by the ") + dev.backend_name() + " backend");
  }
}

}  // namespace sdgpu::gpu
