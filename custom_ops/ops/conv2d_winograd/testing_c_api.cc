// A C entry point over the CPU conv kernels, for tests and kernel timing (tests/native/test_winograd_kernels.py
// compiles it together with cpu.cc and common/thread_pool.cc into a throwaway library and calls it via ctypes).
// Not part of the delegate: the delegate reaches the same kernels through SdConv2DWinograd nodes.
#include <cstdint>
#include <vector>

#include "common/thread_pool.h"
#include "ops/conv2d_winograd/cpu.h"

namespace {

sdgpu::ConvActivation ActivationFromInt(int act) {
  switch (act) {
    case 1: return sdgpu::ConvActivation::kRelu;
    case 2: return sdgpu::ConvActivation::kRelu6;
    case 3: return sdgpu::ConvActivation::kReluN1To1;
    case 4: return sdgpu::ConvActivation::kTanh;
    default: return sdgpu::ConvActivation::kNone;
  }
}

}  // namespace

extern "C" {

// x [n,h,w,cin], filter [cout,3,3,cin], bias [cout] -> y. `tile` 2/4/6; activation 0..4 = none, relu, relu6,
// relu_n1_to_1, tanh. Reports the kernel's buffer sizes; returns 0, or -1 on invalid arguments.
int sdwino_winograd_conv(int tile, int same_padding, int activation, int num_threads, const float* x, int64_t n,
                         int64_t h, int64_t w, int64_t cin, const float* filter, int64_t cout, const float* bias,
                         float* y, int64_t* scratch_bytes, int64_t* transformed_weight_elements) {
  if ((tile != 2 && tile != 4 && tile != 6) || num_threads < 1) return -1;
  sdgpu::Conv2DWinogradAttrs attrs;
  attrs.tile = tile;
  attrs.same_padding = same_padding != 0;
  attrs.activation = ActivationFromInt(activation);
  const sdgpu::WinogradGeometry g = sdgpu::WinogradGeometryFor(attrs, {n, h, w, cin}, {cout, 3, 3, cin});
  if (g.ho < 1 || g.wo < 1) return -1;
  sdgpu::ThreadPool pool(num_threads);
  std::vector<float> u(static_cast<size_t>(sdgpu::WinogradTransformedWeightElements(g)));
  std::vector<float> scratch(sdgpu::WinogradScratchBytes(g) / sizeof(float));
  sdgpu::WinogradTransformWeights(g, filter, u.data(), &pool);
  sdgpu::WinogradConvCpu(attrs, g, x, u.data(), bias, y, scratch.data(), &pool);
  *scratch_bytes = static_cast<int64_t>(sdgpu::WinogradScratchBytes(g));
  *transformed_weight_elements = sdgpu::WinogradTransformedWeightElements(g);
  return 0;
}

// Direct conv, filter [cout,kh,kw,cin]; bias may be null.
int sdwino_direct_conv(int same_padding, int activation, int num_threads, int64_t stride_h, int64_t stride_w,
                       int64_t dilation_h, int64_t dilation_w, const float* x, int64_t n, int64_t h, int64_t w,
                       int64_t cin, const float* filter, int64_t cout, int64_t kh, int64_t kw, const float* bias,
                       float* y) {
  if (num_threads < 1 || stride_h < 1 || stride_w < 1 || dilation_h < 1 || dilation_w < 1) return -1;
  const sdgpu::DirectConvGeometry g = sdgpu::DirectConvGeometryFor({n, h, w, cin}, {cout, kh, kw, cin}, stride_h,
                                                                   stride_w, dilation_h, dilation_w, same_padding != 0);
  if (g.ho < 1 || g.wo < 1) return -1;
  sdgpu::ThreadPool pool(num_threads);
  std::vector<float> hwio(static_cast<size_t>(kh * kw * cin * cout));
  sdgpu::DirectConvRearrangeWeights(g, filter, hwio.data());
  sdgpu::DirectConvCpu(g, ActivationFromInt(activation), x, hwio.data(), bias, y, &pool);
  return 0;
}

}  // extern "C"
