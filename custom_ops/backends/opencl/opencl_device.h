// gpu::Device on OpenCL: device, in-order queue and the kernels a model uses, with RAII ownership of every cl_*
// handle. Everything above the device (ops, partition, planning) lives in gpu/.
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
//
// The context, the parsed library and the built programs belong to the process, not to one device object
// (shared_programs.h): a delegate takes a unit another delegate of the process already built on the same device
// with the same build options, and counts it apart (programs_shared) from the ones it built.
//
// Activation storage: the device's own programs are built for its storage (-DSD_ACT_HALF=1 with activations_fp16);
// a kernel requested inside a gpu::Device::StorageScope of the other storage comes from a second program set, built
// the same way with the other -DSD_ACT_HALF (a partition's float storage islands). Both sets share the context.
#pragma once

#include <array>
#include <atomic>
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
#include "backends/opencl/cl_handle.h"
#include "backends/opencl/kernel_library.h"
#include "backends/opencl/program_builder.h"
#include "backends/opencl/shared_programs.h"
#include "common/log.h"
#include "common/status.h"
#include "gpu/device.h"

namespace sdgpu::ocl {

struct OpenClDeviceOptions {
  bool profiling = false;  // queue with CL_QUEUE_PROFILING_ENABLE; launches record event Timers
  std::shared_ptr<const DiskCache> cache;  // the persistent cache (program binaries); null = none
  StoreBinaries store_binaries = StoreBinaries::kAuto;  // delegate option cache_programs
  bool act_half = false;  // delegate option activations_fp16: the program is built with -DSD_ACT_HALF=1
  // delegate option weight_uploads: through a HostStagingRing always, never, or (kAuto) on a device without unified
  // host memory
  enum class Uploads { kAuto, kRing, kDirect } uploads = Uploads::kAuto;
  // delegate option opencl_limits: a smaller CL_DEVICE_MAX_MEM_ALLOC_SIZE (0 = the driver's)
  size_t max_alloc_bytes = 0;
};

class OpenClDevice final : public gpu::Device {
 public:
  // Picks the first GPU device of any platform, else the first device of any
  // type (PoCL exposes a CPU device), joins the process's shared state of that device and build options (context,
  // split kernel library, programs: created by the first delegate) and creates its own queue (nothing is compiled
  // yet).
  static Status Create(const OpenClDeviceOptions& options, const Logger& logger, std::unique_ptr<OpenClDevice>* out);

  const char* backend_name() const override { return "opencl"; }
  const std::string& name() const override { return device_name_; }
  size_t max_work_group_size() const override { return max_wg_; }
  int compute_units() const override { return compute_units_; }
  size_t local_memory_bytes() const override { return local_memory_bytes_; }
  // CL_DEVICE_MAX_MEM_ALLOC_SIZE: one buffer, so one tensor, one weight and one arena bank, holds at most this.
  size_t max_tensor_bytes() const override { return max_alloc_bytes_; }
  size_t max_buffer_bytes() const override { return max_alloc_bytes_; }
  bool profiling() const override { return options_.profiling; }
  // NVIDIA's platform: the tilings of backends/opencl/nvidia/attention_nv.cl.
  std::vector<gpu::AttnTiling> vendor_attention_tilings() const override;

  Status CreateBuffer(size_t bytes, std::unique_ptr<gpu::Buffer>* out) const override;
  std::unique_ptr<UploadRing> CreateUploadRing() const override;
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
  Status Flush() const override;
  // A marker event: waiting for it does not drain what was enqueued after it.
  Status Mark(std::unique_ptr<gpu::Fence>* out) const override;

  ProgramCounts program_counts() const override;

 private:
  OpenClDevice() = default;
  // The programs of one activation storage (header comment): the build options, the process's state for them and
  // what this device has built or taken from it.
  struct ProgramSet {
    std::string build_options;
    std::shared_ptr<SharedPrograms> shared;  // null until a kernel of this storage is first requested
    cl_program whole = nullptr;              // the whole library, once built (owned by shared)
    std::map<int, cl_program> unit_program;  // built unit -> its program (owned by shared)
    std::set<int> wanted_units;              // requested outside SpeculativeKernels scopes, not built yet
    const KernelLibrary& library() const { return shared->library(); }
    // The library is parsed: build per unit; else the whole library is the only program.
    bool split() const { return shared->split(); }
  };
  // The caller holds mu_. The set of the storage act_half() says now, its state acquired at its first request.
  Status CurrentSetLocked(ProgramSet** out) const;
  ProgramSet& own_set() const { return sets_[default_act_half() ? 1 : 0]; }
  // The caller holds mu_. Builds `units` and every wanted unit of `ps` not built yet, one program per unit.
  Status BuildUnitsLocked(ProgramSet& ps, std::set<int> units) const;
  // Compiles the units `list` claimed from the shared state (BuildUnitsLocked) and publishes them; `whole`: the
  // split failed and the whole library was built instead.
  Status CompileClaimedLocked(ProgramSet& ps, const std::vector<int>& list, int taken, bool* whole) const;
  // The caller holds mu_. The whole library as one program (also the fallback when a unit fails).
  Status BuildWholeLibraryLocked(ProgramSet& ps) const;
  // One program (thread-safe: touches no device state).
  Status BuildOne(const std::string& source, const std::string& options, const std::string& what,
                  ProgramResult* out) const;
  Status CreateClKernelLocked(const std::string& name, cl_program program, ClKernelHandle* out) const;
  cl_context context() const { return own_set().shared->context(); }
  cl_command_queue queue() const { return queue_.get(); }
  // Creates the cl_kernel of every requested kernel whose unit this device now has a program for.
  Status CreateBuiltKernelsLocked() const;

  // Declared first, so destroyed last: the queue and kernels below go before the programs and context they hold.
  // By storage: [0] float (SD_ACT_HALF 0), [1] half.
  mutable std::array<ProgramSet, 2> sets_;
  OpenClDeviceOptions options_;
  const ClApi* api_ = nullptr;
  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  std::string device_name_;
  std::string device_key_;
  bool nvidia_ = false;  // NVIDIA's platform (the program is built with SDGPU_NV_PTX)
  // kBuildOptions, plus -DSDGPU_NV_PTX=1 on NVIDIA's platform (and -DSDGPU_NV_SM90=1 on sm_90+); each ProgramSet
  // adds its storage's -DSD_ACT_HALF
  std::string base_options_;
  bool cpu_device_ = false;    // CL_DEVICE_TYPE_CPU (PoCL): program binaries not stored by default (program_builder.h)
  size_t max_wg_ = 0;
  int compute_units_ = 0;
  bool unified_memory_ = false;  // CL_DEVICE_HOST_UNIFIED_MEMORY
  size_t local_memory_bytes_ = 0;  // CL_DEVICE_LOCAL_MEM_SIZE
  size_t max_alloc_bytes_ = 0;     // CL_DEVICE_MAX_MEM_ALLOC_SIZE (or opencl_limits' smaller value)
  ClQueueHandle queue_;
  Logger logger_;
  mutable std::mutex mu_;  // guards everything below, and argument setting + enqueue; taken before shared_'s
  // Programs this device compiled or read from the disk cache (the cache's own counters say how many were read),
  // and programs it took from shared_, built by another device of the process.
  // (atomic: the stats read them without mu_, which a build holds for its whole length, and a progress bar polls
  // the stats meanwhile)
  mutable std::atomic<int> programs_built_{0};
  mutable std::atomic<int> programs_shared_{0};
  bool context_shared_ = false;  // Create joined a state another device of the process had made
  // by (storage, name)
  mutable std::map<std::pair<bool, std::string>, std::unique_ptr<gpu::Kernel>> kernels_;
};

// The concatenated OpenCL C sources (generated from the *.cl files at build time).
const char* KernelSource();

}  // namespace sdgpu::ocl
