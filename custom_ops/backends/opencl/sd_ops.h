// OpenCL ops shared between builtin and Sd* nodes: the tiled GEMM, the
// implicit-GEMM convolution, DEQUANTIZE, and the Sd* fused ops.
#pragma once

#include <memory>
#include <vector>

#include "backends/opencl/cl_ops.h"

namespace sdgpu::ocl {

// C[b, m, n] = act(alpha * A[b] B[b] + bias) with explicit element strides.
struct GemmShape {
  int M = 0, N = 0, K = 0, batch = 1;
  int sab = 0, sam = 0, sak = 1;
  int sbb = 0, sbk = 0, sbn = 1;
  int scb = 0, scm = 0;
  int a_input = 0, b_input = 1, bias_input = -1;  // indices into the node inputs
  float alpha = 1.0f;
  int act = 0;  // TFLite fused activation code
};

class GemmOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const GemmShape& s, std::vector<int> inputs, std::unique_ptr<ClOp>* out);
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out,
                 const ClTensorRef& scratch, ClEventHandle* ev) override;

 private:
  GemmShape s_;
  ClKernelHandle k_;
};

// NHWC conv, OHWI filter, inputs (x, filter[, bias]).
struct ConvShape {
  int n = 0, h = 0, w = 0, ci = 0, co = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  int sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0, act = 0;
  bool has_bias = false;
};

class ConvOp final : public ClOp {
 public:
  static Status Create(const ClRuntime& rt, const ConvShape& s, std::unique_ptr<ClOp>* out);
  Status Enqueue(const ClRuntime& rt, const std::vector<ClTensorRef>& in, const ClTensorRef& out,
                 const ClTensorRef& scratch, ClEventHandle* ev) override;

 private:
  ConvShape s_;
  ClKernelHandle k_;
};

Status MakeDequantize(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out);
Status CreateSdOp(const ClRuntime& rt, const ClNodeDesc& node, std::unique_ptr<ClOp>* out);

}  // namespace sdgpu::ocl
