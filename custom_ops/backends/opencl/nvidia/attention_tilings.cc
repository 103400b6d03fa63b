#include "backends/opencl/nvidia/attention_tilings.h"

#include <iterator>

namespace sdgpu::ocl::nvidia {
namespace {

using gpu::AttnLocalBytes;
using gpu::AttnRowLocalBytes;
using gpu::AttnTiling;
using gpu::kTc3xTf32;
using gpu::kTcFp64;
using gpu::kTcNone;

// SD_ATTN_MMA(NAME, D, MT, NW, BK, KP, VP, MATH): K and V staged as BK x KP and BK x VP floats (flash only).
constexpr AttnLocalBytes MmaLocalBytes(size_t bk, size_t kp, size_t vp) { return {4 * bk * (kp + vp), 0, 0}; }

// attention_nv.cl's instantiations (BQ = 16 MT NW and NT = 32 NW for SD_ATTN_MMA; ATR_INSTANTIATE's BQ = RW*RM,
// NT = RW*NS*DS for h160x), each before the backend-neutral tiling it beats where the planner's rules pick it.
constexpr AttnTiling kTilings[] = {
    // self-attention at 64x64 on tensor cores: FP64 with tensor_cores=fp64 or auto (the default, on sm_90; the
    // kernel exists only there), 3xTF32 with tensor_cores=3xtf32
    {"f40", 40, 40, 128, 128, 256, 0, false, 0, kTcFp64, MmaLocalBytes(64, 44, 40), "r40"},
    {"m40", 40, 40, 128, 128, 256, 0, false, 0, kTc3xTf32, MmaLocalBytes(64, 44, 40), "r40"},
    // 32x32 on tensor cores where h80 does not fit (b2): in the b1 UNet (one wave) it ran 0.3-1.7% slower than h80,
    // at b2 0.8-1.1% faster than r80 (H100, BENCHMARKS.md), option tensor_cores=3xtf32
    {"m80", 80, 80, 64, 128, 256, 0, false, 0, kTc3xTf32, MmaLocalBytes(64, 84, 88), "r80"},
    // the same place in FP64 (tensor_cores=fp64 / auto): at b1 h80 measured 0.119 vs 0.140 ms, at b2 0.144 vs r80
    // 0.222 (H200, dmma_lab.py --attn)
    {"f80", 80, 80, 128, 256, 256, 0, false, 0, kTcFp64, MmaLocalBytes(64, 84, 88), "r80"},
    // 16x16 self-attention at b2: 32-query blocks, 4 rows x 8 lanes exchanging partial scores by shfl.sync
    {"h160x", 160, 160, 32, 256, 256, 16, false, 1, kTcNone, AttnRowLocalBytes(160, 4, 8, 4, 4, 1, 0, 8, true),
     "h160w"},
};

}  // namespace

std::vector<AttnTiling> AttentionTilings() { return {std::begin(kTilings), std::end(kTilings)}; }

}  // namespace sdgpu::ocl::nvidia
