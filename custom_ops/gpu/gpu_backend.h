// A GPU backend = this class + one gpu::Device implementation. Unlike the cpu
// backend (Sd* ops only, builtins left to XNNPACK), it claims builtin ops too,
// so a whole SD model runs as one delegated partition on the device (see
// gpu/partition.h). It implements the Backend interface's whole-graph hook
// (Backend::PrepareGraph); the per-op BackendKernel path is not used.
//
// backends/<name>/ only provides the Device (and its kernel sources); e.g.
// backends/opencl/opencl_backend.cc builds GpuBackend(OpenClDevice, "SdGpuOpenCL").
#pragma once

#include <memory>
#include <string>

#include "common/disk_cache.h"
#include "delegate/backend.h"
#include "delegate/options.h"
#include "gpu/device.h"
#include "gpu/matmul_ops.h"

namespace sdgpu::gpu {

class GpuBackend final : public Backend {
 public:
  // `registration_name` (static storage): the delegate kernel's custom_name in TFLite's graph.
  GpuBackend(const DelegateOptions& options, std::unique_ptr<Device> device, const char* registration_name,
             const Logger& logger)
      : options_(options), device_(std::move(device)), registration_name_(registration_name) {
    device_->set_progress(std::make_unique<SetupProgress>(device_->backend_name(), logger, options.setup_progress));
    device_->set_tuning_budget_ms(options.tuning_budget_ms);
    Device::Overrides o;
    if (GemmTiles t; !options.gemm_tiles.empty() && ParseGemmTiles(options.gemm_tiles, &t)) o.gemm_tiles = t;
    o.attention_tiling = options.attention_tiling;
    o.ln_fold = options.layer_norm_fold;
    o.tensor_cores_3xtf32 = options.tensor_cores == TensorCores::k3xTf32;
    // auto: FP64 where the device built its kernels (NVIDIA sm_90); elsewhere auto changes nothing, so a forced
    // gemm_tiles "BMxBNtc" still names a 3xTF32 config there
    o.tensor_cores_fp64 = options.tensor_cores == TensorCores::kFp64 ||
                          (options.tensor_cores == TensorCores::kAuto && HasFp64TensorCoreKernels(*device_));
    device_->set_overrides(std::move(o));
  }

  const char* name() const override { return device_->backend_name(); }
  Status Supports(const ParsedOp& op, const std::vector<TensorInfo>& inputs) const override;
  Status CreateKernel(const ParsedOp& op, std::unique_ptr<BackendKernel>* out) override;
  Status AllocateArena(size_t bytes, std::unique_ptr<Arena>* out) override;
  // Claims every node CreateGpuOp accepts (logging the reason for each other
  // node) and replaces them with GpuPartition kernels.
  Status PrepareGraph(abi::TfLiteContext* context, SdDelegate* delegate, bool* handled) override;

  Counters counters() const override {
    Counters c;
    c.device_weight_bytes = static_cast<long long>(device_->weight_bytes());
    c.host_weight_bytes = device_->host_weight_bytes();
    c.max_host_weight_bytes = device_->max_host_weight_bytes();
    c.host_pages_released_bytes = static_cast<long long>(device_->host_pages_released());
    c.upload_ring_bytes = static_cast<long long>(device_->ring_upload_bytes());
    c.setup_weights_host_us = device_->setup_ns(Device::Setup::kWeightsHost) / 1000;
    c.setup_weights_upload_us = device_->setup_ns(Device::Setup::kWeightsUpload) / 1000;
    c.setup_tuning_us = device_->setup_ns(Device::Setup::kTuning) / 1000;
    c.setup_programs_us = device_->setup_ns(Device::Setup::kPrograms) / 1000;
    const Device::ProgramCounts programs = device_->program_counts();
    c.programs_built = programs.built;
    c.programs_shared = programs.shared;
    c.context_shared = programs.context_shared;
    c.weights_on_device = device_->weights_on_device();
    c.weights_on_host = device_->weights_on_host();
    return c;
  }
  // The persistent cache's counters and the set-up progress (DelegateStats::ToJson appends them).
  std::string ExtraStatsJson() const override;

  const Device& device() const { return *device_; }
  const DelegateOptions& options() const { return options_; }

 private:
  DelegateOptions options_;
  std::unique_ptr<Device> device_;
  const char* registration_name_;
};

// The delegate's persistent cache for a GPU backend: the folder cache_dir names (ResolvedCacheDir), capped at
// cache_max_mb; the deprecated opencl_cache_dir spelling costs one warning here.
std::shared_ptr<const DiskCache> OpenCache(const DelegateOptions& options, const Logger& logger);

}  // namespace sdgpu::gpu
