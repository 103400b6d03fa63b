// gpu::Device on OpenCL: device, context, in-order queue and the programs holding
// the kernels a model uses, with RAII ownership of every cl_* handle.
// Everything above the device (ops, partition, planning) lives in gpu/.
//
// Programs are built lazily from the kernel library (all .cl sources
// concatenated, split into kernel units by KernelLibrary): GetKernel only
// records which kernels the ops want, PrepareKernels (or the first launch of a
// kernel not built yet) builds every wanted unit, each as its own program (the
// library's shared code plus that unit: the same source whatever model asks for
// it), in parallel on the host's cores; a tuning candidate
// (Device::SpeculativeKernels) is built only when it is first launched. Each
// program goes through the persistent cache (program_builder.h), keyed by its
// source, the build options and the device. When the library cannot be split,
// or a unit fails to build, the whole library is built as one program, as
// before. Every OpenCL call is checked and turned into a Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backends/opencl/cl_api.h"
#include "backends/opencl/kernel_library.h"
#include "backends/opencl/program_builder.h"
#include "common/log.h"
#include "common/status.h"
#include "gpu/device.h"

namespace sdgpu::ocl {

// Move-only owner of one cl_* handle released with `Release`.
template <typename T, cl_int (*ClApi::*Release)(T)>
class ClHandle {
 public:
  ClHandle() = default;
  ClHandle(const ClApi* api, T h) : api_(api), h_(h) {}
  ~ClHandle() { reset(); }
  ClHandle(ClHandle&& o) noexcept : api_(o.api_), h_(std::exchange(o.h_, nullptr)) {}
  ClHandle& operator=(ClHandle&& o) noexcept {
    if (this != &o) {
      reset();
      api_ = o.api_;
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  ClHandle(const ClHandle&) = delete;
  ClHandle& operator=(const ClHandle&) = delete;
  T get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }
  void reset() {
    if (h_ != nullptr && api_ != nullptr) (api_->*Release)(h_);
    h_ = nullptr;
  }

 private:
  const ClApi* api_ = nullptr;
  T h_ = nullptr;
};

// ClApi stores function pointers, not member functions; these adapters give
// ClHandle a uniform pointer-to-member to call.
using ClContextHandle = ClHandle<cl_context, &ClApi::clReleaseContext>;
using ClQueueHandle = ClHandle<cl_command_queue, &ClApi::clReleaseCommandQueue>;
using ClMemHandle = ClHandle<cl_mem, &ClApi::clReleaseMemObject>;
using ClProgramHandle = ClHandle<cl_program, &ClApi::clReleaseProgram>;
using ClKernelHandle = ClHandle<cl_kernel, &ClApi::clReleaseKernel>;
using ClEventHandle = ClHandle<cl_event, &ClApi::clReleaseEvent>;

struct OpenClDeviceOptions {
  bool profiling = false;  // queue with CL_QUEUE_PROFILING_ENABLE; launches record event Timers
  std::shared_ptr<const DiskCache> cache;  // the persistent cache (program binaries); null = none
  StoreBinaries store_binaries = StoreBinaries::kAuto;  // delegate option cache_programs
};

class OpenClDevice final : public gpu::Device {
 public:
  // Picks the first GPU device of any platform, else the first device of any
  // type (PoCL exposes a CPU device), creates the context and queue and splits the kernel library (nothing is
  // compiled yet).
  static Status Create(const OpenClDeviceOptions& options, const Logger& logger, std::unique_ptr<OpenClDevice>* out);

  const char* backend_name() const override { return "opencl"; }
  const std::string& name() const override { return device_name_; }
  size_t max_work_group_size() const override { return max_wg_; }
  int compute_units() const override { return compute_units_; }
  size_t local_memory_bytes() const override { return local_memory_bytes_; }
  bool profiling() const override { return options_.profiling; }
  // NVIDIA's platform: the tilings of backends/opencl/nvidia/attention_nv.cl.
  std::vector<gpu::AttnTiling> vendor_attention_tilings() const override;

  Status CreateBuffer(size_t bytes, std::unique_ptr<gpu::Buffer>* out) const override;
  Status Upload(const gpu::Buffer& buffer, size_t offset, size_t bytes, const void* src, bool blocking) const override;
  Status Download(const gpu::Buffer& buffer, size_t offset, size_t bytes, void* dst) const override;
  Status GetKernel(const std::string& name, const gpu::Kernel** out) const override;
  bool HasKernel(const std::string& name) const override;
  bool KernelBuildPending(const gpu::Kernel& kernel) const override;
  bool ProgramsPersist() const override;
  Status PrepareKernels() const override;
  std::string cache_key() const override;
  // Sets the arguments (a buffer entry fills two parameters: cl_mem, int offset) and
  // enqueues; serialised by a mutex because cached cl_kernel objects are shared by ops.
  Status Launch(const gpu::Kernel& kernel, const gpu::Args& args, const gpu::Dim3& global, const gpu::Dim3& local,
                gpu::Timings* timings) const override;
  Status Finish() const override;

  // Programs built so far and how many of them came from the cache (tests, logs).
  int programs_built() const;
  int programs_from_cache() const;

 private:
  OpenClDevice() = default;
  // The caller holds mu_. Builds `units` and every wanted unit not built yet, one program per unit.
  Status BuildUnitsLocked(std::set<int> units) const;
  // The caller holds mu_. The whole library as one program (also the fallback when a unit fails).
  Status BuildWholeLibraryLocked() const;
  // One program (thread-safe: touches no device state).
  Status BuildOne(const std::string& source, const std::string& what, ProgramResult* out) const;
  Status CreateClKernelLocked(const std::string& name, cl_program program, ClKernelHandle* out) const;
  cl_context context() const { return context_.get(); }
  cl_command_queue queue() const { return queue_.get(); }

  OpenClDeviceOptions options_;
  const ClApi* api_ = nullptr;
  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  std::string device_name_;
  std::string device_key_;
  bool nvidia_ = false;  // NVIDIA's platform (the program is built with SDGPU_NV_PTX)
  std::string build_options_;  // kBuildOptions, plus -DSDGPU_NV_PTX=1 on NVIDIA's platform (and -DSDGPU_NV_SM90=1 on sm_90+)
  bool cpu_device_ = false;    // CL_DEVICE_TYPE_CPU (PoCL): program binaries not stored by default (program_builder.h)
  size_t max_wg_ = 0;
  int compute_units_ = 0;
  size_t local_memory_bytes_ = 0;  // CL_DEVICE_LOCAL_MEM_SIZE
  ClContextHandle context_;
  ClQueueHandle queue_;
  Logger logger_;
  KernelLibrary library_;
  bool split_ = false;  // library_ parsed: build per unit; else whole_ is the only program
  mutable std::mutex mu_;  // guards everything below, and argument setting + enqueue
  mutable std::vector<ClProgramHandle> programs_;
  mutable int programs_from_cache_ = 0;
  mutable cl_program whole_ = nullptr;          // the whole library, once built (owned by programs_)
  mutable std::map<int, cl_program> unit_program_;  // built unit -> its program (owned by programs_)
  mutable std::set<int> wanted_units_;          // requested outside SpeculativeKernels scopes, not built yet
  mutable std::map<std::string, std::unique_ptr<gpu::Kernel>> kernels_;
};

// The concatenated OpenCL C sources (generated from the *.cl files at build time).
const char* KernelSource();

}  // namespace sdgpu::ocl
