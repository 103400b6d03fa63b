// The SdAttention tilings whose kernels exist only in NVIDIA's OpenCL build (attention_nv.cl): the planner
// (ops/attention/gpu.cc) gets them through gpu::Device::vendor_attention_tilings() of an OpenCL device on NVIDIA's platform.
#pragma once

#include <vector>

#include "gpu/attention_tiling.h"

namespace sdgpu::ocl::nvidia {

std::vector<gpu::AttnTiling> AttentionTilings();

}  // namespace sdgpu::ocl::nvidia
