// gpu::Device on OpenCL: device, context, in-order queue and the one program
// holding every kernel of the backend, with RAII ownership of every cl_* handle.
// Everything above the device (ops, partition, planning) lives in gpu/.
//
// The program is compiled once per delegate (all .cl sources concatenated);
// when a cache directory is set the device binary is stored there, keyed by a
// hash of (source, build options, platform, device, driver), and reused by the
// next process. Every OpenCL call is checked and turned into a Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/opencl/cl_api.h"
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
  bool profiling = false;     // queue with CL_QUEUE_PROFILING_ENABLE; launches record event Timers
  std::string cache_dir;      // "" = no program-binary cache
};

class OpenClDevice final : public gpu::Device {
 public:
  // Picks the first GPU device of any platform, else the first device of any
  // type (PoCL exposes a CPU device), compiles the kernels.
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
  // Sets the arguments (a buffer entry fills two parameters: cl_mem, int offset) and
  // enqueues; serialised by a mutex because cached cl_kernel objects are shared by ops.
  Status Launch(const gpu::Kernel& kernel, const gpu::Args& args, const gpu::Dim3& global, const gpu::Dim3& local,
                gpu::Timings* timings) const override;
  Status Finish() const override;

  bool program_from_cache() const { return program_from_cache_; }

 private:
  OpenClDevice() = default;
  Status BuildProgram(const Logger& logger);
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
  size_t max_wg_ = 0;
  int compute_units_ = 0;
  size_t local_memory_bytes_ = 0;  // CL_DEVICE_LOCAL_MEM_SIZE
  ClContextHandle context_;
  ClQueueHandle queue_;
  ClProgramHandle program_;
  bool program_from_cache_ = false;
  mutable std::mutex mu_;  // guards kernels_ and argument setting + enqueue
  mutable std::map<std::string, std::unique_ptr<gpu::Kernel>> kernels_;
};

// The concatenated OpenCL C sources (generated from the *.cl files at build time).
const char* KernelSource();

}  // namespace sdgpu::ocl
