// CPU reference backend: wraps the ops/*/cpu.cc kernels and owns the thread
// pool they share. Correctness first (float32, libm), tiled where memory
// matters (attention), threaded with a simple ParallelFor.
#pragma once

#include <memory>

#include "common/thread_pool.h"
#include "delegate/backend.h"
#include "delegate/options.h"

namespace sdgpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const DelegateOptions& options);
  const char* name() const override { return "cpu"; }
  Status Supports(const ParsedOp& op, const std::vector<TensorInfo>& inputs) const override;
  Status CreateKernel(const ParsedOp& op, std::unique_ptr<BackendKernel>* out) override;
  Status AllocateArena(size_t bytes, std::unique_ptr<Arena>* out) override;

 private:
  DelegateOptions options_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace sdgpu
