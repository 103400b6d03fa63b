// Elementwise kernels (OpenCL C 1.2, fp32 arithmetic). Tensors are passed as
// (base pointer, element offset) so every buffer of the partition arena can be
// addressed without sub-buffers. `m` is a small int "meta" buffer uploaded
// once at prepare: [rank, out_dims[MAXR], strides_0[MAXR], strides_1[MAXR], ...].
#define MAXR 6

inline float sd_act(float v, int act) {
  switch (act) {
    case 1: return fmax(v, 0.0f);                       // RELU
    case 2: return clamp(v, -1.0f, 1.0f);               // RELU_N1_TO_1
    case 3: return clamp(v, 0.0f, 6.0f);                // RELU6
    case 4: return tanh(v);                             // TANH
    case 6: return 1.0f / (1.0f + exp(-v));             // SIGMOID
    default: return v;
  }
}

inline float sd_unary(float x, int op) {
  switch (op) {
    case 1: return 1.0f / (1.0f + exp(-x));                                          // LOGISTIC
    case 2: return rsqrt(x);                                                          // RSQRT
    case 3: return sin(x);
    case 4: return cos(x);
    case 5: return exp(x);
    case 6: return log(x);
    case 7: return sqrt(x);
    case 8: return -x;
    case 9: return fabs(x);
    case 10: return tanh(x);
    case 11: return x * x;                                                            // SQUARE
    case 12: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));               // GELU (erf)
    case 13: return 0.5f * x * (1.0f + tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));  // GELU tanh
    case 14: return x / (1.0f + exp(-1.702f * x));                                    // quick GELU
    case 15: return fmax(x, 0.0f);                                                    // RELU
    case 16: return x / (1.0f + exp(-x));                                             // SiLU
    default: return x;                                                                // copy
  }
}

__kernel void unary_f32(__global float* y, int yo, __global const float* x, int xo, int n, int op) {
  const int i = get_global_id(0);
  if (i >= n) return;
  y[yo + i] = sd_unary(x[xo + i], op);
}

// unary_f32 on float4s (n % 4 == 0, both tensors 16-byte aligned); yo/xo/n4 in float4 units.
__kernel void unary_f32_v4(__global float4* y, int yo, __global const float4* x, int xo, int n4, int op) {
  const int i = get_global_id(0);
  if (i >= n4) return;
  const float4 v = x[xo + i];
  y[yo + i] = (float4)(sd_unary(v.s0, op), sd_unary(v.s1, op), sd_unary(v.s2, op), sd_unary(v.s3, op));
}

inline float sd_binary(float a, float b, int op) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    case 4: { const float d = a - b; return d * d; }  // SQUARED_DIFFERENCE
    case 5: return fmax(a, b);
    case 6: return fmin(a, b);
    case 7: return pow(a, b);
    default: return a;
  }
}

// y = act(a op b) with numpy broadcasting (stride 0 on broadcast dims).
__kernel void binary_f32(__global float* y, int yo, __global const float* a, int ao, __global const float* b, int bo,
                         __global const int* m, int mo, int n, int op, int act) {
  const int i = get_global_id(0);
  if (i >= n) return;
  m += mo;
  const int rank = m[0];
  int rem = i, ia = 0, ib = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = m[1 + d];
    const int c = rem % dim;
    rem /= dim;
    ia += c * m[1 + MAXR + d];
    ib += c * m[1 + 2 * MAXR + d];
  }
  y[yo + i] = sd_act(sd_binary(a[ao + ia], b[bo + ib], op), act);
}

// binary_f32 on four consecutive outputs per work-item (host: innermost collapsed dim % 4 == 0, aligned
// offsets). The meta describes the float4 grid: innermost out dim / 4, innermost strides 4 (operand varies
// along it: a_vec/b_vec = 1, float4 load) or 0 (broadcast along it: one scalar); strides in floats.
__kernel void binary_f32_v4(__global float4* y, int yo, __global const float* a, int ao, __global const float* b,
                            int bo, __global const int* m, int mo, int n4, int op, int act, int a_vec, int b_vec) {
  const int i = get_global_id(0);
  if (i >= n4) return;
  m += mo;
  const int rank = m[0];
  int rem = i, ia = 0, ib = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = m[1 + d];
    const int c = rem % dim;
    rem /= dim;
    ia += c * m[1 + MAXR + d];
    ib += c * m[1 + 2 * MAXR + d];
  }
  const float4 va = a_vec ? *((__global const float4*)(a + ao + ia)) : (float4)(a[ao + ia]);
  const float4 vb = b_vec ? *((__global const float4*)(b + bo + ib)) : (float4)(b[bo + ib]);
  y[yo + i] = (float4)(sd_act(sd_binary(va.s0, vb.s0, op), act), sd_act(sd_binary(va.s1, vb.s1, op), act),
                       sd_act(sd_binary(va.s2, vb.s2, op), act), sd_act(sd_binary(va.s3, vb.s3, op), act));
}

// SELECT_V2: y = cond != 0 ? a : b (cond converted to float at prepare), broadcasting.
__kernel void select_f32(__global float* y, int yo, __global const float* c, int co, __global const float* a, int ao,
                         __global const float* b, int bo, __global const int* m, int mo, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  m += mo;
  const int rank = m[0];
  int rem = i, ic = 0, ia = 0, ib = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = m[1 + d];
    const int k = rem % dim;
    rem /= dim;
    ic += k * m[1 + MAXR + d];
    ia += k * m[1 + 2 * MAXR + d];
    ib += k * m[1 + 3 * MAXR + d];
  }
  y[yo + i] = c[co + ic] != 0.0f ? a[ao + ia] : b[bo + ib];
}

// DEQUANTIZE of fp16 storage (vload_half works without cl_khr_fp16).
__kernel void dequant_f16(__global float* y, int yo, __global const half* x, int xo, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  y[yo + i] = vload_half(xo + i, x);
}
