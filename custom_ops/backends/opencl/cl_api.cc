#include "backends/opencl/cl_api.h"

#include <dlfcn.h>

#include <mutex>

namespace sdgpu::ocl {
namespace {

struct Loaded {
  ClApi api;
  Status status;
};

Loaded LoadOnce() {
  Loaded l;
  void* lib = nullptr;
  for (const char* name : {"libOpenCL.so.1", "libOpenCL.so"}) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    l.status = Status::Error("opencl: no OpenCL runtime (libOpenCL.so.1 not found; install an ICD loader and a driver, e.g. "
                             "ocl-icd-libopencl1 + pocl-opencl-icd)");
    return l;
  }
  // The handle is intentionally never closed: kernels and programs may outlive any one delegate.
#define SDGPU_CL_FN(name)                                                              \
  l.api.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));                 \
  if (l.api.name == nullptr) {                                                         \
    l.status = Status::Error("opencl: libOpenCL lacks the symbol " #name);             \
    return l;                                                                          \
  }
#include "backends/opencl/cl_functions.inc"
#undef SDGPU_CL_FN
  return l;
}

}  // namespace

Status LoadClApi(const ClApi** out) {
  static const Loaded loaded = LoadOnce();  // C++11 magic statics: thread-safe
  if (!loaded.status.ok()) return loaded.status;
  *out = &loaded.api;
  return Status::Ok();
}

std::string ClErrorName(cl_int code) {
  const char* name = "unknown error";
  switch (code) {
#define CASE(x) \
  case x:       \
    name = #x;  \
    break;
    CASE(CL_DEVICE_NOT_FOUND)
    CASE(CL_DEVICE_NOT_AVAILABLE)
    CASE(CL_COMPILER_NOT_AVAILABLE)
    CASE(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    CASE(CL_OUT_OF_RESOURCES)
    CASE(CL_OUT_OF_HOST_MEMORY)
    CASE(CL_PROFILING_INFO_NOT_AVAILABLE)
    CASE(CL_BUILD_PROGRAM_FAILURE)
    CASE(CL_INVALID_VALUE)
    CASE(CL_INVALID_PLATFORM)
    CASE(CL_INVALID_DEVICE)
    CASE(CL_INVALID_CONTEXT)
    CASE(CL_INVALID_COMMAND_QUEUE)
    CASE(CL_INVALID_MEM_OBJECT)
    CASE(CL_INVALID_BINARY)
    CASE(CL_INVALID_BUILD_OPTIONS)
    CASE(CL_INVALID_PROGRAM)
    CASE(CL_INVALID_PROGRAM_EXECUTABLE)
    CASE(CL_INVALID_KERNEL_NAME)
    CASE(CL_INVALID_KERNEL)
    CASE(CL_INVALID_ARG_INDEX)
    CASE(CL_INVALID_ARG_VALUE)
    CASE(CL_INVALID_ARG_SIZE)
    CASE(CL_INVALID_KERNEL_ARGS)
    CASE(CL_INVALID_WORK_DIMENSION)
    CASE(CL_INVALID_WORK_GROUP_SIZE)
    CASE(CL_INVALID_WORK_ITEM_SIZE)
    CASE(CL_INVALID_GLOBAL_OFFSET)
    CASE(CL_INVALID_EVENT)
    CASE(CL_INVALID_BUFFER_SIZE)
    CASE(CL_INVALID_GLOBAL_WORK_SIZE)
    case -1001:
      name = "CL_PLATFORM_NOT_FOUND_KHR";
      break;
#undef CASE
    default:
      break;
  }
  return std::string(name) + " (" + std::to_string(code) + ")";
}

}  // namespace sdgpu::ocl
