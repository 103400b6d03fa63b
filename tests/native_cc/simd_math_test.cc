// Vector exp / erfc of the CPU kernels (custom_ops/common/cpu_simd_math.inc) against libm in double precision, on
// every instruction set the machine has: generic (SSE2 on x86-64, NEON on aarch64, where GCC fuses a*b+c into fmla)
// and, on x86-64, AVX2 and AVX-512. The C++ twin of tests/native/test_cpu_simd_math.py (same bounds), so that the
// aarch64 build is checked under qemu too. Calls the test entry point tests/native/cpu_simd_math_api.cc.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

extern "C" {
int sdsimd_active_isa();
int sdsimd_map(int isa, int fn, const float* x, float* y, int64_t n);
}

namespace {

constexpr int kExp = 0, kErfc = 1;
#if defined(__ARM_NEON)
const char* const kIsaNames[] = {"generic (NEON)", "avx2", "avx512"};
#else
const char* const kIsaNames[] = {"generic", "avx2", "avx512"};
#endif
int g_failures = 0;

void Check(bool ok, const char* isa, const char* what, double detail) {
  if (!ok) {
    std::printf("FAIL [%s] %s (%.9g)\n", isa, what, detail);
    ++g_failures;
  }
}

std::vector<float> Map(int isa, int fn, const std::vector<float>& x) {
  std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
  if (sdsimd_map(isa, fn, x.data(), y.data(), static_cast<int64_t>(x.size())) != 0) {
    std::printf("FAIL [%s] sdsimd_map refused fn %d\n", kIsaNames[isa], fn);
    ++g_failures;
  }
  return y;
}

void TestExp(int isa) {
  const char* name = kIsaNames[isa];
  // Every normal result, x in [-87.33, 88.72]; an odd count so every tail length of the partial loads is used.
  std::vector<float> x;
  const int n = 1000003;
  for (int i = 0; i < n; ++i) x.push_back(static_cast<float>(-87.33 + (88.72 + 87.33) * i / (n - 1)));
  std::vector<float> y = Map(isa, kExp, x);
  double worst = 0.0, at = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double rel = std::fabs(y[i] / std::exp(static_cast<double>(x[i])) - 1.0);
    if (!(rel <= worst)) worst = rel, at = x[i];
  }
  Check(worst <= 2.5e-7, name, "exp: max relative error over the normal range > 2.5e-7", worst);
  std::printf("[%s] exp: max relative error %.3g (at x = %.6g)\n", name, worst, at);

  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f, -0.0f, -inf, inf, std::nanf(""), 88.73f, 1e30f, -104.0f, -1e30f};
  y = Map(isa, kExp, special);
  Check(y[0] == 1.0f && y[1] == 1.0f, name, "exp(+-0) != 1", y[0]);
  Check(y[2] == 0.0f && y[3] == inf && std::isnan(y[4]), name, "exp(-inf, inf, nan) != (0, inf, nan)", y[2]);
  Check(y[5] == inf && y[6] == inf, name, "exp overflow != inf", y[5]);
  Check(y[7] == 0.0f && y[8] == 0.0f, name, "exp underflow != 0", y[7]);
}

void TestErfc(int isa) {
  const char* name = kIsaNames[isa];
  std::vector<float> z;
  const int n = 200003;
  for (int i = 0; i < n; ++i) z.push_back(static_cast<float>(-4.0 + 13.0 * i / (n - 1)));
  std::vector<float> y = Map(isa, kErfc, z);
  double worst = 0.0;
  for (size_t i = 0; i < z.size(); ++i) {
    const double ref = std::erfc(static_cast<double>(z[i]));
    if (ref <= 1e3 * std::numeric_limits<float>::min()) continue;  // near the denormal range: absolute, below
    worst = std::fmax(worst, std::fabs(y[i] / ref - 1.0));
  }
  Check(worst <= 1e-6, name, "erfc: max relative error > 1e-6", worst);
  std::printf("[%s] erfc: max relative error %.3g\n", name, worst);

  const float inf = std::numeric_limits<float>::infinity();
  y = Map(isa, kErfc, {inf, -inf, std::nanf(""), 10.5f, 1e30f, -1e30f, -6.0f});
  Check(y[0] == 0.0f && y[1] == 2.0f && std::isnan(y[2]), name, "erfc(inf, -inf, nan) != (0, 2, nan)", y[0]);
  Check(y[3] == 0.0f && y[4] == 0.0f && y[5] == 2.0f && y[6] == 2.0f, name, "erfc saturation", y[3]);
}

}  // namespace

int main() {
  const int best = sdsimd_active_isa();
  if (best < 0 || best > 2) {
    std::printf("FAIL: sdsimd_active_isa() = %d\n", best);
    return 1;
  }
  for (int isa = 0; isa <= best; ++isa) {
    TestExp(isa);
    TestErfc(isa);
  }
  const std::vector<float> x = {0.0f};
  std::vector<float> y(1);
  Check(sdsimd_map(best + 1, kExp, x.data(), y.data(), 1) == -1, "-", "an unavailable instruction set is refused", 0);
  std::printf("%s: instruction sets 0..%d\n", g_failures == 0 ? "PASS" : "FAIL", best);
  return g_failures == 0 ? 0 : 1;
}
