// The "opencl" backend: unlike the cpu backend (Sd* ops only, builtins left to
// XNNPACK), it claims builtin ops too, so a whole SD model runs as one
// delegated partition on the device (see cl_partition.h). It implements the
// Backend interface's whole-graph hook (Backend::PrepareGraph); the per-op
// BackendKernel path is not used.
#pragma once

#include <memory>

#include "backends/opencl/cl_runtime.h"
#include "delegate/backend.h"
#include "delegate/options.h"

namespace sdgpu {

class OpenClBackend final : public Backend {
 public:
  // Fails with a one-line message when no OpenCL runtime/platform/device exists.
  static Status Create(const DelegateOptions& options, const Logger& logger, std::unique_ptr<Backend>* out);

  const char* name() const override { return "opencl"; }
  Status Supports(const ParsedOp& op, const std::vector<TensorInfo>& inputs) const override;
  Status CreateKernel(const ParsedOp& op, std::unique_ptr<BackendKernel>* out) override;
  Status AllocateArena(size_t bytes, std::unique_ptr<Arena>* out) override;
  Status PrepareGraph(abi::TfLiteContext* context, SdDelegate* delegate, bool* handled) override;

  const ocl::ClRuntime& runtime() const { return *rt_; }
  const DelegateOptions& options() const { return options_; }

 private:
  DelegateOptions options_;
  std::unique_ptr<ocl::ClRuntime> rt_;
};

}  // namespace sdgpu
