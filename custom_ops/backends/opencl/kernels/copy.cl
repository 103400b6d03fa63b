// Layout kernels over 4-byte elements (float or int32 bit patterns):
// TRANSPOSE, BROADCAST_TO, SLICE/STRIDED_SLICE, PAD, CONCATENATION, RESHAPE
// are all one strided N-d copy; GATHER/EMBEDDING_LOOKUP and
// RESIZE_NEAREST_NEIGHBOR have their own index maps.
// meta m: [rank, out_dims[MAXR], src_strides[MAXR], lo[MAXR], src_dims[MAXR], dst_strides[MAXR]]
// Output coordinate c reads source coordinate c - lo (zero outside [0, src_dims)).

__kernel void copy_nd(__global uint* y, int yo, __global const uint* x, int xo, __global const int* m, int mo, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  m += mo;
  const int rank = m[0];
  int rem = i, src = 0, dst = 0;
  bool inside = true;
  for (int d = rank - 1; d >= 0; --d) {
    const int dim = m[1 + d];
    const int c = rem % dim;
    rem /= dim;
    const int ci = c - m[1 + 2 * MAXR + d];
    inside = inside && ci >= 0 && ci < m[1 + 3 * MAXR + d];
    src += ci * m[1 + MAXR + d];
    dst += c * m[1 + 4 * MAXR + d];
  }
  y[yo + dst] = inside ? x[xo + src] : 0u;
}

// y[o, j, k] = params[o, idx[j], k]; out-of-range indices give zeros.
__kernel void gather_rows(__global uint* y, int yo, __global const uint* p, int po, __global const int* idx, int io,
                          int axis_dim, int nidx, int inner, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int k = i % inner;
  const int j = (i / inner) % nidx;
  const int o = i / (inner * nidx);
  const int r = idx[io + j];
  y[yo + i] = (r >= 0 && r < axis_dim) ? p[po + (o * axis_dim + r) * inner + k] : 0u;
}

inline int sd_nearest(int o, int in_size, int out_size, int align, int half_px) {
  const float scale = (align && out_size > 1) ? (float)(in_size - 1) / (float)(out_size - 1)
                                              : (float)in_size / (float)out_size;
  const float off = half_px ? 0.5f : 0.0f;
  int v = align ? (int)round((o + off) * scale) : (int)floor((o + off) * scale);
  v = min(v, in_size - 1);
  return half_px ? max(v, 0) : v;
}

// NHWC nearest-neighbour resize with TFLite's align_corners / half_pixel_centers rules.
__kernel void resize_nearest(__global uint* y, int yo, __global const uint* x, int xo, int ih, int iw, int c,
                             int oh, int ow, int align, int half_px, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int ch = i % c;
  const int ox = (i / c) % ow;
  const int oy = (i / (c * ow)) % oh;
  const int b = i / (c * ow * oh);
  const int sy = sd_nearest(oy, ih, oh, align, half_px);
  const int sx = sd_nearest(ox, iw, ow, align, half_px);
  y[yo + i] = x[xo + ((b * ih + sy) * iw + sx) * c + ch];
}
