// Elementwise kernels: GLSL port of backends/opencl/kernels/elementwise.cl (same kernel names, parameter
// order and op codes). Tensors are (SSBO binding, element offset uniform); `m` is the small int "meta"
// buffer uploaded once at prepare: [rank, out_dims[MAXR], strides_0[MAXR], strides_1[MAXR], ...].
//
// GLSL has no erf, and its sin/cos/tanh/pow may be hardware approximations with weaker guarantees than
// OpenCL's (sin's absolute error may grow with |x|; pow is undefined for negative bases; tanh may overflow
// to NaN): those are implemented here so both backends agree with the CPU interpreter to ~1e-7.
#define MAXR 6

// sin(x) (shift 0) / cos(x) (shift 1): Cody-Waite reduction by pi/2 with a three-part constant (k * C1 is
// exact for |k| < 2^16) and Taylor polynomials on [-pi/4, pi/4] (truncation < 2e-9): absolute error
// < 1e-7 for |x| < 12000 and < 1e-6 up to 65536 (fp32 emulation); the built-ins beyond. Timestep
// embeddings evaluate sin(t * f) at |x| up to ~1000.
float sd_sincos(float x, int shift) {
  if (abs(x) > 65536.0) return shift == 0 ? sin(x) : cos(x);
  float k = floor(x * 0.63661977236758134 + 0.5);
  float r = ((x - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.54978995489188216e-8;
  int q = (int(k) + shift) & 3;
  float z = r * r;
  float s = r + r * z * (-0.16666666666666667 + z * (0.0083333333333333333 + z * (-1.9841269841269841e-4 +
            z * 2.7557319223985891e-6)));
  float c = 1.0 - 0.5 * z + z * z * (0.041666666666666667 + z * (-0.0013888888888888889 +
            z * (2.4801587301587302e-5 + z * -2.7557319223985891e-7)));
  float v = (q & 1) == 0 ? s : c;
  return q >= 2 ? -v : v;
}

// erfc(x) for x >= 0: Chebyshev fit (Numerical Recipes' erfcc), fractional error < 1.2e-7 everywhere.
float sd_erfc_pos(float x) {
  float t = 1.0 / (1.0 + 0.5 * x);
  return t * exp(-x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
         t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
}

// erf: Maclaurin series below 0.5 (no cancellation near 0; truncation < 2e-8), 1 - erfc above.
float sd_erf(float x) {
  float a = abs(x);
  if (a < 0.5) {
    float z = x * x;
    return x * (1.1283791670955126 + z * (-0.37612638903183753 + z * (0.11283791670955126 +
           z * (-0.026866170645131252 + z * (0.0052239776254421878 + z * -0.00085483270234508529)))));
  }
  return sign(x) * (1.0 - sd_erfc_pos(a));
}

// GELU (erf form); for negative inputs 1 + erf(u) = erfc(-u) directly, without cancellation.
float sd_gelu_erf(float x) {
  float u = x * 0.70710678118654752;
  return u < -0.5 ? 0.5 * x * sd_erfc_pos(-u) : 0.5 * x * (1.0 + sd_erf(u));
}

// C/OpenCL pow semantics: negative bases with integral exponents, pow(0, b) for every b.
float sd_pow(float a, float b) {
  if (b == 2.0) return a * a;
  if (b == 1.0) return a;
  if (b == 0.0) return 1.0;
  if (b == 0.5) return sqrt(a);
  if (a == 0.0) return b > 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
  float r = pow(abs(a), b);
  if (a < 0.0) {
    if (b != floor(b)) return uintBitsToFloat(0x7fc00000u);  // NaN
    if (mod(b, 2.0) != 0.0) r = -r;                          // odd exponent
  }
  return r;
}

float sd_unary(float x, int op) {
  switch (op) {
    case 1: return 1.0 / (1.0 + exp(-x));                                                 // LOGISTIC
    case 2: return inversesqrt(x);                                                       // RSQRT
    case 3: return sd_sincos(x, 0);                                                      // SIN
    case 4: return sd_sincos(x, 1);                                                      // COS
    case 5: return exp(x);
    case 6: return log(x);
    case 7: return sqrt(x);
    case 8: return -x;
    case 9: return abs(x);
    case 10: return sd_tanh(x);
    case 11: return x * x;                                                               // SQUARE
    case 12: return sd_gelu_erf(x);                                                      // GELU (erf)
    case 13: return 0.5 * x * (1.0 + sd_tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));  // GELU tanh
    case 14: return x / (1.0 + exp(-1.702 * x));                                        // quick GELU
    case 15: return max(x, 0.0);                                                         // RELU
    case 16: return x / (1.0 + exp(-x));                                                 // SiLU
    default: return x;                                                                   // copy
  }
}

float sd_binary(float a, float b, int op) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: { float d = a - b; return d * d; }  // SQUARED_DIFFERENCE
    case 5: return max(a, b);
    case 6: return min(a, b);
    case 7: return sd_pow(a, b);
    default: return a;
  }
}

//== kernel unary_f32
// unary_f32(y, yo, x, xo, int n, int op)
layout(std430, binding = 0) writeonly buffer B0 { float y[]; };
layout(std430, binding = 1) readonly buffer B1 { float x[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int n;
layout(location = 3) uniform int op;
void main() {
  int i = sd_global_id(0);
  if (i >= n) return;
  y[yo + i] = sd_unary(x[xo + i], op);
}

//== kernel binary_f32
// binary_f32(y, yo, a, ao, b, bo, m, mo, int n, int op, int act): y = act(a op b), numpy broadcasting
// (stride 0 on broadcast dims).
layout(std430, binding = 0) writeonly buffer B0 { float y[]; };
layout(std430, binding = 1) readonly buffer B1 { float a[]; };
layout(std430, binding = 2) readonly buffer B2 { float b[]; };
layout(std430, binding = 3) readonly buffer B3 { int m[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int ao;
layout(location = 2) uniform int bo;
layout(location = 3) uniform int mo;
layout(location = 4) uniform int n;
layout(location = 5) uniform int op;
layout(location = 6) uniform int act;
void main() {
  int i = sd_global_id(0);
  if (i >= n) return;
  int rank = m[mo];
  int rem = i, ia = 0, ib = 0;
  for (int d = rank - 1; d >= 0; --d) {
    int dim = m[mo + 1 + d];
    int c = rem % dim;
    rem /= dim;
    ia += c * m[mo + 1 + MAXR + d];
    ib += c * m[mo + 1 + 2 * MAXR + d];
  }
  y[yo + i] = sd_act(sd_binary(a[ao + ia], b[bo + ib], op), act);
}

//== kernel select_f32
// select_f32(y, yo, c, co, a, ao, b, bo, m, mo, int n): SELECT_V2, y = c != 0 ? a : b (cond converted to
// float at prepare), broadcasting.
layout(std430, binding = 0) writeonly buffer B0 { float y[]; };
layout(std430, binding = 1) readonly buffer B1 { float c[]; };
layout(std430, binding = 2) readonly buffer B2 { float a[]; };
layout(std430, binding = 3) readonly buffer B3 { float b[]; };
layout(std430, binding = 4) readonly buffer B4 { int m[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int co;
layout(location = 2) uniform int ao;
layout(location = 3) uniform int bo;
layout(location = 4) uniform int mo;
layout(location = 5) uniform int n;
void main() {
  int i = sd_global_id(0);
  if (i >= n) return;
  int rank = m[mo];
  int rem = i, ic = 0, ia = 0, ib = 0;
  for (int d = rank - 1; d >= 0; --d) {
    int dim = m[mo + 1 + d];
    int k = rem % dim;
    rem /= dim;
    ic += k * m[mo + 1 + MAXR + d];
    ia += k * m[mo + 1 + 2 * MAXR + d];
    ib += k * m[mo + 1 + 3 * MAXR + d];
  }
  y[yo + i] = c[co + ic] != 0.0 ? a[ao + ia] : b[bo + ib];
}

//== kernel dequant_f16
// dequant_f16(y, yo, x, xo, int n): DEQUANTIZE of fp16 storage. x is read as 32-bit words (two halves
// each, the first in the low bits); xo counts halves.
layout(std430, binding = 0) writeonly buffer B0 { float y[]; };
layout(std430, binding = 1) readonly buffer B1 { uint x[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int n;
void main() {
  int i = sd_global_id(0);
  if (i >= n) return;
  int e = xo + i;
  vec2 pair = unpackHalf2x16(x[e >> 1]);
  y[yo + i] = (e & 1) == 0 ? pair.x : pair.y;
}
