// The seam between the backend-agnostic delegate (partitioning, op parsing,
// memory planning, TFLite glue) and a compute backend. CPU implements it now;
// OpenCL and GL backends implement the same interface later and reuse
// everything else unchanged.
//
// Memory model: for each delegated partition the delegate plans ONE arena
// (internal tensors + per-node scratch, see memory_planner.h) and asks the
// backend to allocate it. Kernels then receive host pointers for partition
// inputs/outputs and arena-relative buffers for everything else. GPU backends
// will back the arena with a device buffer and upload/download partition I/O.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "abi/tflite_abi.h"
#include "common/status.h"
#include "ops/op_registry.h"
#include "ops/tensor_info.h"

namespace sdgpu {

class SdDelegate;

// Pointers a kernel sees for one Run. `scratch` holds at least the bytes the
// kernel asked for in Prepare and is 64-byte aligned.
struct KernelIO {
  std::vector<const void*> inputs;
  void* output = nullptr;
  void* scratch = nullptr;
};

class BackendKernel {
 public:
  virtual ~BackendKernel() = default;
  // Shapes are final for the next Run(s); returns the scratch bytes needed.
  virtual Status Prepare(const std::vector<TensorInfo>& inputs, const TensorInfo& output,
                         size_t* scratch_bytes) = 0;
  virtual Status Run(const KernelIO& io) = 0;
};

class Arena {
 public:
  virtual ~Arena() = default;
  virtual size_t size() const = 0;
  // Host-visible base address (CPU backend); GPU backends may return nullptr
  // and expose device handles instead.
  virtual void* host_data() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Backend-specific limits beyond the generic op validation (e.g. a GL
  // backend without causal attention). Called at partition time and again
  // whenever shapes change.
  virtual Status Supports(const ParsedOp& op, const std::vector<TensorInfo>& inputs) const = 0;
  virtual Status CreateKernel(const ParsedOp& op, std::unique_ptr<BackendKernel>* out) = 0;
  virtual Status AllocateArena(size_t bytes, std::unique_ptr<Arena>* out) = 0;
  // Whole-graph hook for device backends that also run builtin ops (OpenCL):
  // set *handled and do the partitioning + kernel replacement yourself. The
  // default leaves *handled false and the Sd*-only partitioner runs.
  virtual Status PrepareGraph(abi::TfLiteContext* context, SdDelegate* delegate, bool* handled) {
    *handled = false;
    return Status::Ok();
  }
  // The backend's own counters for the delegate stats (DelegateStats::ToJson); -1 = not applicable.
  //   device_weight_bytes: bytes of model constants held on the device (the CPU backend reads the interpreter's
  //     own buffers);
  //   host_weight_bytes: bytes of model constants the backend holds on the host besides the interpreter's (GPU:
  //     folded fp16 / int8 DEQUANTIZEs as float32, until the first invoke has uploaded what they feed);
  //   setup_*_us: host time of the lazy preparation the first invokes do (GPU partitions build their device
  //     data at an op's first Enqueue, not at load): packing / transforming constant weights on the host,
  //     uploading them, and timing GEMM tile candidates (TileTuner). Summed over ops, so a benchmark can say
  //     where its "first inference" time went.
  struct Counters {
    long long device_weight_bytes = -1;
    long long host_weight_bytes = -1;
    long long max_host_weight_bytes = -1;      // the most host_weight_bytes was
    long long host_pages_released_bytes = -1;  // model weight pages given back to the system (release_weight_pages)
    long long upload_ring_bytes = -1;          // set-up uploads through the device's UploadRing (weight_uploads)
    long long setup_weights_host_us = -1;
    long long setup_weights_upload_us = -1;
    long long setup_tuning_us = -1;
    long long setup_programs_us = -1;  // building programs: compiled, or read from the persistent cache
    long long programs_built = -1;     // programs the backend compiled or read from the persistent cache
    long long programs_shared = -1;    // programs taken ready-made from another delegate of the process
    long long context_shared = -1;     // 1: the device's context was another delegate's (e.g. sdlite's early one)
    long long weights_on_device = -1;  // constant weights produced on the device from the model's bytes
    long long weights_on_host = -1;    // ... and on the host (packed / folded there, then uploaded)
  };
  virtual Counters counters() const { return {}; }
  // More stats members (",\"key\":value..." JSON, or ""): GPU backends add the persistent cache's counters and the
  // set-up progress.
  virtual std::string ExtraStatsJson() const { return ""; }
};

}  // namespace sdgpu
