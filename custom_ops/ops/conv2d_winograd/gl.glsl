// SdConv2DWinograd on GL: GLSL port of ops/conv2d_winograd/opencl.cl (same kernels and parameters; see
// there and gpu/winograd_ops.cc). F(m x m, 3 x 3), m in {2, 4, 6}, alpha = m + 2, three launches:
//   winograd_input_fM   V[a*a][T][Ci] = BT d BT^T for each alpha x alpha input tile d (zero outside x)
//   gemm_t*             M[k] = V[k] (T x Ci) . U[k] (Ci x Co) (the tiled GEMM, shaders/gemm_tiled.glsl)
//   winograd_output_fM  y = act(AT M AT^T + bias), cropped to Ho x Wo
// One invocation per (channel, tile): global = (Ci or Co, T), local = (64, 1, 1). Each instance #defines
// MT (m), A (alpha) and BT / AT (its matrix) and pastes the shared fragment, so every loop has a constant
// trip count and the 8 x 8 arrays can live in registers. The matrices are exact in float (integers and
// powers of two; ops/conv2d_winograd/matrices.inc is the source of truth).

// Row-major BT (a x a) and AT (m x a) per tile size.
const float wino_f2_bt[16] = float[16](
    1., 0., -1., 0.,
    0., 1., 1., 0.,
    0., 1., -1., 0.,
    0., 1., 0., -1.);
const float wino_f2_at[8] = float[8](
    1., 1., 1., 0.,
    0., 1., -1., 1.);
const float wino_f4_bt[36] = float[36](
    4., 0., -5., 0., 1., 0.,
    0., 4., 4., -1., -1., 0.,
    0., 4., -4., -1., 1., 0.,
    0., 2., 1., -2., -1., 0.,
    0., 2., -1., -2., 1., 0.,
    0., 4., 0., -5., 0., 1.);
const float wino_f4_at[24] = float[24](
    1., 1., 1., 1., 1., 0.,
    0., 1., -1., 2., -2., 0.,
    0., 1., 1., 4., 4., 0.,
    0., 1., -1., 8., -8., 1.);
const float wino_f6_bt[64] = float[64](
    4., 0., -21., 0., 21., 0., -4., 0.,
    0., 4., 4., -17., -17., 4., 4., 0.,
    0., 4., -4., -17., 17., 4., -4., 0.,
    0., 2., 1., -10., -5., 8., 4., 0.,
    0., 2., -1., -10., 5., 8., -4., 0.,
    0., 4., 8., -5., -10., 1., 2., 0.,
    0., 4., -8., -5., 10., 1., -2., 0.,
    0., 4., 0., -21., 0., 21., 0., -4.);
const float wino_f6_at[48] = float[48](
    1., 1., 1., 1., 1., 1., 1., 0.,
    0., 1., -1., 2., -2., 0.5, -0.5, 0.,
    0., 1., 1., 4., 4., 0.25, 0.25, 0.,
    0., 1., -1., 8., -8., 0.125, -0.125, 0.,
    0., 1., 1., 16., 16., 0.0625, 0.0625, 0.,
    0., 1., -1., 32., -32., 0.03125, -0.03125, 1.);

//== fragment wino_input
// winograd_input_fM(V, vo, X, xo, int H, int W, int Ci, int tiles_h, int tiles_w, int T, int pad)
layout(std430, binding = 0) writeonly buffer B0 { float V[]; };
layout(std430, binding = 1) readonly buffer B1 { float X[]; };
layout(location = 0) uniform int vo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int H;
layout(location = 3) uniform int W;
layout(location = 4) uniform int Ci;
layout(location = 5) uniform int tiles_h;
layout(location = 6) uniform int tiles_w;
layout(location = 7) uniform int T;
layout(location = 8) uniform int pad;
void main() {
  int ci = sd_global_id(0), t = sd_global_id(1);
  if (ci >= Ci || t >= T) return;
  int tx = t % tiles_w, r = t / tiles_w, ty = r % tiles_h, img = r / tiles_h;
  int y0 = ty * MT - pad, x0 = tx * MT - pad;
  float d[A * A];
  float tmp[A * A];
  for (int k = 0; k < A; ++k) {
    int yy = y0 + k;
    for (int l = 0; l < A; ++l) {
      int xx = x0 + l;
      d[k * A + l] = (yy >= 0 && yy < H && xx >= 0 && xx < W) ? X[xo + ((img * H + yy) * W + xx) * Ci + ci] : 0.0;
    }
  }
  for (int i = 0; i < A; ++i) {
    for (int l = 0; l < A; ++l) {
      float s = 0.0;
      for (int k = 0; k < A; ++k) s += BT[i * A + k] * d[k * A + l];
      tmp[i * A + l] = s;
    }
  }
  int plane = T * Ci;
  for (int i = 0; i < A; ++i) {
    for (int j = 0; j < A; ++j) {
      float s = 0.0;
      for (int l = 0; l < A; ++l) s += tmp[i * A + l] * BT[j * A + l];
      V[vo + (i * A + j) * plane + t * Ci + ci] = s;
    }
  }
}

//== fragment wino_output
// winograd_output_fM(Y, yo, M, mo, bias, biaso, int Ho, int Wo, int Co, int tiles_h, int tiles_w, int T, int act)
layout(std430, binding = 0) writeonly buffer B0 { float Y[]; };
layout(std430, binding = 1) readonly buffer B1 { float Mb[]; };
layout(std430, binding = 2) readonly buffer B2 { float bias[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int mo;
layout(location = 2) uniform int biaso;
layout(location = 3) uniform int Ho;
layout(location = 4) uniform int Wo;
layout(location = 5) uniform int Co;
layout(location = 6) uniform int tiles_h;
layout(location = 7) uniform int tiles_w;
layout(location = 8) uniform int T;
layout(location = 9) uniform int act;
void main() {
  int co = sd_global_id(0), t = sd_global_id(1);
  if (co >= Co || t >= T) return;
  int tx = t % tiles_w, r = t / tiles_w, ty = r % tiles_h, img = r / tiles_h;
  int plane = T * Co;
  float mm[A * A];
  float tmp[MT * A];
  for (int k = 0; k < A; ++k) {
    for (int l = 0; l < A; ++l) mm[k * A + l] = Mb[mo + (k * A + l) * plane + t * Co + co];
  }
  for (int i = 0; i < MT; ++i) {
    for (int l = 0; l < A; ++l) {
      float s = 0.0;
      for (int k = 0; k < A; ++k) s += AT[i * A + k] * mm[k * A + l];
      tmp[i * A + l] = s;
    }
  }
  float b = bias[biaso + co];
  for (int i = 0; i < MT; ++i) {
    int oy = ty * MT + i;
    for (int j = 0; j < MT; ++j) {
      int ox = tx * MT + j;
      float s = 0.0;
      for (int l = 0; l < A; ++l) s += tmp[i * A + l] * AT[j * A + l];
      if (oy < Ho && ox < Wo) Y[yo + ((img * Ho + oy) * Wo + ox) * Co + co] = sd_act(s + b, act);
    }
  }
}

//== kernel winograd_input_f2
#define MT 2
#define A 4
#define BT wino_f2_bt
//== include wino_input

//== kernel winograd_input_f4
#define MT 4
#define A 6
#define BT wino_f4_bt
//== include wino_input

//== kernel winograd_input_f6
#define MT 6
#define A 8
#define BT wino_f6_bt
//== include wino_input

//== kernel winograd_output_f2
#define MT 2
#define A 4
#define AT wino_f2_at
//== include wino_output

//== kernel winograd_output_f4
#define MT 4
#define A 6
#define AT wino_f4_at
//== include wino_output

//== kernel winograd_output_f6
#define MT 6
#define A 8
#define AT wino_f6_at
//== include wino_output
