// Prelude of every gl kernel (GLSL ES 3.10 compute; the device prepends the
// `#version 310 es` line and the local-size layout). See gl_shaders.h for the
// file layout and gpu/device.h for the parameter convention.
//
// Precision: highp for everything. The kernels must match the fp32 CPU
// interpreter to 1e-4 relative; mediump is fp16 on mobile GPUs (10-bit
// mantissa), which would break that by orders of magnitude (NVIDIA and
// llvmpipe compute in fp32 either way, so there is nothing to win there).
// barrier() orders execution; memoryBarrierShared() makes the shared-memory
// writes before it visible to the group (OpenCL's barrier(CLK_LOCAL_MEM_FENCE)).
//
// Shared broadcast slots (issue #7): a value every invocation reads from shared memory (a reduction's
// result, `v = scratch[0]`) must stay in a slot that no invocation writes again later in the kernel
// (within one iteration, for a loop). NVIDIA's GLSL compiler (580 driver) treats such a load as
// re-executable until this invocation's own next store to that array and re-loads it past barrier()
// at its uses: softmax_f32 re-read `scratch[0]` (the row max) inside its sum loop while invocation 0,
// a warp ahead, had already stored its partial sum there, so whole rows were normalised by a wrong
// sum (rel err 5e-2 on 4096-wide rows; the NV assembly shows `LDS shared_mem[0]` inside the loop after
// `BAR`). Hence one shared array per reduction (smax/ssum, lm/ls); reuse only for slots whose readers
// consume them before the barrier that precedes the next write (GEMM tiles). llvmpipe never re-loads,
// so tests/native/test_gl_ops.py checks this rule on the sources.
#define SD_BARRIER() memoryBarrierShared(); barrier()

// IEEE -infinity (GLSL has no literal for it; NVIDIA and llvmpipe are IEEE).
#define SD_NEG_INF uintBitsToFloat(0xff800000u)

// TFLite fused activations (elementwise and GEMM epilogues).
float sd_act(float v, int act) {
  switch (act) {
    case 1: return max(v, 0.0);                  // RELU
    case 2: return clamp(v, -1.0, 1.0);          // RELU_N1_TO_1
    case 3: return clamp(v, 0.0, 6.0);           // RELU6
    case 4: return sd_tanh(v);                   // TANH
    case 6: return 1.0 / (1.0 + exp(-v));        // SIGMOID
    default: return v;
  }
}

