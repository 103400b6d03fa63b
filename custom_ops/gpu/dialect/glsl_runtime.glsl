// The GLSL side of the kernel dialect (gpu/dialect/prelude.h): text in front of every generated compute shader
// (after the `#version 310 es` line and the local size). The dialect prelude maps OpenCL built-ins that GLSL lacks,
// or whose GLSL form has weaker guarantees, to the sd_* functions here, so both backends agree with the CPU
// interpreter to ~1e-7: GLSL has no erf/erfc; its sin/cos/tanh/pow may be hardware approximations (sin's absolute
// error may grow with |x|; pow is undefined for negative bases; tanh may overflow to NaN); round() may round
// halves either way.
//
// Precision: highp for everything. mediump is fp16 on mobile GPUs (10-bit mantissa), which would break the
// kernels' fp32 parity by orders of magnitude (NVIDIA and llvmpipe compute in fp32 either way).
precision highp float;
precision highp int;

// NVIDIA: unroll every loop with a constant trip count (register-blocked tiles stay in registers only when their
// loops are unrolled; the OpenCL side says UNROLL). Other compilers ignore the pragma.
#pragma optionNV(unroll all)

// Work-group offset of a split dispatch: the device sets it when a dimension needs more groups than
// GL_MAX_COMPUTE_WORK_GROUP_COUNT (GlDevice::kGroupBaseLocation).
layout(location = 120) uniform uvec3 sd_group_base;

// OpenCL's get_group_id / get_local_id / get_local_size / get_global_id. The device launches
// ceil(global / local) groups, so kernels bounds-check global ids.
int sd_group_id(int d) { return int(gl_WorkGroupID[d] + sd_group_base[d]); }
int sd_local_id(int d) { return int(gl_LocalInvocationID[d]); }
int sd_local_size(int d) { return int(gl_WorkGroupSize[d]); }
int sd_global_id(int d) { return sd_group_id(d) * sd_local_size(d) + sd_local_id(d); }

// tanh without the overflow of exp-based built-ins (|x| large -> inf/inf) and without the cancellation of
// (1 - e) / (1 + e) near 0: odd Taylor series below 0.55 (truncation < 3e-8), exp form above.
float sd_tanh(float x) {
  float a = abs(x);
  if (a < 0.55) {
    float z = x * x;
    return x * (1.0 + z * (-0.33333333333 + z * (0.13333333333 + z * (-0.05396825397 + z * (0.02186948854 +
           z * (-0.00886323552 + z * (0.00359212803 + z * -0.00145583438)))))));
  }
  if (a > 15.0) return sign(x);
  float e = exp(-2.0 * a);
  return sign(x) * (1.0 - e) / (1.0 + e);
}

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
float sd_sin(float x) { return sd_sincos(x, 0); }
float sd_cos(float x) { return sd_sincos(x, 1); }

// erfc(x) for x >= 0: Chebyshev fit (Numerical Recipes' erfcc), fractional error < 1.2e-7 everywhere.
float sd_erfc_pos(float x) {
  float t = 1.0 / (1.0 + 0.5 * x);
  return t * exp(-x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 +
         t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
}
// erfc without cancellation on either side: erfc(x) = 2 - erfc(-x) for x < 0.
float sd_erfc(float x) { return x >= 0.0 ? sd_erfc_pos(x) : 2.0 - sd_erfc_pos(-x); }
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

// C's round: halves away from zero (GLSL's round may go either way).
float sd_round(float x) { return sign(x) * floor(abs(x) + 0.5); }
