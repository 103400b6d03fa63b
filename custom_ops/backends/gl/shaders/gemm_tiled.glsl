// Register-blocked tiled GEMM and implicit-GEMM convolution: GLSL port of
// backends/opencl/kernels/gemm_tiled.cl (same kernel names, parameters and tiling; see that file and
// gpu/matmul_ops.cc for the design and the host's choice of instance).
//
// One 16 x 16 work-group computes a BM x BN tile of C; invocation (tx, ty) owns a (BM/16) x (BN/16)
// micro-tile held as vec4 rows (rows ty*4 + q*64, columns tx*4 + q*64). K advances in GT_BK = 16 steps:
// each step stages a BM x 16 A tile and a 16 x BN B tile in shared memory (k-major rows padded by GT_PAD
// floats: an odd number of vec4s per row) while the next step's global loads go to registers.
// Instances: gemm_t64x64 / gemm_t128x64 / gemm_t128x128 (strided GEMM), conv_t64x64 / conv_t128x64 /
// conv_t128x128 (NHWC implicit GEMM, Ci % 16 == 0), gemm_splitk_reduce. Each instance #defines BM and BN
// and pastes the shared fragments below. B may be half (b_half = 1): the B buffer is then read as 32-bit
// words (two halves each) through the second view `Bh` of binding 2, offsets and strides in halves.
// Arithmetic is always fp32.
#define GT_BK 16
#define GT_PAD 4

//== fragment gt_core
// Needs: BM, BN; buffers A, B / Bh, C, bias; uniforms sbk, sbn, b_half, biaso, has_bias, act, splits,
// k_split; the instance's gt_fetch_a(kt) / gt_advance() come after this fragment.
#define GT_AS4 ((BM + GT_PAD) / 4)
#define GT_BS4 ((BN + GT_PAD) / 4)
shared vec4 As4[GT_BK * GT_AS4];
shared vec4 Bs4[GT_BK * GT_BS4];
// Per-invocation state (private globals: registers once the constant-trip loops are unrolled).
vec4 acc[BM / 16][BN / 64];
float ra[BM / 16];
float rb[BN / 16];
int tx, ty, lid, n0, m0, bz, sz, kbeg, kend, bbase;
int gM, gN, gK;
float galpha;
bool a_mc, b_nc;

float gt_ldb(int i) { return b_half != 0 ? unpackHalf2x16(Bh[i >> 1])[i & 1] : B[i]; }

// Ids, split-K range and zeroed accumulators; gM/gN/gK/galpha must be set.
void gt_init() {
  tx = sd_local_id(0);
  ty = sd_local_id(1);
  lid = ty * 16 + tx;
  n0 = sd_group_id(0) * BN;
  m0 = sd_group_id(1) * BM;
  int z = sd_group_id(2);
  bz = z / splits;
  sz = z - bz * splits;
  kbeg = sz * k_split;
  kend = min(gK, kbeg + k_split);
  for (int i = 0; i < BM / 16; ++i)
    for (int j = 0; j < BN / 64; ++j) acc[i][j] = vec4(0.0);
  b_nc = sbn == 1;  // B loader along n when n is contiguous, else along k (coalesced either way)
}

// Global -> registers: B tile rows [kt, kt + 16) x columns [n0, n0 + BN).
void gt_fetch_b(int kt) {
  for (int p = 0; p < BN / 16; ++p) {
    int kk = b_nc ? lid / BN + p * (256 / BN) : (lid & 15);
    int c = b_nc ? lid % BN : (lid >> 4) + p * 16;
    int k = kt + kk, n = n0 + c;
    rb[p] = (k < kend && n < gN) ? gt_ldb(bbase + k * sbk + n * sbn) : 0.0;
  }
}

// Registers -> shared: A[kk][r] and B[kk][c] (k-major, vec4-readable rows).
void gt_store() {
  for (int p = 0; p < BM / 16; ++p) {
    int kk = a_mc ? lid / BM + p * (256 / BM) : (lid & 15);
    int r = a_mc ? lid % BM : (lid >> 4) + p * 16;
    int idx = kk * (BM + GT_PAD) + r;
    As4[idx >> 2][idx & 3] = ra[p];
  }
  for (int p = 0; p < BN / 16; ++p) {
    int kk = b_nc ? lid / BN + p * (256 / BN) : (lid & 15);
    int c = b_nc ? lid % BN : (lid >> 4) + p * 16;
    int idx = kk * (BN + GT_PAD) + c;
    Bs4[idx >> 2][idx & 3] = rb[p];
  }
}

// 16 rank-1 updates of the micro-tile from the staged tiles.
void gt_compute() {
  for (int kk = 0; kk < GT_BK; ++kk) {
    vec4 av[BM / 64];
    vec4 bv[BN / 64];
    for (int q = 0; q < BM / 64; ++q) av[q] = As4[kk * GT_AS4 + q * 16 + ty];
    for (int q = 0; q < BN / 64; ++q) bv[q] = Bs4[kk * GT_BS4 + q * 16 + tx];
    for (int q = 0; q < BM / 64; ++q) {
      for (int j = 0; j < BN / 64; ++j) {
        acc[q * 4 + 0][j] += av[q].x * bv[j];
        acc[q * 4 + 1][j] += av[q].y * bv[j];
        acc[q * 4 + 2][j] += av[q].z * bv[j];
        acc[q * 4 + 3][j] += av[q].w * bv[j];
      }
    }
  }
}

// C[cbase + m * ldc + n] = act(alpha * acc + bias[n]) for the in-range part of the micro-tile.
void gt_epilogue(int cbase, int ldc, int ncols) {
  for (int j = 0; j < BN / 64; ++j) {
    int n = n0 + j * 64 + tx * 4;
    if (n >= ncols) continue;
    vec4 bj = vec4(0.0);
    if (has_bias != 0) {
      bj.x = bias[biaso + n];
      if (n + 1 < ncols) bj.y = bias[biaso + n + 1];
      if (n + 2 < ncols) bj.z = bias[biaso + n + 2];
      if (n + 3 < ncols) bj.w = bias[biaso + n + 3];
    }
    for (int i = 0; i < BM / 16; ++i) {
      int m = m0 + (i >> 2) * 64 + ty * 4 + (i & 3);
      if (m >= gM) continue;
      vec4 v = galpha * acc[i][j] + bj;
      int dst = cbase + m * ldc + n;
      C[dst] = sd_act(v.x, act);
      if (n + 1 < ncols) C[dst + 1] = sd_act(v.y, act);
      if (n + 2 < ncols) C[dst + 2] = sd_act(v.z, act);
      if (n + 3 < ncols) C[dst + 3] = sd_act(v.w, act);
    }
  }
}

//== fragment gt_main_loop
// The k-loop with register double buffering (pasted into main: barriers stay in main).
  if (kbeg < kend) {
    gt_fetch_a(kbeg);
    gt_fetch_b(kbeg);
    for (int kt = kbeg; kt < kend; kt += GT_BK) {
      gt_store();
      SD_BARRIER();
      if (kt + GT_BK < kend) {
        gt_advance();
        gt_fetch_a(kt + GT_BK);
        gt_fetch_b(kt + GT_BK);
      }
      gt_compute();
      SD_BARRIER();
    }
  }

//== fragment gemm_tiled
// gemm_tBMxBN(C, co, int scb, int scs, int scm, A, ao, int sab, int sam, int sak, B, bo, int sbb, int sbk,
//             int sbn, int b_half, bias, biaso, int has_bias, int M, int N, int K, float alpha, int act,
//             int splits, int k_split): C[b, m, n] (at co + b*scb + split*scs + m*scm + n) =
// act(alpha * sum_k A[b, m, k] B[b, k, n] + bias[n]); global = (ceil(N/BN)*16, ceil(M/BM)*16, batch*splits).
layout(std430, binding = 0) writeonly buffer B0 { float C[]; };
layout(std430, binding = 1) readonly buffer B1 { float A[]; };
layout(std430, binding = 2) readonly buffer B2 { float B[]; };
layout(std430, binding = 2) readonly buffer B2h { uint Bh[]; };
layout(std430, binding = 3) readonly buffer B3 { float bias[]; };
layout(location = 0) uniform int co;
layout(location = 1) uniform int scb;
layout(location = 2) uniform int scs;
layout(location = 3) uniform int scm;
layout(location = 4) uniform int ao;
layout(location = 5) uniform int sab;
layout(location = 6) uniform int sam;
layout(location = 7) uniform int sak;
layout(location = 8) uniform int bo;
layout(location = 9) uniform int sbb;
layout(location = 10) uniform int sbk;
layout(location = 11) uniform int sbn;
layout(location = 12) uniform int b_half;
layout(location = 13) uniform int biaso;
layout(location = 14) uniform int has_bias;
layout(location = 15) uniform int M;
layout(location = 16) uniform int N;
layout(location = 17) uniform int K;
layout(location = 18) uniform float alpha;
layout(location = 19) uniform int act;
layout(location = 20) uniform int splits;
layout(location = 21) uniform int k_split;
//== include gt_core
int abase;
void gt_fetch_a(int kt) {
  for (int p = 0; p < BM / 16; ++p) {
    int kk = a_mc ? lid / BM + p * (256 / BM) : (lid & 15);
    int r = a_mc ? lid % BM : (lid >> 4) + p * 16;
    int k = kt + kk, m = m0 + r;
    ra[p] = (k < kend && m < M) ? A[abase + m * sam + k * sak] : 0.0;
  }
}
void gt_advance() {}
void main() {
  gM = M;
  gN = N;
  gK = K;
  galpha = alpha;
  gt_init();
  abase = ao + bz * sab;
  bbase = bo + bz * sbb;
  a_mc = sak != 1 && sam == 1;  // A loader along m when m is the contiguous axis
//== include gt_main_loop
  gt_epilogue(co + bz * scb + sz * scs, scm, N);
}

//== fragment conv_tiled
// conv_tBMxBN(Y, yo, int scs, X, xo, B, bo, int sbk, int sbn, int b_half, bias, biaso, int has_bias,
//             int H, int Wd, int Ci, int OH, int OW, int Co, int KH, int KW, int sh, int sw, int dh, int dw,
//             int ph, int pw, int M, int act, int splits, int k_split): NHWC x, weights as a K x Co matrix
// with k = (ky, kx, ci) at B[bo + k*sbk + co*sbn]; rows m = (image, oy, ox). Needs Ci % 16 == 0 so a K
// step has one (ky, kx). Global = (ceil(Co/BN)*16, ceil(M/BM)*16, splits). (Y and X are called C and A
// here so the shared fragment can address them.)
layout(std430, binding = 0) writeonly buffer B0 { float C[]; };
layout(std430, binding = 1) readonly buffer B1 { float A[]; };
layout(std430, binding = 2) readonly buffer B2 { float B[]; };
layout(std430, binding = 2) readonly buffer B2h { uint Bh[]; };
layout(std430, binding = 3) readonly buffer B3 { float bias[]; };
layout(location = 0) uniform int yo;
layout(location = 1) uniform int scs;
layout(location = 2) uniform int xo;
layout(location = 3) uniform int bo;
layout(location = 4) uniform int sbk;
layout(location = 5) uniform int sbn;
layout(location = 6) uniform int b_half;
layout(location = 7) uniform int biaso;
layout(location = 8) uniform int has_bias;
layout(location = 9) uniform int H;
layout(location = 10) uniform int Wd;
layout(location = 11) uniform int Ci;
layout(location = 12) uniform int OH;
layout(location = 13) uniform int OW;
layout(location = 14) uniform int Co;
layout(location = 15) uniform int KH;
layout(location = 16) uniform int KW;
layout(location = 17) uniform int sh;
layout(location = 18) uniform int sw;
layout(location = 19) uniform int dh;
layout(location = 20) uniform int dw;
layout(location = 21) uniform int ph;
layout(location = 22) uniform int pw;
layout(location = 23) uniform int M;
layout(location = 24) uniform int act;
layout(location = 25) uniform int splits;
layout(location = 26) uniform int k_split;
//== include gt_core
// rows[r] = (pixel offset of (iy0, ix0), iy0, ix0, row valid) for output row m0 + r
shared ivec4 rows[BM];
int ky, kx, ci0;
void gt_fetch_a(int kt) {
  for (int p = 0; p < BM / 16; ++p) {
    ivec4 ri = rows[(lid >> 4) + p * 16];
    int iy = ri.y + ky * dh, ix = ri.z + kx * dw;
    ra[p] = (ri.w != 0 && iy >= 0 && iy < H && ix >= 0 && ix < Wd)
                ? A[ri.x + (ky * dh * Wd + kx * dw) * Ci + ci0 + (lid & 15)]
                : 0.0;
  }
}
void gt_advance() {
  ci0 += GT_BK;
  if (ci0 == Ci) {
    ci0 = 0;
    if (++kx == KW) {
      kx = 0;
      ++ky;
    }
  }
}
void main() {
  gM = M;
  gN = Co;
  gK = KH * KW * Ci;
  galpha = 1.0;
  gt_init();
  bbase = bo;
  a_mc = false;
  if (lid < BM) {
    int m = m0 + lid;
    int ox = m % OW, t = m / OW, oy = t % OH, img = t / OH;
    int iy0 = oy * sh - ph, ix0 = ox * sw - pw;
    rows[lid] = ivec4(xo + ((img * H + iy0) * Wd + ix0) * Ci, iy0, ix0, m < M ? 1 : 0);
  }
  SD_BARRIER();
  ky = kbeg / (KW * Ci);
  kx = (kbeg / Ci) % KW;
  ci0 = kbeg % Ci;
//== include gt_main_loop
  gt_epilogue(yo + sz * scs, Co, Co);
}

//== kernel gemm_t64x64
#define BM 64
#define BN 64
//== include gemm_tiled

//== kernel gemm_t128x64
#define BM 128
#define BN 64
//== include gemm_tiled

//== kernel gemm_t128x128
#define BM 128
#define BN 128
//== include gemm_tiled

//== kernel conv_t64x64
#define BM 64
#define BN 64
//== include conv_tiled

//== kernel conv_t128x64
#define BM 128
#define BN 64
//== include conv_tiled

//== kernel conv_t128x128
#define BM 128
#define BN 128
//== include conv_tiled

//== kernel gemm_splitk_reduce
// gemm_splitk_reduce(C, co, int scb, int scm, P, po, int splits, bias, biaso, int has_bias, int M, int N,
//                    int act): C[b, m, n] = act(sum_s P[((b*splits + s)*M + m)*N + n] + bias[n]);
// global = (N, M, batch), local 16 x 16.
layout(std430, binding = 0) writeonly buffer B0 { float C[]; };
layout(std430, binding = 1) readonly buffer B1 { float P[]; };
layout(std430, binding = 2) readonly buffer B2 { float bias[]; };
layout(location = 0) uniform int co;
layout(location = 1) uniform int scb;
layout(location = 2) uniform int scm;
layout(location = 3) uniform int po;
layout(location = 4) uniform int splits;
layout(location = 5) uniform int biaso;
layout(location = 6) uniform int has_bias;
layout(location = 7) uniform int M;
layout(location = 8) uniform int N;
layout(location = 9) uniform int act;
void main() {
  int n = sd_global_id(0), m = sd_global_id(1), b = sd_global_id(2);
  if (n >= N || m >= M) return;
  int plane = M * N;
  int i = po + b * splits * plane + m * N + n;
  float v = has_bias != 0 ? bias[biaso + n] : 0.0;
  for (int s = 0; s < splits; ++s, i += plane) v += P[i];
  C[co + b * scb + m * scm + n] = sd_act(v, act);
}
