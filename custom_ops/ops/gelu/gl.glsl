// Gated SdGelu (GEGLU) on GL: GLSL port of ops/gelu/opencl.cl (same kernel names, parameter order and mode
// codes 12 = erf, 13 = tanh, 14 = quick). x is [rows, 2F] (value half, then gate half), y is [rows, F]:
//   y[r, j] = x[r, j] * gelu_mode(x[r, F + j])
// Plain SdGelu runs unary_f32 of backends/gl/shaders/elementwise.glsl, whose erf helpers are local to that
// file's kernels (gl_shaders.h: a file's common text is pasted into its own kernels only), hence the erfc here.

// erfc(a) for a >= 0: Chebyshev fit (Numerical Recipes' erfcc), fractional error < 1.2e-7 everywhere.
float gelu_erfc_pos(float a) {
  float t = 1.0 / (1.0 + 0.5 * a);
  return t * exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
         t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
}

// GELU in the cancellation-free forms of ops/gelu/opencl.cl (relatively exact in the negative tail):
//   erf    0.5 x erfc(-u), u = x/sqrt2, with erfc(-u) = erfc(|u|) for u < 0 and 2 - erfc(u) for u >= 0 (no
//          cancellation on either side, so no Maclaurin branch near 0 is needed);
//   tanh   x / (1 + exp(-2 k0 (x + k1 x^3)));   quick  x / (1 + exp(-1.702 x)).
float gelu_mode(float x, int mode) {
  if (mode == 13) return x / (1.0 + exp(-1.5957691216057308 * (x + 0.044715 * x * x * x)));
  if (mode == 14) return x / (1.0 + exp(-1.702 * x));
  float u = x * 0.70710678118654752;
  float e = gelu_erfc_pos(abs(u));
  return 0.5 * x * (u < 0.0 ? e : 2.0 - e);
}

//== kernel gelu_gated_f32
// gelu_gated_f32(y, yo, x, xo, int rows, int F, int mode): 2-D launch (dim 0 = column j, dim 1 = row r).
layout(std430, binding = 0) writeonly buffer B0 { float y[]; };
layout(std430, binding = 1) readonly buffer B1 { float x[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int rows;
layout(location = 3) uniform int F;
layout(location = 4) uniform int mode;
void main() {
  int j = sd_global_id(0), r = sd_global_id(1);
  if (j >= F || r >= rows) return;
  int xi = xo + 2 * F * r + j;
  y[yo + F * r + j] = x[xi] * gelu_mode(x[xi + F], mode);
}

//== kernel gelu_gated_f32_v4
// gelu_gated_f32_v4(y, yo, x, xo, int rows, int F4, int mode): F = 4 * F4, both tensors 16-byte aligned;
// offsets and F4 in vec4 units.
layout(std430, binding = 0) writeonly buffer B0 { vec4 y[]; };
layout(std430, binding = 1) readonly buffer B1 { vec4 x[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int rows;
layout(location = 3) uniform int F4;
layout(location = 4) uniform int mode;
void main() {
  int j = sd_global_id(0), r = sd_global_id(1);
  if (j >= F4 || r >= rows) return;
  int xi = xo + 2 * F4 * r + j;
  vec4 g = x[xi + F4];
  y[yo + F4 * r + j] = x[xi] * vec4(gelu_mode(g.x, mode), gelu_mode(g.y, mode), gelu_mode(g.z, mode),
                                    gelu_mode(g.w, mode));
}
