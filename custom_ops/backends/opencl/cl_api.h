// The OpenCL entry points the backend uses, resolved at runtime with dlopen
// ("libOpenCL.so.1", the ICD loader) instead of linking libOpenCL.
//
// Trade-off: a little boilerplate (one pointer per function) buys a delegate
// .so that still loads and runs the cpu backend on machines without any
// OpenCL runtime; asking for backend=opencl there fails with a one-line error.
// Only OpenCL 1.2 core functions are used (PoCL and NVIDIA both provide them).
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

#include <string>

#include "common/status.h"

namespace sdgpu::ocl {

struct ClApi {
#define SDGPU_CL_FN(name) decltype(&::name) name = nullptr;
#include "backends/opencl/cl_functions.inc"
#undef SDGPU_CL_FN
};

// Process-wide table (loaded once, thread-safe); error if libOpenCL or a symbol is missing.
Status LoadClApi(const ClApi** out);

// "CL_OUT_OF_RESOURCES (-5)" style name of an OpenCL error code.
std::string ClErrorName(cl_int code);

// Status for a failed call: "<what>: <error name>".
inline Status ClCheck(cl_int code, const char* what) {
  if (code == CL_SUCCESS) return Status::Ok();
  return Status::Error(std::string("opencl: ") + what + " failed: " + ClErrorName(code));
}

}  // namespace sdgpu::ocl
