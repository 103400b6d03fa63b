#include "backends/opencl/opencl_device.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sys/stat.h>

#include "backends/opencl/nvidia/attention_tilings.h"

namespace sdgpu::ocl {
namespace {

constexpr const char* kBuildOptions = "-cl-std=CL1.2";
// NVIDIA's compiler takes inline PTX: the kernels' SDGPU_NV_PTX paths (attention's shfl.sync exchange, ATR_XS).
constexpr const char* kNvidiaBuildOptions = "-cl-std=CL1.2 -DSDGPU_NV_PTX=1";
// ... and on compute capability 9.x or newer the FP64 tensor-core kernels (mma.sync m16n8k8 .f64 is sm_90 only).
constexpr const char* kNvidiaSm90Option = " -DSDGPU_NV_SM90=1";
constexpr cl_device_info kDeviceComputeCapabilityMajorNv = 0x4000;  // cl_nv_device_attribute_query

std::string DeviceString(const ClApi& api, cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (api.clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (api.clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string PlatformString(const ClApi& api, cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (api.clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
  std::string s(n, '\0');
  if (api.clGetPlatformInfo(p, what, n, s.data(), nullptr) != CL_SUCCESS) return "";
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// FNV-1a 64: a cache key, not a security boundary (the driver validates binaries).
uint64_t Fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void MakeDirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
  }
}

class OpenClBuffer final : public gpu::Buffer {
 public:
  OpenClBuffer(ClMemHandle mem, size_t bytes) : mem_(std::move(mem)), bytes_(bytes) {}
  size_t bytes() const override { return bytes_; }
  cl_mem mem() const { return mem_.get(); }

 private:
  ClMemHandle mem_;
  size_t bytes_;  // as requested (the allocation is at least 64 bytes)
};

class OpenClKernel final : public gpu::Kernel {
 public:
  OpenClKernel(ClKernelHandle k, std::string name) : k_(std::move(k)), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  cl_kernel get() const { return k_.get(); }

 private:
  ClKernelHandle k_;
  std::string name_;
};

// Device time of one launch from its event (queue created with CL_QUEUE_PROFILING_ENABLE).
class OpenClTimer final : public gpu::Timer {
 public:
  OpenClTimer(std::string kernel, const ClApi* api, ClEventHandle ev)
      : Timer(std::move(kernel)), api_(api), ev_(std::move(ev)) {}
  Status ElapsedMs(double* ms) const override {
    cl_ulong t0 = 0, t1 = 0;
    SDGPU_RETURN_IF_ERROR(ClCheck(
        api_->clGetEventProfilingInfo(ev_.get(), CL_PROFILING_COMMAND_START, sizeof(t0), &t0, nullptr),
        "clGetEventProfilingInfo"));
    SDGPU_RETURN_IF_ERROR(ClCheck(
        api_->clGetEventProfilingInfo(ev_.get(), CL_PROFILING_COMMAND_END, sizeof(t1), &t1, nullptr),
        "clGetEventProfilingInfo"));
    *ms = static_cast<double>(t1 - t0) * 1e-6;
    return Status::Ok();
  }

 private:
  const ClApi* api_;
  ClEventHandle ev_;
};

cl_mem MemOf(const gpu::Buffer* b) { return b == nullptr ? nullptr : static_cast<const OpenClBuffer*>(b)->mem(); }

}  // namespace

Status OpenClDevice::Create(const OpenClDeviceOptions& options, const Logger& logger,
                            std::unique_ptr<OpenClDevice>* out) {
  std::unique_ptr<OpenClDevice> rt(new OpenClDevice());
  rt->options_ = options;
  SDGPU_RETURN_IF_ERROR(LoadClApi(&rt->api_));
  const ClApi& api = *rt->api_;

  cl_uint num_platforms = 0;
  cl_int err = api.clGetPlatformIDs(0, nullptr, &num_platforms);
  if (err != CL_SUCCESS || num_platforms == 0) {
    return Status::Error("opencl: no OpenCL platform found (" + ClErrorName(err) +
                         "); install a driver, e.g. pocl-opencl-icd");
  }
  std::vector<cl_platform_id> platforms(num_platforms);
  SDGPU_RETURN_IF_ERROR(ClCheck(api.clGetPlatformIDs(num_platforms, platforms.data(), nullptr), "clGetPlatformIDs"));
  for (cl_device_type type : {static_cast<cl_device_type>(CL_DEVICE_TYPE_GPU), static_cast<cl_device_type>(CL_DEVICE_TYPE_ALL)}) {
    for (cl_platform_id p : platforms) {
      cl_device_id d = nullptr;
      cl_uint n = 0;
      if (api.clGetDeviceIDs(p, type, 1, &d, &n) == CL_SUCCESS && n > 0) {
        rt->platform_ = p;
        rt->device_ = d;
        break;
      }
    }
    if (rt->device_ != nullptr) break;
  }
  if (rt->device_ == nullptr) return Status::Error("opencl: no OpenCL device found on any platform");
  rt->device_name_ = DeviceString(api, rt->device_, CL_DEVICE_NAME);
  rt->device_key_ = PlatformString(api, rt->platform_, CL_PLATFORM_NAME) + "|" +
                    PlatformString(api, rt->platform_, CL_PLATFORM_VERSION) + "|" + rt->device_name_ + "|" +
                    DeviceString(api, rt->device_, CL_DRIVER_VERSION);
  const bool nvidia = PlatformString(api, rt->platform_, CL_PLATFORM_NAME).find("NVIDIA") != std::string::npos;
  rt->nvidia_ = nvidia;
  rt->build_options_ = nvidia ? kNvidiaBuildOptions : kBuildOptions;
  cl_uint cc_major = 0;
  if (nvidia && api.clGetDeviceInfo(rt->device_, kDeviceComputeCapabilityMajorNv, sizeof(cc_major), &cc_major,
                                    nullptr) == CL_SUCCESS &&
      cc_major >= 9) {
    rt->build_options_ += kNvidiaSm90Option;
  }
  SDGPU_RETURN_IF_ERROR(ClCheck(api.clGetDeviceInfo(rt->device_, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(size_t),
                                                     &rt->max_wg_, nullptr),
                                "clGetDeviceInfo(MAX_WORK_GROUP_SIZE)"));
  cl_uint units = 0;
  SDGPU_RETURN_IF_ERROR(ClCheck(api.clGetDeviceInfo(rt->device_, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(cl_uint), &units,
                                                     nullptr),
                                "clGetDeviceInfo(MAX_COMPUTE_UNITS)"));
  rt->compute_units_ = static_cast<int>(units);
  cl_ulong local_bytes = 0;
  SDGPU_RETURN_IF_ERROR(ClCheck(api.clGetDeviceInfo(rt->device_, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(cl_ulong),
                                                     &local_bytes, nullptr),
                                "clGetDeviceInfo(LOCAL_MEM_SIZE)"));
  rt->local_memory_bytes_ = static_cast<size_t>(local_bytes);

  cl_context ctx = api.clCreateContext(nullptr, 1, &rt->device_, nullptr, nullptr, &err);
  SDGPU_RETURN_IF_ERROR(ClCheck(err, "clCreateContext"));
  rt->context_ = ClContextHandle(&api, ctx);
  const cl_command_queue_properties props = options.profiling ? CL_QUEUE_PROFILING_ENABLE : 0;
  cl_command_queue q = api.clCreateCommandQueue(ctx, rt->device_, props, &err);
  SDGPU_RETURN_IF_ERROR(ClCheck(err, "clCreateCommandQueue"));
  rt->queue_ = ClQueueHandle(&api, q);
  SDGPU_RETURN_IF_ERROR(rt->BuildProgram(logger));
  logger.Info("opencl: device '" + rt->device_name_ + "' (" + rt->device_key_ + "), options '" + rt->build_options_ +
              "', program " +
              (rt->program_from_cache_ ? "loaded from the binary cache" : "compiled from source"));
  *out = std::move(rt);
  return Status::Ok();
}

Status OpenClDevice::BuildProgram(const Logger& logger) {
  const ClApi& api = *api_;
  const std::string source = KernelSource();
  char key[32];
  std::snprintf(key, sizeof(key), "%016llx",
                static_cast<unsigned long long>(Fnv1a(device_key_, Fnv1a(build_options_, Fnv1a(source)))));
  const std::string cache_file = options_.cache_dir.empty() ? "" : options_.cache_dir + "/sdgpu-" + key + ".clbin";
  cl_int err = CL_SUCCESS;

  if (!cache_file.empty()) {
    std::ifstream in(cache_file, std::ios::binary);
    std::string bin((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!bin.empty()) {
      const size_t len = bin.size();
      const unsigned char* ptr = reinterpret_cast<const unsigned char*>(bin.data());
      cl_int bin_status = CL_SUCCESS;
      cl_program p = api.clCreateProgramWithBinary(context(), 1, &device_, &len, &ptr, &bin_status, &err);
      if (err == CL_SUCCESS && bin_status == CL_SUCCESS) {
        ClProgramHandle prog(&api, p);
        if (api.clBuildProgram(p, 1, &device_, build_options_.c_str(), nullptr, nullptr) == CL_SUCCESS) {
          program_ = std::move(prog);
          program_from_cache_ = true;
          return Status::Ok();
        }
      } else if (p != nullptr) {
        api.clReleaseProgram(p);
      }
      logger.Info("opencl: ignoring unusable cached program " + cache_file);
    }
  }

  const char* src = source.c_str();
  const size_t len = source.size();
  cl_program p = api.clCreateProgramWithSource(context(), 1, &src, &len, &err);
  SDGPU_RETURN_IF_ERROR(ClCheck(err, "clCreateProgramWithSource"));
  program_ = ClProgramHandle(&api, p);
  err = api.clBuildProgram(p, 1, &device_, build_options_.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t n = 0;
    api.clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    if (n > 0) api.clGetProgramBuildInfo(p, device_, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    if (log.size() > 2000) log.resize(2000);
    return Status::Error("opencl: kernel build failed: " + ClErrorName(err) + ": " + log);
  }
  if (!cache_file.empty()) {
    size_t bin_size = 0;
    if (api.clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof(bin_size), &bin_size, nullptr) == CL_SUCCESS &&
        bin_size > 0) {
      std::string bin(bin_size, '\0');
      unsigned char* ptr = reinterpret_cast<unsigned char*>(bin.data());
      if (api.clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof(ptr), &ptr, nullptr) == CL_SUCCESS) {
        MakeDirs(options_.cache_dir);
        const std::string tmp = cache_file + ".tmp" + std::to_string(reinterpret_cast<uintptr_t>(this));
        std::ofstream o(tmp, std::ios::binary);
        o.write(bin.data(), static_cast<std::streamsize>(bin.size()));
        o.close();
        // Atomic publish: concurrent processes never read a half-written binary.
        if (!o || std::rename(tmp.c_str(), cache_file.c_str()) != 0) {
          std::remove(tmp.c_str());
          logger.Info("opencl: could not write the program cache " + cache_file);
        }
      }
    }
  }
  return Status::Ok();
}

Status OpenClDevice::GetKernel(const std::string& name, const gpu::Kernel** out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = kernels_.find(name);
  if (it == kernels_.end()) {
    cl_int err = CL_SUCCESS;
    cl_kernel k = api_->clCreateKernel(program_.get(), name.c_str(), &err);
    SDGPU_RETURN_IF_ERROR(ClCheck(err, ("clCreateKernel(" + name + ")").c_str()));
    it = kernels_.emplace(name, std::make_unique<OpenClKernel>(ClKernelHandle(api_, k), name)).first;
  }
  *out = it->second.get();
  return Status::Ok();
}

Status OpenClDevice::CreateBuffer(size_t bytes, std::unique_ptr<gpu::Buffer>* out) const {
  cl_int err = CL_SUCCESS;
  cl_mem m = api_->clCreateBuffer(context(), CL_MEM_READ_WRITE, bytes == 0 ? 64 : bytes, nullptr, &err);
  SDGPU_RETURN_IF_ERROR(ClCheck(err, ("clCreateBuffer(" + std::to_string(bytes) + " bytes)").c_str()));
  *out = std::make_unique<OpenClBuffer>(ClMemHandle(api_, m), bytes);
  return Status::Ok();
}

Status OpenClDevice::Upload(const gpu::Buffer& buffer, size_t offset, size_t bytes, const void* src,
                            bool blocking) const {
  if (bytes == 0) return Status::Ok();
  return ClCheck(api_->clEnqueueWriteBuffer(queue(), MemOf(&buffer), blocking ? CL_TRUE : CL_FALSE, offset, bytes,
                                            src, 0, nullptr, nullptr),
                 "clEnqueueWriteBuffer");
}

Status OpenClDevice::Download(const gpu::Buffer& buffer, size_t offset, size_t bytes, void* dst) const {
  if (bytes == 0) return Status::Ok();
  return ClCheck(api_->clEnqueueReadBuffer(queue(), MemOf(&buffer), CL_TRUE, offset, bytes, dst, 0, nullptr, nullptr),
                 "clEnqueueReadBuffer");
}

Status OpenClDevice::Finish() const { return ClCheck(api_->clFinish(queue()), "clFinish"); }

std::vector<gpu::AttnTiling> OpenClDevice::vendor_attention_tilings() const {
  return nvidia_ ? nvidia::AttentionTilings() : std::vector<gpu::AttnTiling>{};
}

Status OpenClDevice::Launch(const gpu::Kernel& kernel, const gpu::Args& args, const gpu::Dim3& global,
                            const gpu::Dim3& local, gpu::Timings* timings) const {
  size_t g[3], l[3];
  cl_uint dims = 1;
  for (cl_uint i = 0; i < 3; ++i) {
    if (global[i] == 0) return Status::Ok();  // empty tensor: nothing to do
    l[i] = local[i] == 0 ? 1 : local[i];
    g[i] = (global[i] + l[i] - 1) / l[i] * l[i];
    if (global[i] != 1 || local[i] > 1) dims = i + 1;
  }
  const cl_kernel k = static_cast<const OpenClKernel&>(kernel).get();
  std::lock_guard<std::mutex> lock(mu_);
  cl_uint index = 0;
  auto set = [&](size_t size, const void* value) -> Status {
    const cl_int err = api_->clSetKernelArg(k, index, size, value);
    if (err != CL_SUCCESS) {
      return ClCheck(err, ("clSetKernelArg(" + kernel.name() + " #" + std::to_string(index) + ")").c_str());
    }
    ++index;
    return Status::Ok();
  };
  for (const gpu::Arg& a : args.items()) {
    switch (a.kind) {
      case gpu::Arg::Kind::kBuffer: {
        const cl_mem mem = MemOf(a.buffer);
        const cl_int offset = a.i;
        SDGPU_RETURN_IF_ERROR(set(sizeof(mem), &mem));
        SDGPU_RETURN_IF_ERROR(set(sizeof(offset), &offset));
        break;
      }
      case gpu::Arg::Kind::kInt: {
        const cl_int v = a.i;
        SDGPU_RETURN_IF_ERROR(set(sizeof(v), &v));
        break;
      }
      case gpu::Arg::Kind::kFloat: {
        const cl_float v = a.f;
        SDGPU_RETURN_IF_ERROR(set(sizeof(v), &v));
        break;
      }
    }
  }
  const bool timed = options_.profiling && timings != nullptr;
  cl_event ev = nullptr;
  const cl_int err =
      api_->clEnqueueNDRangeKernel(queue(), k, dims, nullptr, g, l, 0, nullptr, timed ? &ev : nullptr);
  if (err != CL_SUCCESS) {  // the message is built only on failure: this runs once per launch
    return ClCheck(err, ("clEnqueueNDRangeKernel(" + kernel.name() + ")").c_str());
  }
  if (ev != nullptr) timings->push_back(std::make_unique<OpenClTimer>(kernel.name(), api_, ClEventHandle(api_, ev)));
  return Status::Ok();
}

}  // namespace sdgpu::ocl
