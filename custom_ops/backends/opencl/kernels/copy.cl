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

// copy_nd over 16-byte elements (uint4): the host uses it when the innermost (collapsed) dim is contiguous in
// source and destination, a multiple of 4 floats, unpadded, and every offset/stride is a multiple of 4 floats.
// Same meta layout as copy_nd, expressed in uint4 units; yo/xo in uint4 units.
__kernel void copy_nd_v4(__global uint4* y, int yo, __global const uint4* x, int xo, __global const int* m, int mo,
                         int n) {
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
  y[yo + dst] = inside ? x[xo + src] : (uint4)(0u);
}

// Batched 2-D transpose through a local tile (TRANSPOSE whose collapsed form swaps the last two dims, e.g.
// NHWC <-> NCHW, or K -> K^T per head): y[b][c][r] = x[b*sb + r*ld + c] for r < R, c < C; y dense [B, C, R].
// Work-group (TR_T, TR_ROWS); global (ceil(C/TR_T)*TR_T, ceil(R/TR_T)*TR_ROWS, B); both the reads (along c)
// and the writes (along r) are coalesced. TR_T / TR_ROWS are mirrored in gpu/copy_ops.cc.
// transpose_tiled(y, yo, x, xo, int R, int C, int sb, int ld)
#define TR_T 32
#define TR_ROWS 8
__kernel void transpose_tiled(__global uint* y, int yo, __global const uint* x, int xo, int R, int C, int sb, int ld) {
  __local uint tile[TR_T][TR_T + 1];
  const int b = get_global_id(2);
  const int c0 = get_group_id(0) * TR_T, r0 = get_group_id(1) * TR_T;
  const int tx = get_local_id(0), ty = get_local_id(1);
  __global const uint* xb = x + xo + b * sb;
  for (int k = ty; k < TR_T; k += TR_ROWS) {
    const int r = r0 + k, c = c0 + tx;
    if (r < R && c < C) tile[k][tx] = xb[r * ld + c];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  __global uint* yb = y + yo + b * R * C;
  for (int k = ty; k < TR_T; k += TR_ROWS) {
    const int c = c0 + k, r = r0 + tx;
    if (r < R && c < C) yb[c * R + r] = tile[tx][k];
  }
}

// resize_nearest on uint4 channel groups (C % 4 == 0, aligned offsets); c4 = C / 4, n in uint4 units.
__kernel void resize_nearest_v4(__global uint4* y, int yo, __global const uint4* x, int xo, int ih, int iw, int c4,
                                int oh, int ow, int align, int half_px, int n) {
  const int i = get_global_id(0);
  if (i >= n) return;
  const int ch = i % c4;
  const int ox = (i / c4) % ow;
  const int oy = (i / (c4 * ow)) % oh;
  const int b = i / (c4 * ow * oh);
  const int sy = sd_nearest(oy, ih, oh, align, half_px);
  const int sx = sd_nearest(ox, iw, ow, align, half_px);
  y[yo + i] = x[xo + ((b * ih + sy) * iw + sx) * c4 + ch];
}
