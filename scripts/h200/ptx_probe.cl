// Inline-PTX tensor-core probe (NVIDIA OpenCL only; ptx_probe.py): does the driver's OpenCL compiler take
// mma.sync (TF32, m16n8k8), and at what rate. Fragment layout of mma.m16n8k8 .tf32 (PTX ISA), g = lane / 4,
// t = lane % 4: A (16 x 8, row) a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); B (8 x 8, col)
// b0 (k = t, n = g), b1 (k = t + 4, n = g); C/D (16 x 8) c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1).

inline uint tf32(float x) {
  uint r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

inline void mma(float* d, const uint* a, const uint* b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One warp: D (16 x 8) = A (16 x 8, row-major) B (8 x 8, row-major [k][n]); split = 1: one TF32 product;
// 3: the 3xTF32 split (a = big + small; big*big + big*small + small*big, fp32 accumulation).
__kernel void mma_tile(__global float* D, __global const float* A, __global const float* B, int split) {
  const int lane = get_local_id(0) & 31, g = lane >> 2, t = lane & 3;
  const float af[4] = {A[g * 8 + t], A[(g + 8) * 8 + t], A[g * 8 + t + 4], A[(g + 8) * 8 + t + 4]};
  const float bf[2] = {B[t * 8 + g], B[(t + 4) * 8 + g]};
  uint ab[4], as[4], bb[2], bs[2];
  for (int i = 0; i < 4; ++i) {
    ab[i] = tf32(af[i]);
    as[i] = tf32(af[i] - as_float(ab[i]));
  }
  for (int i = 0; i < 2; ++i) {
    bb[i] = tf32(bf[i]);
    bs[i] = tf32(bf[i] - as_float(bb[i]));
  }
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (split == 3) {
    mma(d, as, bb);
    mma(d, ab, bs);
  }
  mma(d, ab, bb);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// Issue rate: every warp runs `iters` rounds of 8 independent mma.sync on register fragments.
__kernel void mma_rate(__global float* out, int iters, float seed) {
  const int lane = get_local_id(0) & 31;
  uint a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = tf32(seed * (lane + i));
  for (int i = 0; i < 2; ++i) b[i] = tf32(seed * (lane - i));
  float d[8][4];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 4; ++i) d[j][i] = 0.0f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < 8; ++j) mma(d[j], a, b);
  }
  float s = 0.0f;
  for (int j = 0; j < 8; ++j) s += d[j][0] + d[j][1] + d[j][2] + d[j][3];
  out[get_global_id(0)] = s;
}

// The fp32 FMA issue rate for comparison: 16 independent chains per work-item.
__kernel void ffma_rate(__global float* out, int iters, float seed) {
  float acc[16];
  for (int j = 0; j < 16; ++j) acc[j] = seed * j;
  const float m = seed * 0.5f, c = seed * 0.25f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[j] = mad(acc[j], m, c);
  }
  float s = 0.0f;
  for (int j = 0; j < 16; ++j) s += acc[j];
  out[get_global_id(0)] = s;
}
