#include "backends/opencl/program_builder.h"

#include "common/hash64.h"

namespace sdgpu::ocl {
namespace {

// Releases a program unless released by the caller taking it.
class ProgramGuard {
 public:
  ProgramGuard(const ClApi& api, cl_program p) : api_(api), p_(p) {}
  ~ProgramGuard() {
    if (p_ != nullptr) api_.clReleaseProgram(p_);
  }
  ProgramGuard(const ProgramGuard&) = delete;
  ProgramGuard& operator=(const ProgramGuard&) = delete;
  cl_program get() const { return p_; }
  cl_program release() {
    cl_program p = p_;
    p_ = nullptr;
    return p;
  }

 private:
  const ClApi& api_;
  cl_program p_;
};

std::string BuildLog(const ClApi& api, cl_program p, cl_device_id d) {
  size_t n = 0;
  if (api.clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string log(n, '\0');
  if (api.clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr) != CL_SUCCESS) return "";
  if (log.size() > 2000) log.resize(2000);
  return log;
}

// The device binary of a built program (single device), or "" when the driver gives none.
std::string ReadBinary(const ClApi& api, cl_program p) {
  size_t size = 0;
  if (api.clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr) != CL_SUCCESS || size == 0) {
    return "";
  }
  std::string bin(size, '\0');
  unsigned char* ptr = reinterpret_cast<unsigned char*>(bin.data());
  if (api.clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) != CL_SUCCESS) return "";
  return bin;
}

}  // namespace

Status ProgramKernelNames(const ClApi& api, cl_program program, std::string* names) {
  size_t n = 0;
  SDGPU_RETURN_IF_ERROR(
      ClCheck(api.clGetProgramInfo(program, CL_PROGRAM_KERNEL_NAMES, 0, nullptr, &n), "clGetProgramInfo(KERNEL_NAMES)"));
  names->assign(n, '\0');
  SDGPU_RETURN_IF_ERROR(ClCheck(api.clGetProgramInfo(program, CL_PROGRAM_KERNEL_NAMES, n, names->data(), nullptr),
                                "clGetProgramInfo(KERNEL_NAMES)"));
  while (!names->empty() && names->back() == '\0') names->pop_back();
  return Status::Ok();
}

Status BuildProgram(const ProgramRequest& r, const DiskCache& cache, const Logger& logger, ProgramResult* out) {
  const ClApi& api = *r.api;
  const std::string key = "clprog|" + r.key_prefix + "|" + r.options + "|" + Hex64(Hash64(r.source)) + "|" +
                          std::to_string(r.source.size());
  cl_int err = CL_SUCCESS;
  std::string bin;
  if (r.store != StoreBinaries::kNever && cache.Load(CacheKind::kProgram, key, &bin)) {
    const size_t len = bin.size();
    const unsigned char* ptr = reinterpret_cast<const unsigned char*>(bin.data());
    cl_int bin_status = CL_SUCCESS;
    ProgramGuard p(api, api.clCreateProgramWithBinary(r.context, 1, &r.device, &len, &ptr, &bin_status, &err));
    if (err == CL_SUCCESS && bin_status == CL_SUCCESS &&
        api.clBuildProgram(p.get(), 1, &r.device, r.options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
      out->program = p.release();
      out->from_cache = true;
      return Status::Ok();
    }
    // A valid entry (its checksums held) that this driver refuses: compiled again below, and the entry replaced.
    logger.Warning("opencl: the driver refused a cached program binary (" + cache.PathOf(CacheKind::kProgram, key) +
                   "); compiling it again");
  }
  const char* src = r.source.c_str();
  const size_t len = r.source.size();
  ProgramGuard p(api, api.clCreateProgramWithSource(r.context, 1, &src, &len, &err));
  SDGPU_RETURN_IF_ERROR(ClCheck(err, "clCreateProgramWithSource"));
  err = api.clBuildProgram(p.get(), 1, &r.device, r.options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    return Status::Error("opencl: kernel build failed: " + ClErrorName(err) + ": " + BuildLog(api, p.get(), r.device));
  }
  const bool store = r.store == StoreBinaries::kAlways || (r.store == StoreBinaries::kAuto && !r.cpu_device);
  if (store && cache.enabled()) {
    const std::string binary = ReadBinary(api, p.get());
    if (!binary.empty()) cache.Store(CacheKind::kProgram, key, binary);
  }
  out->program = p.release();
  out->from_cache = false;
  return Status::Ok();
}

}  // namespace sdgpu::ocl
