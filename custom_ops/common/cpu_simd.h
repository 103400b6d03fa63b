// Minimal SIMD layer for the CPU kernels: one struct of static inline primitives per instruction set, plus
// runtime selection of the best set this CPU supports.
//
//   simd::Generic  4 lanes, GCC vector extensions: any target (SSE2 on x86-64, NEON on arm64). Multiply-add is
//                  a*b + c (the compiler contracts it to FMA where the base target has one, e.g. arm64).
//   simd::Avx2     8 lanes, AVX2 + FMA (x86-64 with GCC only).
//   simd::Avx512   16 lanes, AVX-512F (x86-64 with GCC only).
//
// Why not just -march=native: the library ships as one binary (wheel), so the default build targets baseline
// x86-64 and the wide paths are compiled separately under `#pragma GCC target` and picked at runtime. A kernel is
// written once against an `Isa` alias in a `.inc` file that each kernel's .cc includes once per instruction set
// (SDGPU_SIMD_AVX2_BEGIN ... _END around the AVX2 copy); templates would not work because GCC gives an implicitly
// instantiated template the target of its definition, not of its caller.
//
// Semantics shared by all sets (IEEE, no -ffast-math): Max(a, b) / Min(a, b) return b when either operand is NaN
// (x86 maxps/minps), so Max(acc, x) propagates a NaN x. Scale2(p, n) is p * 2^n for integral n in [-152, 130],
// with one rounding (gradual underflow and overflow to inf are exact IEEE behaviour). Transpose8x8 moves an 8x8
// float block (AVX shuffles on both x86 sets, scalar in Generic), optionally scaling the source columns.
//
// SDGPU_CPU_ISA=generic|avx2|avx512 (environment, read on every kernel launch) caps the selection: tests use it
// to run every code path on one machine; unknown values are ignored.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SDGPU_SIMD_X86 1
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_ps() (GCC PR105593); the
// warning is attributed to the header's lines, so silencing it around the include is enough.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#define SDGPU_SIMD_AVX2_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma\")")
#define SDGPU_SIMD_AVX512_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,avx512f\")")
#define SDGPU_SIMD_END _Pragma("GCC pop_options")
#else
#define SDGPU_SIMD_X86 0
#endif

namespace sdgpu {

enum class CpuIsa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

inline const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kGeneric: break;
  }
  return "generic";
}

// The widest set this CPU (and OS: libgcc checks XCR0) supports, capped by SDGPU_CPU_ISA.
inline CpuIsa ActiveCpuIsa() {
  CpuIsa best = CpuIsa::kGeneric;
#if SDGPU_SIMD_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    best = __builtin_cpu_supports("avx512f") ? CpuIsa::kAvx512 : CpuIsa::kAvx2;
  }
#endif
  if (const char* cap = std::getenv("SDGPU_CPU_ISA")) {
    CpuIsa limit = best;
    if (std::strcmp(cap, "generic") == 0) limit = CpuIsa::kGeneric;
    else if (std::strcmp(cap, "avx2") == 0) limit = CpuIsa::kAvx2;
    else if (std::strcmp(cap, "avx512") == 0) limit = CpuIsa::kAvx512;
    if (static_cast<int>(limit) < static_cast<int>(best)) best = limit;
  }
  return best;
}

// The copy of a kernel function for the active instruction set, given its generic, avx2 and avx512 copies
// (instantiated by common/cpu_simd_instances.inc).
template <typename Fn>
inline Fn SelectIsa(Fn generic, Fn avx2, Fn avx512) {
  switch (ActiveCpuIsa()) {
    case CpuIsa::kAvx512: return avx512;
    case CpuIsa::kAvx2: return avx2;
    case CpuIsa::kGeneric: break;
  }
  return generic;
}

namespace simd {

struct Generic {
  typedef float V __attribute__((vector_size(16)));
  typedef int32_t VI __attribute__((vector_size(16)));
  typedef uint32_t VU __attribute__((vector_size(16)));
  static constexpr int kWidth = 4;

  static V Load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  static V LoadPartial(const float* p, int n) {  // lanes >= n are 0
    V v = {0.0f, 0.0f, 0.0f, 0.0f};
    std::memcpy(&v, p, sizeof(float) * static_cast<size_t>(n));
    return v;
  }
  static void Store(float* p, V v) { std::memcpy(p, &v, sizeof(v)); }
  static void StorePartial(float* p, V v, int n) { std::memcpy(p, &v, sizeof(float) * static_cast<size_t>(n)); }
  static V Set1(float x) { return V{x, x, x, x}; }
  static V Zero() { return Set1(0.0f); }
  static V Add(V a, V b) { return a + b; }
  static V Sub(V a, V b) { return a - b; }
  static V Mul(V a, V b) { return a * b; }
  static V Div(V a, V b) { return a / b; }
  static V MulAdd(V a, V b, V c) { return a * b + c; }     // a*b + c
  static V NegMulAdd(V a, V b, V c) { return c - a * b; }  // c - a*b
  static V Max(V a, V b) { return a > b ? a : b; }
  static V Min(V a, V b) { return a < b ? a : b; }
  static V Abs(V a) { return AndBits(a, 0x7fffffffu); }
  static V IfLess(V x, V y, V a, V b) { return x < y ? a : b; }  // x < y ? a : b, per lane
  static V AndBits(V a, uint32_t mask) {  // bitwise a & mask per lane
    VU bits;
    std::memcpy(&bits, &a, sizeof(a));
    bits &= mask;
    std::memcpy(&a, &bits, sizeof(a));
    return a;
  }
  // Nearest integer, ties to even, for |x| < 2^22 (the default rounding mode; NaN stays NaN).
  static V Round(V x) {
    const V magic = Set1(12582912.0f);  // 1.5 * 2^23
    return (x + magic) - magic;
  }
  static V Scale2(V p, V n) {
    const VI ni = __builtin_convertvector(n, VI);
    const VI n1 = ni >> 1;
    return p * Pow2(n1) * Pow2(ni - n1);  // two steps keep each factor a normal float
  }
  // dst[j][i] = src[i][j] * (scale ? scale[j] : 1) for an 8x8 block (row strides in floats).
  static void Transpose8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, const float* scale) {
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j) {
        dst[j * dst_stride + i] = scale != nullptr ? src[i * src_stride + j] * scale[j] : src[i * src_stride + j];
      }
    }
  }
  static float ReduceAdd(V v) { return (v[0] + v[1]) + (v[2] + v[3]); }
  static float ReduceMax(V v) {
    const float a = v[0] > v[1] ? v[0] : v[1];
    const float b = v[2] > v[3] ? v[2] : v[3];
    return a > b ? a : b;
  }

 private:
  static V Pow2(VI n) {  // 2^n for n in [-126, 127] (unsigned shift: no UB for the garbage lanes of a NaN)
    const VU bits = reinterpret_cast<VU>(n + 127) << 23;
    V v;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
};

}  // namespace simd
}  // namespace sdgpu

#if SDGPU_SIMD_X86
SDGPU_SIMD_AVX2_BEGIN
namespace sdgpu {
namespace simd {

struct Avx2 {
  using V = __m256;
  static constexpr int kWidth = 8;

  static __m256i PartialMask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V LoadPartial(const float* p, int n) { return _mm256_maskload_ps(p, PartialMask(n)); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void StorePartial(float* p, V v, int n) { _mm256_maskstore_ps(p, PartialMask(n), v); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Zero() { return _mm256_setzero_ps(); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V Div(V a, V b) { return _mm256_div_ps(a, b); }
  static V MulAdd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V NegMulAdd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V Max(V a, V b) { return _mm256_max_ps(a, b); }
  static V Min(V a, V b) { return _mm256_min_ps(a, b); }
  static V Abs(V a) { return AndBits(a, 0x7fffffffu); }
  static V IfLess(V x, V y, V a, V b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, y, _CMP_LT_OQ)); }
  static V AndBits(V a, uint32_t mask) {
    return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(mask))));
  }
  static V Round(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V Scale2(V p, V n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    return _mm256_mul_ps(_mm256_mul_ps(p, Pow2(n1)), Pow2(n2));
  }
  // dst[j][i] = src[i][j] * (scale ? scale[j] : 1) for an 8x8 block: unpack / shuffle / lane-permute stages.
  static void Transpose8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, const float* scale) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
    if (scale != nullptr) {
      const __m256 sc = _mm256_loadu_ps(scale);
      for (int i = 0; i < 8; ++i) r[i] = _mm256_mul_ps(r[i], sc);
    }
    __m256 t[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
      r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
      _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
      _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
  }
  static float ReduceAdd(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float ReduceMax(V v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

 private:
  static V Pow2(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
  }
};

}  // namespace simd
}  // namespace sdgpu
SDGPU_SIMD_END

SDGPU_SIMD_AVX512_BEGIN
namespace sdgpu {
namespace simd {

struct Avx512 {
  using V = __m512;
  static constexpr int kWidth = 16;

  static __mmask16 PartialMask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V LoadPartial(const float* p, int n) { return _mm512_maskz_loadu_ps(PartialMask(n), p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void StorePartial(float* p, V v, int n) { _mm512_mask_storeu_ps(p, PartialMask(n), v); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Zero() { return _mm512_setzero_ps(); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V Div(V a, V b) { return _mm512_div_ps(a, b); }
  static V MulAdd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V NegMulAdd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V Max(V a, V b) { return _mm512_max_ps(a, b); }
  static V Min(V a, V b) { return _mm512_min_ps(a, b); }
  static V Abs(V a) { return AndBits(a, 0x7fffffffu); }
  static V IfLess(V x, V y, V a, V b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, y, _CMP_LT_OQ), b, a); }
  static V AndBits(V a, uint32_t mask) {
    return _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(a), _mm512_set1_epi32(static_cast<int>(mask))));
  }
  static V Round(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static V Scale2(V p, V n) { return _mm512_scalef_ps(p, n); }  // p * 2^floor(n), one rounding
  static void Transpose8x8(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, const float* scale) {
    Avx2::Transpose8x8(src, src_stride, dst, dst_stride, scale);
  }
  static float ReduceAdd(V v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float ReduceMax(V v) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace simd
}  // namespace sdgpu
SDGPU_SIMD_END
#endif  // SDGPU_SIMD_X86
