// One OpenCL program, built through the delegate's persistent cache (common/disk_cache.h, kind "program"): the
// entry's key is the device key (platform, device, driver, delegate build), the build options and a hash of the
// source, and its payload the device binary. A cached binary the driver refuses (a driver update under the same
// version string) is reported once and the program is compiled from source again.
//
// Whether a compiled program's binary is stored: "auto" stores it for GPUs and accelerators, not for CPU devices
// (PoCL): reading a CPU program's binary makes the runtime generate machine code for every kernel in it (tens of
// CPU seconds for the SD kernels), which the first run would pay only to save the next one a few seconds of
// parsing, while PoCL keeps its own cache of the code it generates at launches.
#pragma once

#include <string>

#include "backends/opencl/cl_api.h"
#include "common/disk_cache.h"
#include "common/log.h"
#include "common/status.h"

namespace sdgpu::ocl {

enum class StoreBinaries { kAuto, kAlways, kNever };

struct ProgramRequest {
  const ClApi* api = nullptr;
  cl_context context = nullptr;
  cl_device_id device = nullptr;
  bool cpu_device = false;
  std::string source;
  std::string options;
  std::string key_prefix;  // Device::cache_key()
  StoreBinaries store = StoreBinaries::kAuto;
};

struct ProgramResult {
  cl_program program = nullptr;  // owned by the caller
  bool from_cache = false;
};

// Loads the program from the cache or compiles it (and stores its binary per `store`). A failed compile returns
// the first lines of the build log in the error.
Status BuildProgram(const ProgramRequest& request, const DiskCache& cache, const Logger& logger, ProgramResult* out);

// The names of the kernels a built program holds (CL_PROGRAM_KERNEL_NAMES, ';'-separated).
Status ProgramKernelNames(const ClApi& api, cl_program program, std::string* names);

}  // namespace sdgpu::ocl
