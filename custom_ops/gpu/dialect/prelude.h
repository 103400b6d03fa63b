// The GPU kernel dialect: one kernel source for the OpenCL C 1.2 and the GLSL ES 3.10 backends.
//
// Every portable kernel file (gpu/kernels/*.kern, ops/<op>/gpu.kern; the list is gpu/kernel_sources.txt) is
// OpenCL-C-shaped code written against the macros below. The OpenCL backend compiles the files as they are, with
// this prelude first and SD_API_OPENCL defined. For GL the build runs the C preprocessor over the same files with
// SD_API_GLSL defined and gpu/dialect/gen_glsl.py turns each expanded kernel into one compute shader (buffer
// parameters -> SSBO bindings in order, scalars -> uniforms at locations 0, 1, ...; `LOCAL` arrays hoisted to
// `shared`; casts, `const`, `.s0`..`.s3`, attributes and `inline` rewritten). What the translator cannot rewrite
// is the dialect's rule set (gpu/dialect/README.md): no pointer variables or pointer arithmetic (index a buffer
// parameter instead, or use LD4/ST4/LDH below), no buffer / local / private-array parameters in helper functions
// (write such helpers as macros), barriers only in kernels (or macros expanded in kernels), explicit conversions
// between int and float and `!= 0` for int conditions (GLSL has no implicit ones), no vector subscripts (use
// LGETC / LSETC for a float inside a float4 local array).
//
// API-specific choices live here and in gen_glsl.py only; kernels never test SD_API_* themselves except through
// the capability macros documented below.
#pragma once

#ifndef SD_ACT_HALF
#define SD_ACT_HALF 0  // activation storage: 0 float, 1 half (ACT_* below)
#endif
#ifndef SD_GL_COMPACT
#define SD_GL_COMPACT 0  // GLSL: 1 = no vec4 view of a float buffer (LD4A / ST4A below)
#endif
#define SD_WG_MAX_SHARED_BYTES 16384  // local memory a kernel may use on every supported device (GL ES 3.1 minimum)

#if defined(SD_API_GLSL)
// ---- GLSL ES 3.10 (expanded by the C preprocessor at build time; see gen_glsl.py for the rest) ----
#define KERNEL __sd_kernel
#define GLOBAL __sd_global
#define LOCAL __sd_local
#define CONSTANT_TABLE __sd_constant
#define SD_INLINE
#define get_global_id sd_global_id
#define get_local_id sd_local_id
#define get_group_id sd_group_id
#define get_local_size sd_local_size
#define WG_SIZE(x, y, z)
#define UNROLL
#define BARRIER() \
  {                       \
    memoryBarrierShared(); \
    barrier();            \
  }
#define float2 vec2
#define float3 vec3
#define float4 vec4
#define int2 ivec2
#define int4 ivec4
#define uint2 uvec2
#define uint4 uvec4
#define mad(a, b, c) ((a) * (b) + (c))
#define fma(a, b, c) ((a) * (b) + (c))
#define fmax max
#define fmin min
#define fabs abs
#define rsqrt inversesqrt
#define native_exp exp
#define native_exp2 exp2
#define native_log log
#define native_recip(x) (1.0f / (x))
#define native_divide(a, b) ((a) / (b))
#define erf sd_erf
#define erfc sd_erfc
#define tanh sd_tanh
#define sin sd_sin
#define cos sd_cos
#define pow sd_pow
#define round sd_round
#define INFINITY uintBitsToFloat(0x7f800000u)
#define as_float intBitsToFloat
#define as_uint floatBitsToUint
// Buffer views (gen_glsl.py declares NAME_v4 / NAME_u32 as extra SSBOs on NAME's binding where a kernel uses them).
#define LD4(buf, i) vec4((buf)[(i)], (buf)[(i) + 1], (buf)[(i) + 2], (buf)[(i) + 3])
#define ST4(buf, i, v)       \
  {                          \
    vec4 st4_ = (v);         \
    (buf)[(i)] = st4_.x;     \
    (buf)[(i) + 1] = st4_.y; \
    (buf)[(i) + 2] = st4_.z; \
    (buf)[(i) + 3] = st4_.w; \
  }
// Every element type of a binding is a storage block of its own in GLSL, and a device allows only so many per shader
// (GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS and the combined limits: 8 on many phones). The compact variant of each
// shader (SD_GL_COMPACT 1; GlDevice builds it where the device refuses the normal one) reads and writes an aligned
// float4 as four floats, so a float buffer needs no NAME_v4 view: the half-storage tiled GEMMs go from 10 blocks to 8.
#if SD_GL_COMPACT
#define LD4A(buf, i) LD4(buf, i)
#define ST4A(buf, i, v) ST4(buf, i, v)
#else
#define LD4A(buf, i) buf##_v4[(i) >> 2]
#define ST4A(buf, i, v) buf##_v4[(i) >> 2] = (v)
#endif
#define LDH(buf, i) unpackHalf2x16(buf##_u32[(i) >> 1])[(i) & 1]
#define LDH4A(buf, i) \
  vec4(unpackHalf2x16(buf##_u32[(i) >> 1]), unpackHalf2x16(buf##_u32[((i) >> 1) + 1]))
#define LDH4(buf, i) vec4(LDH(buf, (i)), LDH(buf, (i) + 1), LDH(buf, (i) + 2), LDH(buf, (i) + 3))
// Stores the two halves of pair p (elements 2p, 2p + 1): one whole uint, no atomics.
#define STH2(buf, p, v) buf##_u32[(p)] = packHalf2x16(v)
// One float of a float4 local array, by float index (the array viewed as floats).
#define LGETC(arr, idx) arr[(idx) >> 2][(idx) & 3]
#define LSETC(arr, idx, v) arr[(idx) >> 2][(idx) & 3] = (v)
// One float of a private float4 by index c (a constant once loops unroll; VSETC is a statement). A vector subscript:
// Mesa (llvmpipe) miscompiled OpenCL's if-chain form (every component took the last write; gemm_tiled.kern's loaders).
#define VGETC(v, c) (v)[(c)]
#define VSETC(v, c, val) { (v)[(c)] = (val); }
// The float4 at float index idx (a multiple of 4) of a float4 local array (LLD4A: OpenCL may assume the alignment).
#define LLD4(arr, idx) arr[(idx) >> 2]
#define LLD4A(arr, idx) arr[(idx) >> 2]
// A local tile read both as floats and as float4s (LOCAL_FLOAT4S): a float array here, so that one float is stored
// without a vector subscript (a dynamic component write compiles to a four-way branch per store, divergent across the
// lanes of a transposing store: NVIDIA's GL ran the tiled GEMM 4.5x slower than its OpenCL twin with it), and a
// float4 is four consecutive floats (LF4 / LSF4: the float4 at float4 index i4; LF4A: at float index i, a multiple
// of 4).
#define LOCAL_FLOAT4S(name, n) LOCAL float name[4 * (n)]
#define LF4(arr, i4) vec4(arr[4 * (i4)], arr[4 * (i4) + 1], arr[4 * (i4) + 2], arr[4 * (i4) + 3])
#define LF4A(arr, i) vec4(arr[(i)], arr[(i) + 1], arr[(i) + 2], arr[(i) + 3])
#define LSF4(arr, i4, v)         \
  {                              \
    vec4 lsf4_ = (v);            \
    int lsf4i_ = 4 * (i4);       \
    arr[lsf4i_] = lsf4_.x;       \
    arr[lsf4i_ + 1] = lsf4_.y;   \
    arr[lsf4i_ + 2] = lsf4_.z;   \
    arr[lsf4i_ + 3] = lsf4_.w;   \
  }
#define LGETF(arr, i) arr[(i)]
#define LSETF(arr, i, v) arr[(i)] = (v)
// Activation storage (see "Activation storage" below): SD_ACT_HALF is defined by the build, 0 or 1 (gen_glsl.py
// runs the preprocessor once per value). Half storage packs two elements per uint of the buffer's _u32 view; a
// scalar store goes through atomics because the neighbouring element may belong to another work-item.
#if SD_ACT_HALF
#define ACT_LD(buf, i) unpackHalf2x16(buf##_u32[(i) >> 1])[(i) & 1]
#define ACT_ST(buf, i, v)                                                              \
  {                                                                                    \
    int sti_ = (i);                                                                    \
    uint sth_ = packHalf2x16(vec2((v), 0.0f)) << (uint(sti_ & 1) * 16u);             \
    atomicAnd(buf##_u32[sti_ >> 1], (sti_ & 1) != 0 ? 0x0000ffffu : 0xffff0000u);   \
    atomicOr(buf##_u32[sti_ >> 1], sth_);                                             \
  }
#define ACT_LD4A(buf, i) \
  vec4(unpackHalf2x16(buf##_u32[(i) >> 1]), unpackHalf2x16(buf##_u32[((i) >> 1) + 1]))
#define ACT_LD4(buf, i) vec4(ACT_LD(buf, (i)), ACT_LD(buf, (i) + 1), ACT_LD(buf, (i) + 2), ACT_LD(buf, (i) + 3))
#define ACT_ST4A(buf, i, v)                                   \
  {                                                           \
    vec4 st4_ = (v);                                          \
    int st4i_ = (i) >> 1;                                     \
    buf##_u32[st4i_] = packHalf2x16(st4_.xy);                 \
    buf##_u32[st4i_ + 1] = packHalf2x16(st4_.zw);             \
  }
#define ACT_ST4(buf, i, v)                      \
  {                                             \
    vec4 st4u_ = (v);                           \
    int st4ui_ = (i);                           \
    ACT_ST(buf, st4ui_, st4u_.x)                \
    ACT_ST(buf, st4ui_ + 1, st4u_.y)            \
    ACT_ST(buf, st4ui_ + 2, st4u_.z)            \
    ACT_ST(buf, st4ui_ + 3, st4u_.w)            \
  }
// A float4* parameter's half view: uvec2 elements (four halves), so its offsets stay in float4 units.
#define ACT_LDV4(buf, i) vec4(unpackHalf2x16(buf##_h4[(i)].x), unpackHalf2x16(buf##_h4[(i)].y))
#define ACT_STV4(buf, i, v)                                          \
  {                                                                  \
    vec4 stv4_ = (v);                                                \
    buf##_h4[(i)] = uvec2(packHalf2x16(stv4_.xy), packHalf2x16(stv4_.zw)); \
  }
#else
#define ACT_LD(buf, i) (buf)[(i)]
#define ACT_ST(buf, i, v) \
  { (buf)[(i)] = (v); }
#define ACT_LD4A(buf, i) LD4A(buf, i)
#define ACT_LD4(buf, i) LD4(buf, i)
#define ACT_ST4A(buf, i, v) ST4A(buf, i, v)
#define ACT_ST4(buf, i, v) ST4(buf, i, v)
#define ACT_LDV4(buf, i) (buf)[(i)]
#define ACT_STV4(buf, i, v) \
  { (buf)[(i)] = (v); }
#endif
// Capability switches (see the OpenCL section): none on GL.
#define SD_HAS_NV_SHFL 0
#define SD_HAS_FP64 0
// No contraction control in GLSL ES (kernels that ask for it accept a few ulps there).
#define SD_NO_CONTRACT

#elif defined(SD_API_OPENCL)
// ---- OpenCL C 1.2 (this text is the first part of the program source) ----
#define KERNEL __kernel
#define GLOBAL __global
#define LOCAL __local
#define CONSTANT_TABLE __constant
#define SD_INLINE inline __attribute__((always_inline))
#define WG_SIZE(x, y, z) __attribute__((reqd_work_group_size(x, y, z)))
#define UNROLL _Pragma("unroll")
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define LD4(buf, i) vload4(0, (buf) + (i))
#define LD4A(buf, i) (*(__global const float4*)((buf) + (i)))
#define ST4(buf, i, v) vstore4((v), 0, (buf) + (i))
#define ST4A(buf, i, v) (*(__global float4*)((buf) + (i)) = (v))
#define LDH(buf, i) vload_half((i), (__global const half*)(buf))
#define LDH4A(buf, i) vloada_half4((i) >> 2, (__global const half*)(buf))
#define LDH4(buf, i) vload_half4(0, (__global const half*)(buf) + (i))
#define STH2(buf, p, v) vstore_half2((v), (p), (__global half*)(buf))
#define LGETC(arr, idx) (((__local float*)(arr))[(idx)])
#define LSETC(arr, idx, v) (((__local float*)(arr))[(idx)] = (v))
// One float of a private float4 by index c (a constant once loops unroll); no type punning through pointers.
#define VGETC(v, c) ((c) == 0 ? (v).x : (c) == 1 ? (v).y : (c) == 2 ? (v).z : (v).w)
#define VSETC(v, c, val) \
  if ((c) == 0) {        \
    (v).x = (val);       \
  } else if ((c) == 1) { \
    (v).y = (val);       \
  } else if ((c) == 2) { \
    (v).z = (val);       \
  } else {               \
    (v).w = (val);       \
  }
#define LLD4(arr, idx) vload4(0, (__local const float*)(arr) + (idx))
#define LLD4A(arr, idx) (*(__local const float4*)((__local const float*)(arr) + (idx)))
// A local tile read both as floats and as float4s (see the GLSL side): here a float4 array, indexed as a plain float4
// array is (LF4 / LSF4 by float4, LF4A / LGETF / LSETF by float), so the OpenCL program is the same text as before the
// GLSL side changed (a float index's 4 * i >> 2, which NVIDIA's compiler did not fold back, made the VAE decode 16%
// slower).
#define LOCAL_FLOAT4S(name, n) LOCAL float4 name[n]
#define LF4(arr, i4) arr[i4]
#define LF4A(arr, i) LLD4A(arr, i)
#define LSF4(arr, i4, v) (arr[i4] = (v))
#define LGETF(arr, i) LGETC(arr, i)
#define LSETF(arr, i, v) LSETC(arr, i, v)
// Activation storage: SD_ACT_HALF (the host's -DSD_ACT_HALF=1, delegate option activations_fp16) stores the
// partition's float tensors as half, converted at every load and store (vload_half/vstore_half need no
// cl_khr_fp16); arithmetic stays fp32. Offsets are in storage elements either way.
#if SD_ACT_HALF
#define ACT_LD(buf, i) vload_half((i), (__global const half*)(buf))
// The stores take the default rounding (round to nearest even, OpenCL C 6.12.7): the same as the _rte forms, which
// some compilers expand in software.
#define ACT_ST(buf, i, v) vstore_half((v), (i), (__global half*)(buf))
#define ACT_LD4A(buf, i) vloada_half4((i) >> 2, (__global const half*)(buf))
#define ACT_LD4(buf, i) vload_half4(0, (__global const half*)(buf) + (i))
#define ACT_ST4A(buf, i, v) vstorea_half4((v), (i) >> 2, (__global half*)(buf))
#define ACT_ST4(buf, i, v) vstore_half4((v), 0, (__global half*)(buf) + (i))
#define ACT_LDV4(buf, i) vloada_half4((i), (__global const half*)(buf))
#define ACT_STV4(buf, i, v) vstorea_half4((v), (i), (__global half*)(buf))
#else
#define ACT_LD(buf, i) (buf)[(i)]
#define ACT_ST(buf, i, v) ((buf)[(i)] = (v))
#define ACT_LD4A(buf, i) LD4A(buf, i)
#define ACT_LD4(buf, i) LD4(buf, i)
#define ACT_ST4A(buf, i, v) ST4A(buf, i, v)
#define ACT_ST4(buf, i, v) ST4(buf, i, v)
#define ACT_LDV4(buf, i) (buf)[(i)]
#define ACT_STV4(buf, i, v) ((buf)[(i)] = (v))
#endif
// Capability switches: the one place where a portable kernel learns that it may take an API- or vendor-only body;
// the kernel keeps its portable twin under the switch's #else, which GL and every other device compile.
// SD_HAS_NV_SHFL: NVIDIA's OpenCL (the host builds with -DSDGPU_NV_PTX=1 there): 32-lane warps and their shuffles,
// nv_shfl_xor(v, mask) (inline PTX in backends/opencl/nvidia/nv_ptx.cl, which follows the portable kernels in the
// program: declared here).
#if defined(SDGPU_NV_PTX) && SDGPU_NV_PTX
#define SD_HAS_NV_SHFL 1
inline __attribute__((always_inline)) float nv_shfl_xor(float v, int mask);
#else
#define SD_HAS_NV_SHFL 0
#endif
// SD_HAS_FP64: the device computes in double (cl_khr_fp64). A kernel that wants double (the Winograd filter
// transform, bit for bit the host's float64) enables the extension at file scope under the switch, and disables it
// after its kernels (unsuffixed literals of the kernels after it stay float), with a float twin under #else.
#if defined(cl_khr_fp64)
#define SD_HAS_FP64 1
#else
#define SD_HAS_FP64 0
#endif
// SD_NO_CONTRACT: first statement of a kernel whose float operations must not fuse into FMAs (the host's rounding).
#define SD_NO_CONTRACT _Pragma("OPENCL FP_CONTRACT OFF")

#else
#error "define SD_API_OPENCL or SD_API_GLSL before the kernel dialect prelude"
#endif
