// Per-role op constructors behind CreateGpuOp (gpu/ops.cc). Each validates its
// node and returns a one-line reason when the node cannot run on the device.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "gpu/attention_tiling.h"
#include "gpu/ops.h"
#include "ops/attention/attrs.h"
#include "ops/gelu/attrs.h"
#include "ops/group_norm/attrs.h"

namespace sdgpu::gpu {

// elementwise_ops.cc. `op` is the kernel's operation code (sd_unary / sd_binary in elementwise.cl).
Status MakeUnary(const Device& dev, int op, int64_t n, std::unique_ptr<GpuOp>* out);
Status MakeBinary(const Device& dev, const NodeDesc& node, int op, int act, std::unique_ptr<GpuOp>* out);
// f(a * b) of a MUL node (no fused activation) with a constant operand, f the unary_f32 op `op`: the MUL -> SIN / COS
// fold of GpuPartition (mul_unary_f32).
Status MakeMulUnary(const Device& dev, const NodeDesc& mul, int op, std::unique_ptr<GpuOp>* out);
Status MakeSelect(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);

// copy_ops.cc: layout ops (one strided N-d copy each) and index maps.
Status MakeReshape(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
Status MakeTranspose(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
Status MakeBroadcastTo(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
Status MakeSlice(const Device& dev, const NodeDesc& node, bool strided, std::unique_ptr<GpuOp>* out);
Status MakePad(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
Status MakeConcat(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
// params_input: 0 for GATHER (params, indices), 1 for EMBEDDING_LOOKUP (indices, params).
Status MakeGather(const Device& dev, const NodeDesc& node, int params_input, int axis, std::unique_ptr<GpuOp>* out);
Status MakeResizeNearest(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);

// reduce_ops.cc. mode 0 = mean, 1 = sum, 2 = max.
Status MakeReduce(const Device& dev, const NodeDesc& node, int mode, std::unique_ptr<GpuOp>* out);
Status MakeSoftmax(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);

// matmul_ops.cc (plans: tile_planner.cc; packed weights: packed_weights.cc)
Status MakeFullyConnected(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
Status MakeBatchMatMul(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
Status MakeConv2D(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);

// The Sd* fused ops' GPU host code, next to each op's kernels (ops/<op>/gpu.cc) and dispatched by MakeSdOp (sd_ops.cc).
// ops/gelu/gpu.cc: the gated SdGelu (x [..., 2F], mode = GeluKernelCode).
Status MakeSdGeluGated(const Device& dev, int mode, const Dims& x, std::unique_ptr<GpuOp>* out);
// ops/group_norm/gpu.cc
Status MakeSdGroupNorm(const Device& dev, const GroupNormAttrs& attrs, const Dims& x, std::unique_ptr<GpuOp>* out);
// ops/attention/gpu.cc: q [N, Sq, H*D], k [N, Sk, H*D]; key_splits: the delegate option attention_key_splits.
Status MakeSdAttention(const Device& dev, const AttentionAttrs& attrs, const Dims& q, const Dims& k, int key_splits,
                       std::unique_ptr<GpuOp>* out);

// sd_ops.cc (GeluKernelCode: ops/gelu/gpu.cc; IsAttentionTilingName: ops/attention/gpu.cc)
// The GPU kernels' code for an SdGelu's GELU form (the unary_f32 op, gelu_gated_f32's mode and the act of the GEMMs'
// gated-GELU epilogue): kGeluKernelErf (12) erf, 13 tanh, 14 quick (SD_GELU_OP_* in ops/gelu/gpu.kern).
constexpr int kGeluKernelErf = 12;
int GeluKernelCode(const GeluAttrs& attrs);
Status MakeDequantize(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
// The float32 values of the constant fp16 / int8 / uint8 tensor `in` (n elements; int8 / uint8 with its affine
// per-tensor or per-channel scales and zero points) into v[0 .. n); v == nullptr only checks that it can.
Status DequantizeConstant(const abi::TfLiteTensor* in, int64_t n, float* v);
Status MakeSdOp(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);
// Whether `name` is a value of the delegate option attention_tiling: a suffix of kAttnTilings or of `vendor` (the
// backends' own tilings), "legacy", "short" or "short<BQ>" (checked when the options are parsed, so a typo is an error
// instead of the per-shape rule).
bool IsAttentionTilingName(const std::string& name, const std::vector<AttnTiling>& vendor);

}  // namespace sdgpu::gpu
