// The tiled GEMM and the implicit-GEMM convolution, shared by builtin nodes
// (FULLY_CONNECTED, BATCH_MATMUL, CONV_2D) and SdConv2DWinograd (gpu/sd_ops.cc).
#pragma once

#include <memory>
#include <vector>

#include "gpu/ops.h"

namespace sdgpu::gpu {

// Work-group tile of gemm_f32 / conv2d_igemm. Correctness constant: the kernels'
// shared tiles are TS x TS (TS = this) and the launch uses kTile x kTile groups.
constexpr size_t kTile = 16;

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

// NHWC conv, OHWI filter, inputs (x, filter[, bias]).
struct ConvShape {
  int n = 0, h = 0, w = 0, ci = 0, co = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  int sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0, act = 0;
  bool has_bias = false;
};

// `inputs`: the node inputs read on the device (A, B[, bias]).
Status MakeGemm(const Device& dev, const GemmShape& s, std::vector<int> inputs, std::unique_ptr<GpuOp>* out);
Status MakeConv(const Device& dev, const ConvShape& s, std::unique_ptr<GpuOp>* out);

}  // namespace sdgpu::gpu
