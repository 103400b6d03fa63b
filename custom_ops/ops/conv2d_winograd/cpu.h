// CPU reference kernels for SdConv2DWinograd (F(2x2/4x4/6x6, 3x3)) and the direct convolution.
//
// Winograd, three stages over whole tensors (the layout the planner's memory model and the paper
// table use, see converter/sdconvert/winograd/buffers.py -- keep the two in sync):
//   weights (once, at the first Run for a given filter pointer; float64 math, one rounding):
//       U[a*a][Cin][Cout] = G g G^T                                  (kernel-owned, a^2/9 x the filter)
//   input transform:  V[a*a][T][Cin]  = BT d BT^T per a x a tile d    (scratch; zero-fill outside x)
//   a*a GEMMs:        M[k] = V[k] (T x Cin) . U[k] (Cin x Cout)        (scratch)
//   output transform: y = AT M AT^T + bias, activation, cropped to Ho x Wo
// with T = N * ceil(Ho/m) * ceil(Wo/m). Trade-off: whole-tensor V/M (not tile-blocked) costs cache
// locality on CPU but mirrors a 3-dispatch GPU implementation and keeps the memory accounting exact.
// Accumulation is in float32 in a fixed order (Cin sequentially), within the first-order error bound
// of sdconvert.winograd.reference.winograd_error_bound. The GEMMs run register-tiled SIMD micro-kernels
// (cpu_gemm.inc: 8 tiles x 48 channels of accumulators with AVX-512; AVX2+FMA or portable code picked at
// runtime, common/cpu_simd.h); the transforms are plain loops, a small share of the work at SD channel counts.
//
// Direct: NHWC x HWIO-rearranged weights, float32 accumulation over (kh, kw, Cin), any stride/dilation,
// TFLite SAME/VALID padding. No scratch (no im2col).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/thread_pool.h"
#include "ops/conv2d_winograd/attrs.h"
#include "ops/tensor_info.h"

namespace sdgpu {

struct WinogradGeometry {
  int m = 0;       // output tile
  int alpha = 0;   // input tile, m + 2
  int64_t n = 0, h = 0, w = 0, cin = 0, cout = 0;
  int64_t ho = 0, wo = 0;
  int64_t pad = 0;  // top/left zero padding (1 for SAME, 0 for VALID)
  int64_t tiles_h = 0, tiles_w = 0, num_tiles = 0;
};

WinogradGeometry WinogradGeometryFor(const Conv2DWinogradAttrs& attrs, const Dims& x, const Dims& filter);

// Elements of U; the kernel owns this buffer (float).
int64_t WinogradTransformedWeightElements(const WinogradGeometry& g);
// Bytes of V + M, the per-Run scratch.
size_t WinogradScratchBytes(const WinogradGeometry& g);

// filter [Cout,3,3,Cin] -> u [a*a][Cin][Cout].
void WinogradTransformWeights(const WinogradGeometry& g, const float* filter, float* u, ThreadPool* pool);

// `scratch` holds WinogradScratchBytes(g) bytes, 64-byte aligned.
void WinogradConvCpu(const Conv2DWinogradAttrs& attrs, const WinogradGeometry& g, const float* x, const float* u,
                     const float* bias, float* y, void* scratch, ThreadPool* pool);

struct DirectConvGeometry {
  int64_t n = 0, h = 0, w = 0, cin = 0, cout = 0, kh = 0, kw = 0;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t ho = 0, wo = 0, pad_top = 0, pad_left = 0;
};

// TFLite padding rules: SAME -> ceil(in / stride), total pad split with the extra on the bottom/right.
DirectConvGeometry DirectConvGeometryFor(const Dims& x, const Dims& filter, int64_t stride_h, int64_t stride_w,
                                         int64_t dilation_h, int64_t dilation_w, bool same_padding);

// filter [Cout,KH,KW,Cin] -> hwio [KH][KW][Cin][Cout] (Cout innermost, what the direct loop streams).
void DirectConvRearrangeWeights(const DirectConvGeometry& g, const float* filter, float* hwio);

// `bias` may be null.
void DirectConvCpu(const DirectConvGeometry& g, ConvActivation activation, const float* x, const float* hwio,
                   const float* bias, float* y, ThreadPool* pool);

}  // namespace sdgpu
