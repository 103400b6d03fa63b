#include "ops/conv2d_winograd/cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/cpu_simd.h"

namespace sdgpu {
namespace {

#include "ops/conv2d_winograd/matrices.inc"

constexpr int kMaxAlpha = 8;
constexpr int64_t kChannelBlock = 64;  // channels per transform task (vectorised inner loop)
constexpr int64_t kGemmCols = 256;     // output channels per accumulator block (direct conv)
constexpr int64_t kGemmRowsPerTask = 32;  // tiles per batched-GEMM task (cpu_gemm.inc)

struct Matrices {
  const double* at;  // m x a
  const double* g;   // a x 3
  const double* bt;  // a x a
};

Matrices MatricesFor(int m) {
  switch (m) {
    case 2: return {kF2_AT, kF2_G, kF2_BT};
    case 4: return {kF4_AT, kF4_G, kF4_BT};
    default: return {kF6_AT, kF6_G, kF6_BT};
  }
}

// Nonzero entries of a transform matrix by row: the transforms skip zero coefficients, which is what
// the planner's FLOP count (buffers.kernel_flops) assumes.
struct SparseRows {
  int count[kMaxAlpha] = {};
  int col[kMaxAlpha][kMaxAlpha] = {};
  float coef[kMaxAlpha][kMaxAlpha] = {};
};

SparseRows Sparse(const double* mat, int rows, int cols) {
  SparseRows s;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const double v = mat[r * cols + c];
      if (v != 0.0) {
        s.col[r][s.count[r]] = c;
        s.coef[r][s.count[r]] = static_cast<float>(v);  // dyadic rationals / small integers: exact
        ++s.count[r];
      }
    }
  }
  return s;
}

inline float Activate(ConvActivation act, float v) {
  switch (act) {
    case ConvActivation::kNone: return v;
    case ConvActivation::kRelu: return v > 0.0f ? v : 0.0f;
    case ConvActivation::kRelu6: return std::min(std::max(v, 0.0f), 6.0f);
    case ConvActivation::kReluN1To1: return std::min(std::max(v, -1.0f), 1.0f);
    case ConvActivation::kTanh: return std::tanh(v);
  }
  return v;
}

// out[c] = sum over the nonzeros (k, coef) of row `row`: coef * in[k * stride + c], c < nc.
inline void SparseRowCombine(const SparseRows& s, int row, const float* in, int64_t stride, int64_t nc,
                             float* __restrict out) {
  for (int64_t c = 0; c < nc; ++c) out[c] = 0.0f;
  for (int e = 0; e < s.count[row]; ++e) {
    const float coef = s.coef[row][e];
    const float* src = in + s.col[row][e] * stride;
    for (int64_t c = 0; c < nc; ++c) out[c] += coef * src[c];
  }
}

void InputTransform(const WinogradGeometry& g, const SparseRows& bt, const float* x, float* v, ThreadPool* pool) {
  const int a = g.alpha;
  const int64_t cblocks = (g.cin + kChannelBlock - 1) / kChannelBlock;
  const int64_t per_image = g.tiles_h * g.tiles_w;
  pool->ParallelFor(static_cast<size_t>(g.num_tiles * cblocks), [&](size_t task, int) {
    const int64_t t = static_cast<int64_t>(task) / cblocks;
    const int64_t c0 = (static_cast<int64_t>(task) % cblocks) * kChannelBlock;
    const int64_t nc = std::min(kChannelBlock, g.cin - c0);
    const int64_t n = t / per_image;
    const int64_t ty = (t % per_image) / g.tiles_w;
    const int64_t tx = t % g.tiles_w;
    const int64_t y0 = ty * g.m - g.pad;
    const int64_t x0 = tx * g.m - g.pad;
    alignas(64) float d[kMaxAlpha * kMaxAlpha * kChannelBlock];
    alignas(64) float tmp[kMaxAlpha * kMaxAlpha * kChannelBlock];
    // d[k][l][c]: the a x a input patch, zero outside the image (conv padding and whole-tile padding).
    for (int k = 0; k < a; ++k) {
      const int64_t yy = y0 + k;
      for (int l = 0; l < a; ++l) {
        const int64_t xx = x0 + l;
        float* dst = d + (k * a + l) * kChannelBlock;
        if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) {
          std::memset(dst, 0, sizeof(float) * nc);
        } else {
          std::memcpy(dst, x + ((n * g.h + yy) * g.w + xx) * g.cin + c0, sizeof(float) * nc);
        }
      }
    }
    // tmp[i][l] = sum_k BT[i][k] d[k][l]   (rows), then V[i][j] = sum_l tmp[i][l] BT[j][l]   (columns).
    for (int i = 0; i < a; ++i) {
      for (int l = 0; l < a; ++l) {
        SparseRowCombine(bt, i, d + l * kChannelBlock, a * kChannelBlock, nc, tmp + (i * a + l) * kChannelBlock);
      }
    }
    for (int i = 0; i < a; ++i) {
      for (int j = 0; j < a; ++j) {
        float* dst = v + ((int64_t{i} * a + j) * g.num_tiles + t) * g.cin + c0;
        SparseRowCombine(bt, j, tmp + i * a * kChannelBlock, kChannelBlock, nc, dst);
      }
    }
  });
}

void OutputTransform(const Conv2DWinogradAttrs& attrs, const WinogradGeometry& g, const SparseRows& at,
                     const float* mbuf, const float* bias, float* y, ThreadPool* pool) {
  const int a = g.alpha;
  const int m = g.m;
  const int64_t cblocks = (g.cout + kChannelBlock - 1) / kChannelBlock;
  const int64_t per_image = g.tiles_h * g.tiles_w;
  pool->ParallelFor(static_cast<size_t>(g.num_tiles * cblocks), [&](size_t task, int) {
    const int64_t t = static_cast<int64_t>(task) / cblocks;
    const int64_t c0 = (static_cast<int64_t>(task) % cblocks) * kChannelBlock;
    const int64_t nc = std::min(kChannelBlock, g.cout - c0);
    const int64_t n = t / per_image;
    const int64_t ty = (t % per_image) / g.tiles_w;
    const int64_t tx = t % g.tiles_w;
    alignas(64) float mm[kMaxAlpha * kMaxAlpha * kChannelBlock];
    alignas(64) float tmp[kMaxAlpha * kMaxAlpha * kChannelBlock];
    alignas(64) float out[kChannelBlock];
    for (int k = 0; k < a * a; ++k) {
      std::memcpy(mm + k * kChannelBlock, mbuf + (int64_t{k} * g.num_tiles + t) * g.cout + c0, sizeof(float) * nc);
    }
    // tmp[i][l] = sum_k AT[i][k] mm[k][l]  (m x a), then y[i][j] = sum_l tmp[i][l] AT[j][l]  (m x m).
    for (int i = 0; i < m; ++i) {
      for (int l = 0; l < a; ++l) {
        SparseRowCombine(at, i, mm + l * kChannelBlock, a * kChannelBlock, nc, tmp + (i * a + l) * kChannelBlock);
      }
    }
    for (int i = 0; i < m; ++i) {
      const int64_t oy = ty * m + i;
      if (oy >= g.ho) break;
      for (int j = 0; j < m; ++j) {
        const int64_t ox = tx * m + j;
        if (ox >= g.wo) break;
        SparseRowCombine(at, j, tmp + i * a * kChannelBlock, kChannelBlock, nc, out);
        float* dst = y + ((n * g.ho + oy) * g.wo + ox) * g.cout + c0;
        for (int64_t c = 0; c < nc; ++c) dst[c] = Activate(attrs.activation, out[c] + bias[c0 + c]);
      }
    }
  });
}

}  // namespace
}  // namespace sdgpu

#define SDGPU_SIMD_IMPL "ops/conv2d_winograd/cpu_gemm.inc"
#include "common/cpu_simd_instances.inc"

namespace sdgpu {
namespace {

void BatchedGemm(const WinogradGeometry& g, const float* v, const float* u, float* mout, ThreadPool* pool) {
  SelectIsa(&generic::RunBatchedGemm, &avx2::RunBatchedGemm, &avx512::RunBatchedGemm)(g, v, u, mout, pool);
}

}  // namespace

WinogradGeometry WinogradGeometryFor(const Conv2DWinogradAttrs& attrs, const Dims& x, const Dims& filter) {
  WinogradGeometry g;
  g.m = attrs.tile;
  g.alpha = attrs.tile + 2;
  g.n = x[0];
  g.h = x[1];
  g.w = x[2];
  g.cin = x[3];
  g.cout = filter[0];
  g.pad = attrs.same_padding ? 1 : 0;
  g.ho = attrs.same_padding ? g.h : g.h - 2;
  g.wo = attrs.same_padding ? g.w : g.w - 2;
  g.tiles_h = (g.ho + g.m - 1) / g.m;
  g.tiles_w = (g.wo + g.m - 1) / g.m;
  g.num_tiles = g.n * g.tiles_h * g.tiles_w;
  return g;
}

int64_t WinogradTransformedWeightElements(const WinogradGeometry& g) {
  return int64_t{g.alpha} * g.alpha * g.cin * g.cout;
}

size_t WinogradScratchBytes(const WinogradGeometry& g) {
  const int64_t a2 = int64_t{g.alpha} * g.alpha;
  return static_cast<size_t>(a2 * g.num_tiles * (g.cin + g.cout)) * sizeof(float);
}

void WinogradTransformWeights(const WinogradGeometry& g, const float* filter, float* u, ThreadPool* pool) {
  const Matrices mats = MatricesFor(g.m);
  const int a = g.alpha;
  pool->ParallelFor(static_cast<size_t>(g.cout), [&](size_t task, int) {
    const int64_t co = static_cast<int64_t>(task);
    for (int64_t ci = 0; ci < g.cin; ++ci) {
      double f[3][3];
      for (int r = 0; r < 3; ++r) {
        for (int s = 0; s < 3; ++s) f[r][s] = filter[((co * 3 + r) * 3 + s) * g.cin + ci];
      }
      double gf[kMaxAlpha][3];  // G f
      for (int i = 0; i < a; ++i) {
        for (int s = 0; s < 3; ++s) {
          gf[i][s] = mats.g[i * 3 + 0] * f[0][s] + mats.g[i * 3 + 1] * f[1][s] + mats.g[i * 3 + 2] * f[2][s];
        }
      }
      for (int i = 0; i < a; ++i) {
        for (int j = 0; j < a; ++j) {  // (G f) G^T
          const double val = gf[i][0] * mats.g[j * 3 + 0] + gf[i][1] * mats.g[j * 3 + 1] + gf[i][2] * mats.g[j * 3 + 2];
          u[((int64_t{i} * a + j) * g.cin + ci) * g.cout + co] = static_cast<float>(val);
        }
      }
    }
  });
}

void WinogradConvCpu(const Conv2DWinogradAttrs& attrs, const WinogradGeometry& g, const float* x, const float* u,
                     const float* bias, float* y, void* scratch, ThreadPool* pool) {
  const Matrices mats = MatricesFor(g.m);
  const SparseRows bt = Sparse(mats.bt, g.alpha, g.alpha);
  const SparseRows at = Sparse(mats.at, g.m, g.alpha);
  const int64_t a2 = int64_t{g.alpha} * g.alpha;
  float* v = static_cast<float*>(scratch);
  float* mbuf = v + a2 * g.num_tiles * g.cin;
  InputTransform(g, bt, x, v, pool);
  BatchedGemm(g, v, u, mbuf, pool);
  OutputTransform(attrs, g, at, mbuf, bias, y, pool);
}

DirectConvGeometry DirectConvGeometryFor(const Dims& x, const Dims& filter, int64_t stride_h, int64_t stride_w,
                                         int64_t dilation_h, int64_t dilation_w, bool same_padding) {
  DirectConvGeometry g;
  g.n = x[0];
  g.h = x[1];
  g.w = x[2];
  g.cin = x[3];
  g.cout = filter[0];
  g.kh = filter[1];
  g.kw = filter[2];
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  g.dilation_h = dilation_h;
  g.dilation_w = dilation_w;
  const int64_t eff_h = (g.kh - 1) * dilation_h + 1;
  const int64_t eff_w = (g.kw - 1) * dilation_w + 1;
  if (same_padding) {
    g.ho = (g.h + stride_h - 1) / stride_h;
    g.wo = (g.w + stride_w - 1) / stride_w;
    g.pad_top = std::max<int64_t>((g.ho - 1) * stride_h + eff_h - g.h, 0) / 2;
    g.pad_left = std::max<int64_t>((g.wo - 1) * stride_w + eff_w - g.w, 0) / 2;
  } else {
    g.ho = std::max<int64_t>((g.h - eff_h + stride_h) / stride_h, 0);
    g.wo = std::max<int64_t>((g.w - eff_w + stride_w) / stride_w, 0);
  }
  return g;
}

void DirectConvRearrangeWeights(const DirectConvGeometry& g, const float* filter, float* hwio) {
  for (int64_t co = 0; co < g.cout; ++co) {
    for (int64_t r = 0; r < g.kh; ++r) {
      for (int64_t s = 0; s < g.kw; ++s) {
        for (int64_t ci = 0; ci < g.cin; ++ci) {
          hwio[((r * g.kw + s) * g.cin + ci) * g.cout + co] = filter[((co * g.kh + r) * g.kw + s) * g.cin + ci];
        }
      }
    }
  }
}

void DirectConvCpu(const DirectConvGeometry& g, ConvActivation activation, const float* x, const float* hwio,
                   const float* bias, float* y, ThreadPool* pool) {
  pool->ParallelFor(static_cast<size_t>(g.n * g.ho), [&](size_t task, int) {
    const int64_t n = static_cast<int64_t>(task) / g.ho;
    const int64_t oy = static_cast<int64_t>(task) % g.ho;
    alignas(64) float acc[kGemmCols];
    for (int64_t ox = 0; ox < g.wo; ++ox) {
      float* dst = y + ((n * g.ho + oy) * g.wo + ox) * g.cout;
      for (int64_t co0 = 0; co0 < g.cout; co0 += kGemmCols) {
        const int64_t nc = std::min(kGemmCols, g.cout - co0);
        for (int64_t c = 0; c < nc; ++c) acc[c] = 0.0f;
        for (int64_t r = 0; r < g.kh; ++r) {
          const int64_t iy = oy * g.stride_h - g.pad_top + r * g.dilation_h;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t s = 0; s < g.kw; ++s) {
            const int64_t ix = ox * g.stride_w - g.pad_left + s * g.dilation_w;
            if (ix < 0 || ix >= g.w) continue;
            const float* px = x + ((n * g.h + iy) * g.w + ix) * g.cin;
            const float* wk = hwio + (r * g.kw + s) * g.cin * g.cout + co0;
            for (int64_t ci = 0; ci < g.cin; ++ci) {
              const float xv = px[ci];
              const float* wrow = wk + ci * g.cout;
              for (int64_t c = 0; c < nc; ++c) acc[c] += xv * wrow[c];
            }
          }
        }
        for (int64_t c = 0; c < nc; ++c) {
          dst[co0 + c] = Activate(activation, acc[c] + (bias != nullptr ? bias[co0 + c] : 0.0f));
        }
      }
    }
  });
}

}  // namespace sdgpu
