// SdGelu on OpenCL. Plain GELU: the backend launches unary_f32[_v4] (backends/opencl/kernels/elementwise.cl)
// with op 12 (erf), 13 (tanh) or 14 (quick); the defines below pin that mapping for readers of ops/gelu.
// Gated GELU (GEGLU) has its own kernels here. x is [rows, 2F] (value half, then gate half), y is [rows, F]:
//   y[r, j] = x[r, j] * gelu_mode(x[r, F + j])
// Both are 2-D launches (dim 0 = column, dim 1 = row; no integer division per element) and bounds-check.
#define SD_GELU_OP_ERF 12
#define SD_GELU_OP_TANH 13
#define SD_GELU_OP_QUICK 14

// GELU in cancellation-free forms (as the CPU kernel, ops/gelu/cpu_impl.inc), relatively exact in the negative
// tail where 1 + erf(u) and 1 + tanh(u) round to 0 in float32 (x below ~ -4):
//   erf    0.5 x (1 + erf(x/sqrt2))          = 0.5 x erfc(-x/sqrt2)
//   tanh   0.5 x (1 + tanh(k0 (x + k1 x^3))) = x / (1 + exp(-2 k0 (x + k1 x^3)))
//   quick  x sigmoid(1.702 x)                = x / (1 + exp(-1.702 x))
// exp overflowing to inf for x -> -inf gives x / inf = -0.
inline float sd_gelu_mode(float x, int mode) {
  if (mode == SD_GELU_OP_TANH) return x / (1.0f + exp(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
  if (mode == SD_GELU_OP_QUICK) return x / (1.0f + exp(-1.702f * x));
  return 0.5f * x * erfc(-0.70710678118654752f * x);
}

// gelu_gated_f32(y, yo, x, xo, int rows, int F, int mode): one work-item per output element; any F.
__kernel void gelu_gated_f32(__global float* y, int yo, __global const float* x, int xo, int rows, int F,
                             int mode) {
  const int j = get_global_id(0), r = get_global_id(1);
  if (j >= F || r >= rows) return;
  const int xi = xo + 2 * F * r + j;
  y[yo + F * r + j] = x[xi] * sd_gelu_mode(x[xi + F], mode);
}

// gelu_gated_f32_v4(y, yo, x, xo, int rows, int F4, int mode): F = 4 * F4 and both tensors 16-byte aligned;
// offsets and F4 in float4 units. One work-item per 4 outputs: two 16-byte loads, one 16-byte store.
__kernel void gelu_gated_f32_v4(__global float4* y, int yo, __global const float4* x, int xo, int rows, int F4,
                                int mode) {
  const int j = get_global_id(0), r = get_global_id(1);
  if (j >= F4 || r >= rows) return;
  const int xi = xo + 2 * F4 * r + j;
  const float4 g = x[xi + F4];
  y[yo + F4 * r + j] = x[xi] * (float4)(sd_gelu_mode(g.s0, mode), sd_gelu_mode(g.s1, mode),
                                        sd_gelu_mode(g.s2, mode), sd_gelu_mode(g.s3, mode));
}
