// RAII owners of OpenCL handles: every cl_* object the backend creates is released exactly once, whatever error
// path leaves the scope.
#pragma once

#include <utility>

#include "backends/opencl/cl_api.h"

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

}  // namespace sdgpu::ocl
