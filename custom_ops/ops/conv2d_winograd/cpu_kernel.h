// The CPU backend's kernel object for SdConv2DWinograd nodes (registered in delegate/cpu_backend.cc).
//
// Owns the transformed weights U (a^2/9 x the filter, float32). They are built from the node's filter
// at the first Run and again only if the filter pointer changes: the converter emits SdConv2DWinograd
// only for constant filters, whose data pointer is fixed for the interpreter's lifetime, so the file
// never stores transformed weights and the transform runs once per loaded model. V and M live in the
// partition arena as per-node scratch (reused across nodes by the memory planner).
#pragma once

#include <memory>

#include "common/thread_pool.h"
#include "delegate/backend.h"
#include "ops/conv2d_winograd/attrs.h"

namespace sdgpu {

std::unique_ptr<BackendKernel> MakeConv2DWinogradCpuKernel(const Conv2DWinogradAttrs& attrs, ThreadPool* pool);

}  // namespace sdgpu
