// OpenCL device, context, queue and the one program holding every kernel of
// the backend, with RAII ownership of every cl_* handle.
//
// The program is compiled once per delegate (all .cl sources concatenated);
// when a cache directory is set the device binary is stored there, keyed by a
// hash of (source, build options, platform, device, driver), and reused by the
// next process. Every OpenCL call is checked and turned into a Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/opencl/cl_api.h"
#include "common/log.h"
#include "common/status.h"

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

struct ClRuntimeOptions {
  bool profiling = false;     // queue with CL_QUEUE_PROFILING_ENABLE
  std::string cache_dir;      // "" = no program-binary cache
};

class ClRuntime {
 public:
  // Picks the first GPU device of any platform, else the first device of any
  // type (PoCL exposes a CPU device), compiles the kernels.
  static Status Create(const ClRuntimeOptions& options, const Logger& logger, std::unique_ptr<ClRuntime>* out);

  const ClApi& api() const { return *api_; }
  cl_context context() const { return context_.get(); }
  cl_command_queue queue() const { return queue_.get(); }
  cl_device_id device() const { return device_; }
  const std::string& device_name() const { return device_name_; }
  bool profiling() const { return options_.profiling; }
  bool program_from_cache() const { return program_from_cache_; }
  size_t max_work_group_size() const { return max_wg_; }

  Status CreateKernel(const char* name, ClKernelHandle* out) const;
  Status CreateBuffer(size_t bytes, ClMemHandle* out) const;
  Status Upload(cl_mem mem, size_t offset, size_t bytes, const void* src, bool blocking) const;
  Status Download(cl_mem mem, size_t offset, size_t bytes, void* dst) const;
  Status Finish() const;

  // Enqueues `kernel` over `global` (rounded up to multiples of `local` when
  // given); returns the event when profiling (else *event stays null).
  Status Launch(cl_kernel kernel, const std::vector<size_t>& global, const std::vector<size_t>& local,
                ClEventHandle* event) const;

 private:
  ClRuntime() = default;
  Status BuildProgram(const Logger& logger);

  ClRuntimeOptions options_;
  const ClApi* api_ = nullptr;
  cl_platform_id platform_ = nullptr;
  cl_device_id device_ = nullptr;
  std::string device_name_;
  std::string device_key_;
  size_t max_wg_ = 0;
  ClContextHandle context_;
  ClQueueHandle queue_;
  ClProgramHandle program_;
  bool program_from_cache_ = false;
};

// Sets kernel arguments in order; stops at the first failure.
class ArgSetter {
 public:
  ArgSetter(const ClApi& api, cl_kernel k) : api_(api), k_(k) {}
  template <typename T>
  ArgSetter& operator()(const T& v) {
    if (status_.ok()) {
      const cl_int err = api_.clSetKernelArg(k_, index_, sizeof(T), &v);
      if (err != CL_SUCCESS) status_ = ClCheck(err, ("clSetKernelArg #" + std::to_string(index_)).c_str());
    }
    ++index_;
    return *this;
  }
  ArgSetter& Local(size_t bytes) {
    if (status_.ok()) {
      const cl_int err = api_.clSetKernelArg(k_, index_, bytes, nullptr);
      if (err != CL_SUCCESS) status_ = ClCheck(err, "clSetKernelArg (local)");
    }
    ++index_;
    return *this;
  }
  Status status() const { return status_; }

 private:
  const ClApi& api_;
  cl_kernel k_;
  cl_uint index_ = 0;
  Status status_;
};

// The concatenated OpenCL C sources (generated from the *.cl files at build time).
const char* KernelSource();

}  // namespace sdgpu::ocl
