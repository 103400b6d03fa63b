// Inline-PTX primitives of the NVIDIA-only kernel paths (built where the host passes -DSDGPU_NV_PTX=1: NVIDIA's
// OpenCL): warp shuffles for the attention's head-dim split (ATR_XS, ops/attention/gpu.kern through the dialect's
// SD_HAS_NV_SHFL) and the 3xTF32 / FP64 tensor-core kernels (backends/opencl/nvidia/attention_nv.cl's SD_ATTN_MMA,
// gemm_tc.cl). Defined once so that every kernel splits and multiplies alike.
#if defined(SDGPU_NV_PTX) && SDGPU_NV_PTX
#define NV_INLINE inline __attribute__((always_inline))

// v of the lane whose index differs from this one's by `mask` (shfl.sync.bfly over the full warp)
NV_INLINE float nv_shfl_xor(float v, int mask) {
  float r;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(r) : "f"(v), "r"(mask));
  return r;
}

// The 3xTF32 split x = big + small: big = x truncated to its top 11 significant bits (a TF32 value: one AND; rounding
// to nearest cost 5% and gained no accuracy, BENCHMARKS.md), small = x - big (exact; the tensor core reads
// its top 19 bits).
NV_INLINE uint nv_tf32_big(float x) { return as_uint(x) & 0xffffe000u; }
NV_INLINE uint nv_tf32_small(float x, uint big) { return as_uint(x - as_float(big)); }

// d += A B on the tensor cores: mma.sync m16n8k8, TF32 A (16 x 8, row-major fragment a0..a3) and B (8 x 8,
// column-major fragment b0, b1), fp32 accumulators d[0..3]
NV_INLINE void nv_mma_tf32(float* d, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// FP64 tensor cores (sm_90 only: the host adds -DSDGPU_NV_SM90=1 on NVIDIA devices of compute capability 9.x and newer;
// the m16n8k8 .f64 shape does not exist before Hopper): d += A B with A (16 x 8) and B (8 x 8) in the TF32 fragments'
// (row, column) positions, one double each, fp64 accumulators. The fp32 kernels' operands convert to double exactly,
// so every product is exact and only the fp64 sums round: results at least as accurate as fp32 FMA chains.
#if defined(SDGPU_NV_SM90) && SDGPU_NV_SM90
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
NV_INLINE void nv_mma_f64(double* d, double a0, double a1, double a2, double a3, double b0, double b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};"
               : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
               : "d"(a0), "d"(a1), "d"(a2), "d"(a3), "d"(b0), "d"(b1));
}
#endif  // SDGPU_NV_SM90
#endif  // SDGPU_NV_PTX
