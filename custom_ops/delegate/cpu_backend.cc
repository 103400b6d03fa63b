#include "delegate/cpu_backend.h"

#include <cstdlib>
#include <new>

#include "ops/attention/cpu.h"
#include "ops/conv2d_winograd/cpu_kernel.h"
#include "ops/gelu/cpu.h"
#include "ops/group_norm/cpu.h"

namespace sdgpu {
namespace {

constexpr size_t kAlignment = 64;

class HostArena final : public Arena {
 public:
  HostArena(void* data, size_t size) : data_(data), size_(size) {}
  ~HostArena() override { std::free(data_); }
  size_t size() const override { return size_; }
  void* host_data() override { return data_; }

 private:
  void* data_;
  size_t size_;
};

class AttentionKernel final : public BackendKernel {
 public:
  AttentionKernel(const AttentionAttrs& attrs, const AttentionCpuConfig& cfg, ThreadPool* pool)
      : attrs_(attrs), cfg_(cfg), pool_(pool) {}
  Status Prepare(const std::vector<TensorInfo>& in, const TensorInfo&, size_t* scratch) override {
    problem_.batch = in[0].dims[0];
    problem_.seq_q = in[0].dims[1];
    problem_.seq_k = in[1].dims[1];
    problem_.heads = attrs_.heads;
    problem_.head_dim = attrs_.head_dim;
    *scratch = AttentionCpuScratchBytesPerWorker(problem_, cfg_) * static_cast<size_t>(pool_->num_threads());
    return Status::Ok();
  }
  Status Run(const KernelIO& io) override {
    AttentionCpu(attrs_, problem_, cfg_, static_cast<const float*>(io.inputs[0]),
                 static_cast<const float*>(io.inputs[1]), static_cast<const float*>(io.inputs[2]),
                 static_cast<float*>(io.output), io.scratch, pool_);
    return Status::Ok();
  }

 private:
  AttentionAttrs attrs_;
  AttentionCpuConfig cfg_;
  ThreadPool* pool_;
  AttentionProblem problem_;
};

class GeluKernel final : public BackendKernel {
 public:
  GeluKernel(const GeluAttrs& attrs, ThreadPool* pool) : attrs_(attrs), pool_(pool) {}
  Status Prepare(const std::vector<TensorInfo>& in, const TensorInfo&, size_t* scratch) override {
    count_ = NumElements(in[0].dims);
    last_dim_ = in[0].dims.empty() ? 1 : in[0].dims.back();
    *scratch = 0;
    return Status::Ok();
  }
  Status Run(const KernelIO& io) override {
    GeluCpu(attrs_, static_cast<const float*>(io.inputs[0]), static_cast<float*>(io.output), count_, last_dim_,
            pool_);
    return Status::Ok();
  }

 private:
  GeluAttrs attrs_;
  ThreadPool* pool_;
  int64_t count_ = 0, last_dim_ = 1;
};

class GroupNormKernel final : public BackendKernel {
 public:
  GroupNormKernel(const GroupNormAttrs& attrs, ThreadPool* pool) : attrs_(attrs), pool_(pool) {}
  Status Prepare(const std::vector<TensorInfo>& in, const TensorInfo&, size_t* scratch) override {
    geometry_ = GroupNormGeometryFor(attrs_, in[0].dims);
    *scratch = 0;
    return Status::Ok();
  }
  Status Run(const KernelIO& io) override {
    GroupNormCpu(attrs_, geometry_, static_cast<const float*>(io.inputs[0]), static_cast<const float*>(io.inputs[1]),
                 static_cast<const float*>(io.inputs[2]), static_cast<float*>(io.output), pool_);
    return Status::Ok();
  }

 private:
  GroupNormAttrs attrs_;
  ThreadPool* pool_;
  GroupNormGeometry geometry_;
};

}  // namespace

CpuBackend::CpuBackend(const DelegateOptions& options)
    : options_(options), pool_(std::make_unique<ThreadPool>(ResolvedNumThreads(options))) {}

Status CpuBackend::Supports(const ParsedOp&, const std::vector<TensorInfo>&) const {
  return Status::Ok();  // the CPU reference backend runs everything the op definitions accept
}

Status CpuBackend::CreateKernel(const ParsedOp& op, std::unique_ptr<BackendKernel>* out) {
  switch (op.def->kind) {
    case OpKind::kAttention: {
      AttentionCpuConfig cfg;
      cfg.block_q = options_.attention_block_q;
      cfg.block_k = options_.attention_block_k;
      *out = std::make_unique<AttentionKernel>(std::get<AttentionAttrs>(op.attrs), cfg, pool_.get());
      return Status::Ok();
    }
    case OpKind::kGelu:
      *out = std::make_unique<GeluKernel>(std::get<GeluAttrs>(op.attrs), pool_.get());
      return Status::Ok();
    case OpKind::kGroupNorm:
      *out = std::make_unique<GroupNormKernel>(std::get<GroupNormAttrs>(op.attrs), pool_.get());
      return Status::Ok();
    case OpKind::kConv2DWinograd:
      *out = MakeConv2DWinogradCpuKernel(std::get<Conv2DWinogradAttrs>(op.attrs), pool_.get());
      return Status::Ok();
  }
  return Status::Error("cpu backend: unhandled op kind");
}

Status CpuBackend::AllocateArena(size_t bytes, std::unique_ptr<Arena>* out) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* data = rounded == 0 ? nullptr : std::aligned_alloc(kAlignment, rounded);
  if (rounded != 0 && data == nullptr) {
    return Status::Error("cpu backend: failed to allocate a " + std::to_string(rounded) + "-byte arena");
  }
  *out = std::make_unique<HostArena>(data, rounded);
  return Status::Ok();
}

}  // namespace sdgpu
