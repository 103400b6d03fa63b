// Layout kernels over 4-byte elements (float or int32 bit patterns, read as uint): GLSL port of
// backends/opencl/kernels/copy.cl. TRANSPOSE, BROADCAST_TO, SLICE/STRIDED_SLICE, PAD, CONCATENATION and
// RESHAPE are all one strided N-d copy; GATHER/EMBEDDING_LOOKUP and RESIZE_NEAREST_NEIGHBOR have their own
// index maps.
// meta m: [rank, out_dims[MAXR], src_strides[MAXR], lo[MAXR], src_dims[MAXR], dst_strides[MAXR]]
// Output coordinate c reads source coordinate c - lo (zero outside [0, src_dims)).
#define MAXR 6

// TFLite's nearest-neighbour source index (align_corners / half_pixel_centers). OpenCL's round() is
// half-away-from-zero, GLSL's is implementation-defined at .5: rounded explicitly (v >= 0 here).
int sd_nearest(int o, int in_size, int out_size, int align, int half_px) {
  float scale = (align != 0 && out_size > 1) ? float(in_size - 1) / float(out_size - 1)
                                             : float(in_size) / float(out_size);
  float off = half_px != 0 ? 0.5 : 0.0;
  float s = (float(o) + off) * scale;
  float fl = floor(s);
  int v = align != 0 ? int(s - fl >= 0.5 ? fl + 1.0 : fl) : int(fl);
  v = min(v, in_size - 1);
  return half_px != 0 ? max(v, 0) : v;
}

//== kernel copy_nd
// copy_nd(y, yo, x, xo, m, mo, int n)
layout(std430, binding = 0) writeonly buffer B0 { uint y[]; };
layout(std430, binding = 1) readonly buffer B1 { uint x[]; };
layout(std430, binding = 2) readonly buffer B2 { int m[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int mo;
layout(location = 3) uniform int n;
void main() {
  int i = sd_global_id(0);
  if (i >= n) return;
  int rank = m[mo];
  int rem = i, src = 0, dst = 0;
  bool inside = true;
  for (int d = rank - 1; d >= 0; --d) {
    int dim = m[mo + 1 + d];
    int c = rem % dim;
    rem /= dim;
    int ci = c - m[mo + 1 + 2 * MAXR + d];
    inside = inside && ci >= 0 && ci < m[mo + 1 + 3 * MAXR + d];
    src += ci * m[mo + 1 + MAXR + d];
    dst += c * m[mo + 1 + 4 * MAXR + d];
  }
  y[yo + dst] = inside ? x[xo + src] : 0u;
}

//== kernel gather_rows
// gather_rows(y, yo, p, po, idx, io, int axis_dim, int nidx, int inner, int n):
// y[o, j, k] = p[o, idx[j], k]; out-of-range indices give zeros.
layout(std430, binding = 0) writeonly buffer B0 { uint y[]; };
layout(std430, binding = 1) readonly buffer B1 { uint p[]; };
layout(std430, binding = 2) readonly buffer B2 { int idx[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int po;
layout(location = 2) uniform int io;
layout(location = 3) uniform int axis_dim;
layout(location = 4) uniform int nidx;
layout(location = 5) uniform int inner;
layout(location = 6) uniform int n;
void main() {
  int i = sd_global_id(0);
  if (i >= n) return;
  int k = i % inner;
  int j = (i / inner) % nidx;
  int o = i / (inner * nidx);
  int r = idx[io + j];
  y[yo + i] = (r >= 0 && r < axis_dim) ? p[po + (o * axis_dim + r) * inner + k] : 0u;
}

//== kernel resize_nearest
// resize_nearest(y, yo, x, xo, int ih, int iw, int c, int oh, int ow, int align, int half_px, int n): NHWC.
layout(std430, binding = 0) writeonly buffer B0 { uint y[]; };
layout(std430, binding = 1) readonly buffer B1 { uint x[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int xo;
layout(location = 2) uniform int ih;
layout(location = 3) uniform int iw;
layout(location = 4) uniform int c;
layout(location = 5) uniform int oh;
layout(location = 6) uniform int ow;
layout(location = 7) uniform int align;
layout(location = 8) uniform int half_px;
layout(location = 9) uniform int n;
void main() {
  int i = sd_global_id(0);
  if (i >= n) return;
  int ch = i % c;
  int ox = (i / c) % ow;
  int oy = (i / (c * ow)) % oh;
  int b = i / (c * ow * oh);
  int sy = sd_nearest(oy, ih, oh, align, half_px);
  int sx = sd_nearest(ox, iw, ow, align, half_px);
  y[yo + i] = x[xo + ((b * ih + sy) * iw + sx) * c + ch];
}
