// The CPU conv kernels (Winograd F(2x2), F(4x4), F(6x6) and the direct conv) against a float64 direct convolution,
// through the test entry points of custom_ops/ops/conv2d_winograd/testing_c_api.cc: the C++ counterpart of
// tests/native/test_winograd_kernels.py, for the aarch64 build under qemu as much as for x86-64.
//
// Bound, per output: |y - exact| <= C * u * S + u * |exact|, with S = sum |x||w| + |bias| over the receptive field,
// u = 2^-24 and C = K + 1 for the direct conv with K = kh * kw * Cin terms (the dot-product bound), times a Winograd
// amplification for its tile (F2 1, F4 10, F6 100: the transforms' constants grow with the tile). Not a tight bound:
// the kernels stay below 5% of it on x86-64 (AVX2) and aarch64 (NEON, qemu), while a wrong transform, tile edge or
// activation misses it by orders of magnitude.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tests/native_cc/op_cases.h"

extern "C" {
int sdwino_winograd_conv(int tile, int same_padding, int activation, int num_threads, const float* x, int64_t n,
                         int64_t h, int64_t w, int64_t cin, const float* filter, int64_t cout, const float* bias,
                         float* y, int64_t* scratch_bytes, int64_t* transformed_weight_elements);
int sdwino_direct_conv(int same_padding, int activation, int num_threads, int64_t stride_h, int64_t stride_w,
                       int64_t dilation_h, int64_t dilation_w, const float* x, int64_t n, int64_t h, int64_t w,
                       int64_t cin, const float* filter, int64_t cout, int64_t kh, int64_t kw, const float* bias,
                       float* y);
}

namespace {

constexpr double kU = 1.0 / 16777216.0;  // float32 unit roundoff
const char* const kActivations[] = {"none", "relu", "relu6", "relu_n1_to_1", "tanh"};
int g_failures = 0;

struct Conv {
  int64_t n, h, w, cin, cout, kh = 3, kw = 3, stride = 1, dilation = 1;
  bool same = true;
  int activation = 0;
  int64_t OutH() const { return same ? (h + stride - 1) / stride : (h - (kh - 1) * dilation - 1) / stride + 1; }
  int64_t OutW() const { return same ? (w + stride - 1) / stride : (w - (kw - 1) * dilation - 1) / stride + 1; }
};

double Activate(int act, double v) {
  switch (act) {
    case 1: return std::fmax(v, 0.0);
    case 2: return std::fmin(std::fmax(v, 0.0), 6.0);
    case 3: return std::fmin(std::fmax(v, -1.0), 1.0);
    case 4: return std::tanh(v);
    default: return v;
  }
}

// float64 direct conv (TFLite SAME padding: the extra row/column goes after) and S = sum |x||w| + |b| per output.
void Reference(const Conv& c, const std::vector<float>& x, const std::vector<float>& f, const std::vector<float>& b,
               std::vector<double>* y, std::vector<double>* s) {
  const int64_t ho = c.OutH(), wo = c.OutW();
  const int64_t eh = (c.kh - 1) * c.dilation + 1, ew = (c.kw - 1) * c.dilation + 1;
  const int64_t pad_t = c.same ? std::max<int64_t>((ho - 1) * c.stride + eh - c.h, 0) / 2 : 0;
  const int64_t pad_l = c.same ? std::max<int64_t>((wo - 1) * c.stride + ew - c.w, 0) / 2 : 0;
  y->assign(c.n * ho * wo * c.cout, 0.0);
  s->assign(y->size(), 0.0);
  for (int64_t b_ = 0; b_ < c.n; ++b_)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox)
        for (int64_t co = 0; co < c.cout; ++co) {
          double acc = b[co], mag = std::fabs(b[co]);
          for (int64_t ky = 0; ky < c.kh; ++ky)
            for (int64_t kx = 0; kx < c.kw; ++kx) {
              const int64_t iy = oy * c.stride + ky * c.dilation - pad_t, ix = ox * c.stride + kx * c.dilation - pad_l;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
              for (int64_t ci = 0; ci < c.cin; ++ci) {
                const double xv = x[((b_ * c.h + iy) * c.w + ix) * c.cin + ci];
                const double wv = f[((co * c.kh + ky) * c.kw + kx) * c.cin + ci];
                acc += xv * wv;
                mag += std::fabs(xv * wv);
              }
            }
          const size_t o = static_cast<size_t>(((b_ * ho + oy) * wo + ox) * c.cout + co);
          (*y)[o] = Activate(c.activation, acc);
          (*s)[o] = mag;
        }
}

void Compare(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
             const std::vector<double>& s, double amplification, int64_t terms) {
  const double c = amplification * (static_cast<double>(terms) + 1.0);
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = c * kU * s[i] + kU * std::fabs(want[i]);
    const double err = std::fabs(got[i] - want[i]);
    if (!(err <= bound)) {
      std::printf("FAIL %s: output %zu = %.9g, expected %.9g (|diff| %.3g > bound %.3g)\n", what.c_str(), i, got[i],
                  want[i], err, bound);
      ++g_failures;
      return;
    }
    if (bound > 0) worst = std::fmax(worst, err / bound);
  }
  std::printf("ok   %-52s worst error %.3f of the bound\n", what.c_str(), worst);
}

std::vector<float> Data(uint64_t seed, int64_t n, double scale) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * sdtest::Uniform(seed, i));
  return v;
}

std::string Describe(const Conv& c) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%lldx%lldx%lldx%lld -> %lld %s s%lld d%lld %s", (long long)c.n, (long long)c.h,
                (long long)c.w, (long long)c.cin, (long long)c.cout, c.same ? "SAME" : "VALID", (long long)c.stride,
                (long long)c.dilation, kActivations[c.activation]);
  return buf;
}

void TestWinograd(const Conv& c, int tile, double amplification, uint64_t seed) {
  const std::vector<float> x = Data(seed, c.n * c.h * c.w * c.cin, 1.0);
  const std::vector<float> f = Data(seed + 1, c.cout * 9 * c.cin, 1.0 / std::sqrt(9.0 * c.cin));
  const std::vector<float> b = Data(seed + 2, c.cout, 0.1);
  std::vector<double> want, s;
  Reference(c, x, f, b, &want, &s);
  std::vector<float> y(want.size(), std::nanf(""));
  int64_t scratch = 0, transformed = 0;
  const int rc = sdwino_winograd_conv(tile, c.same, c.activation, 2, x.data(), c.n, c.h, c.w, c.cin, f.data(), c.cout,
                                      b.data(), y.data(), &scratch, &transformed);
  const std::string what = "winograd F" + std::to_string(tile) + " " + Describe(c);
  if (rc != 0) {
    std::printf("FAIL %s: returned %d\n", what.c_str(), rc);
    ++g_failures;
    return;
  }
  const int64_t a = tile + 2;
  if (transformed != a * a * c.cin * c.cout) {
    std::printf("FAIL %s: %lld transformed weights, expected %lld\n", what.c_str(), (long long)transformed,
                (long long)(a * a * c.cin * c.cout));
    ++g_failures;
  }
  Compare(what, y, want, s, amplification, 9 * c.cin);
}

void TestDirect(const Conv& c, uint64_t seed) {
  const std::vector<float> x = Data(seed, c.n * c.h * c.w * c.cin, 1.0);
  const std::vector<float> f = Data(seed + 1, c.cout * c.kh * c.kw * c.cin, 1.0 / std::sqrt(9.0 * c.cin));
  const std::vector<float> b = Data(seed + 2, c.cout, 0.1);
  std::vector<double> want, s;
  Reference(c, x, f, b, &want, &s);
  std::vector<float> y(want.size(), std::nanf(""));
  const int rc = sdwino_direct_conv(c.same, c.activation, 2, c.stride, c.stride, c.dilation, c.dilation, x.data(), c.n,
                                    c.h, c.w, c.cin, f.data(), c.cout, c.kh, c.kw, b.data(), y.data());
  const std::string what = "direct " + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " " + Describe(c);
  if (rc != 0) {
    std::printf("FAIL %s: returned %d\n", what.c_str(), rc);
    ++g_failures;
    return;
  }
  Compare(what, y, want, s, 1.0, c.kh * c.kw * c.cin);
}

}  // namespace

int main() {
  // Odd sizes (partial tiles at the right and bottom), channel counts off the SIMD width, batch 2.
  const Conv shapes[] = {{1, 8, 8, 32, 32}, {2, 7, 9, 5, 6}, {1, 13, 11, 17, 19}, {1, 4, 4, 64, 64}};
  const double amplification[] = {0, 0, 1, 0, 10, 0, 100};  // by tile
  uint64_t seed = 1;
  for (int tile : {2, 4, 6}) {
    for (Conv c : shapes) {
      TestWinograd(c, tile, amplification[tile], seed += 10);
      c.same = false;
      c.activation = tile == 4 ? 4 : 1;  // VALID with tanh / relu
      TestWinograd(c, tile, amplification[tile], seed += 10);
    }
  }
  for (int act = 0; act < 5; ++act) {
    Conv c{1, 9, 10, 8, 12};
    c.activation = act;
    TestWinograd(c, 4, amplification[4], seed += 10);
  }
  // The direct path: strides, dilations, 1x1 and 5x5 filters.
  Conv d1{1, 9, 10, 8, 12};
  d1.stride = 2;
  TestDirect(d1, seed += 10);
  Conv d2{1, 12, 12, 6, 7};
  d2.dilation = 2;
  d2.same = false;
  TestDirect(d2, seed += 10);
  Conv d3{2, 5, 6, 16, 8};
  d3.kh = d3.kw = 1;
  TestDirect(d3, seed += 10);
  Conv d4{1, 11, 9, 9, 10};
  d4.kh = d4.kw = 5;
  d4.activation = 2;
  TestDirect(d4, seed += 10);
  std::printf("%s\n", g_failures == 0 ? "PASS" : "FAIL");
  return g_failures == 0 ? 0 : 1;
}
