#include "backends/opencl/opencl_device.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/build_id.h"
#include "gpu/op_util.h"

#include "backends/opencl/host_staging_ring.h"
#include "backends/opencl/nvidia/attention_tilings.h"

namespace sdgpu::ocl {
namespace {

// -w: the compiler's warnings would reach the application's stderr at the first inference (PoCL prints them); the
// build log is read only when a build fails.
constexpr const char* kBuildOptions = "-cl-std=CL1.2 -w";
// NVIDIA's compiler takes inline PTX: the kernels' SDGPU_NV_PTX paths (attention's shfl.sync exchange, ATR_XS).
constexpr const char* kNvidiaBuildOptions = "-cl-std=CL1.2 -w -DSDGPU_NV_PTX=1";
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

class OpenClBuffer final : public gpu::Buffer {
 public:
  OpenClBuffer(ClMemHandle mem, size_t bytes) : mem_(std::move(mem)), bytes_(bytes) {}
  size_t bytes() const override { return bytes_; }
  cl_mem mem() const { return mem_.get(); }

 private:
  ClMemHandle mem_;
  size_t bytes_;  // as requested (the allocation is at least 64 bytes)
};

// A kernel of the library; its cl_kernel exists once the program holding it is built (OpenClDevice builds lazily).
class OpenClKernel final : public gpu::Kernel {
 public:
  OpenClKernel(std::string name, int unit, bool half) : name_(std::move(name)), unit_(unit), half_(half) {}
  const std::string& name() const override { return name_; }
  cl_kernel get() const { return k_.get(); }
  int unit() const { return unit_; }
  bool half() const { return half_; }  // the activation storage of its program set
  void set(ClKernelHandle k) { k_ = std::move(k); }

 private:
  ClKernelHandle k_;
  std::string name_;
  int unit_;  // KernelLibrary unit, -1 with the whole library
  bool half_;
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

// Devices are made one at a time in the process. Two delegates made at once (sdlite generate's early device beside
// the first model's) crashed PoCL's first initialisation in a process that had loaded torch (5 of 6 tries; never
// one after the other), and one of them could find no device; the second now waits, then joins the first one's
// context (SharedPrograms), which it would have waited for anyway.
std::mutex& CreateMutex() {
  static std::mutex m;
  return m;
}

}  // namespace

Status OpenClDevice::Create(const OpenClDeviceOptions& options, const Logger& logger,
                            std::unique_ptr<OpenClDevice>* out) {
  const std::lock_guard<std::mutex> lock(CreateMutex());
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
  rt->base_options_ = nvidia ? kNvidiaBuildOptions : kBuildOptions;
  cl_uint cc_major = 0;
  if (nvidia && api.clGetDeviceInfo(rt->device_, kDeviceComputeCapabilityMajorNv, sizeof(cc_major), &cc_major,
                                    nullptr) == CL_SUCCESS &&
      cc_major >= 9) {
    rt->base_options_ += kNvidiaSm90Option;
  }
  // half storage: different programs (and cache entries) from the float-storage ones
  rt->sets_[0].build_options = rt->base_options_;
  rt->sets_[1].build_options = rt->base_options_ + " -DSD_ACT_HALF=1";
  rt->set_act_half(options.act_half);
  ProgramSet& own = rt->own_set();
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
  cl_ulong max_alloc = 0;
  SDGPU_RETURN_IF_ERROR(ClCheck(api.clGetDeviceInfo(rt->device_, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(cl_ulong),
                                                     &max_alloc, nullptr),
                                "clGetDeviceInfo(MAX_MEM_ALLOC_SIZE)"));
  rt->max_alloc_bytes_ = static_cast<size_t>(std::min<cl_ulong>(max_alloc, SIZE_MAX));
  if (options.max_alloc_bytes > 0) rt->max_alloc_bytes_ = std::min(rt->max_alloc_bytes_, options.max_alloc_bytes);
  cl_bool unified = CL_FALSE;  // (deprecated in OpenCL 2.0, still answered; unknown = a discrete device)
  if (api.clGetDeviceInfo(rt->device_, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof(unified), &unified, nullptr) ==
      CL_SUCCESS) {
    rt->unified_memory_ = unified == CL_TRUE;
  }

  // The context, the parsed library and every program already built: the process's, shared with the other
  // delegates of this device and build options (shared_programs.h). The queue is this device's own.
  SDGPU_RETURN_IF_ERROR(SharedPrograms::Acquire(rt->api_, rt->device_, own.build_options, logger, &own.shared,
                                                 &rt->context_shared_));
  const cl_command_queue_properties props = options.profiling ? CL_QUEUE_PROFILING_ENABLE : 0;
  cl_command_queue q = api.clCreateCommandQueue(rt->context(), rt->device_, props, &err);
  SDGPU_RETURN_IF_ERROR(ClCheck(err, "clCreateCommandQueue"));
  rt->queue_ = ClQueueHandle(&api, q);
  rt->logger_ = logger;
  cl_device_type type = 0;
  SDGPU_RETURN_IF_ERROR(ClCheck(api.clGetDeviceInfo(rt->device_, CL_DEVICE_TYPE, sizeof(type), &type, nullptr),
                                "clGetDeviceInfo(TYPE)"));
  rt->cpu_device_ = (type & CL_DEVICE_TYPE_CPU) != 0;
  if (!own.split()) {
    std::lock_guard<std::mutex> lock(rt->mu_);
    SDGPU_RETURN_IF_ERROR(rt->BuildWholeLibraryLocked(own));
  }
  logger.Info("opencl: device '" + rt->device_name_ + "' (" + rt->device_key_ + "), options '" + own.build_options +
              "', one buffer at most " + std::to_string(rt->max_alloc_bytes_) + " bytes, " +
              (own.split() ? std::to_string(own.library().kernel_names().size()) + " kernels in " +
                                 std::to_string(own.library().num_units()) + " units, built per model" + " (" +
                                 std::to_string(own.shared->programs()) + " built in this process)"
                           : std::string("the whole kernel library as one program")));
  *out = std::move(rt);
  return Status::Ok();
}

std::string OpenClDevice::cache_key() const { return "opencl|" + device_key_ + "|" + BuildId(); }

gpu::Device::ProgramCounts OpenClDevice::program_counts() const {
  ProgramCounts c;
  c.built = programs_built_;
  c.shared = programs_shared_;
  c.context_shared = context_shared_ ? 1 : 0;
  return c;
}

Status OpenClDevice::BuildOne(const std::string& source, const std::string& options, const std::string& what,
                              ProgramResult* out) const {
  const auto t0 = std::chrono::steady_clock::now();
  ProgramRequest r;
  r.api = api_;
  r.context = context();
  r.device = device_;
  r.cpu_device = cpu_device_;
  r.source = source;
  r.options = options;
  r.key_prefix = cache_key();
  r.store = options_.store_binaries;
  static const DiskCache kNoCache("", 0, Logger());
  SDGPU_RETURN_IF_ERROR(BuildProgram(r, options_.cache ? *options_.cache : kNoCache, logger_, out));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  logger_.Debug("opencl: " + what + (out->from_cache ? ": loaded from the cache in " : ": compiled in ") +
                std::to_string(static_cast<long long>(ms)) + " ms");
  return Status::Ok();
}

Status OpenClDevice::CreateClKernelLocked(const std::string& name, cl_program program, ClKernelHandle* out) const {
  cl_int err = CL_SUCCESS;
  cl_kernel k = api_->clCreateKernel(program, name.c_str(), &err);
  SDGPU_RETURN_IF_ERROR(ClCheck(err, ("clCreateKernel(" + name + ")").c_str()));
  *out = ClKernelHandle(api_, k);
  return Status::Ok();
}

Status OpenClDevice::CurrentSetLocked(ProgramSet** out) const {
  ProgramSet& ps = sets_[act_half() ? 1 : 0];
  if (ps.shared == nullptr) {
    SDGPU_RETURN_IF_ERROR(SharedPrograms::Acquire(api_, device_, ps.build_options, logger_, &ps.shared));
    if (!ps.split()) SDGPU_RETURN_IF_ERROR(BuildWholeLibraryLocked(ps));
  }
  *out = &ps;
  return Status::Ok();
}

Status OpenClDevice::CreateBuiltKernelsLocked() const {
  for (auto& [key, kernel] : kernels_) {
    auto& k = static_cast<OpenClKernel&>(*kernel);
    if (k.get() != nullptr) continue;
    const ProgramSet& ps = sets_[k.half() ? 1 : 0];
    cl_program program = ps.whole;
    if (program == nullptr) {
      const auto built = ps.unit_program.find(k.unit());
      if (built == ps.unit_program.end()) continue;
      program = built->second;
    }
    ClKernelHandle h;
    SDGPU_RETURN_IF_ERROR(CreateClKernelLocked(k.name(), program, &h));
    k.set(std::move(h));
  }
  return Status::Ok();
}

Status OpenClDevice::BuildWholeLibraryLocked(ProgramSet& ps) const {
  if (ps.whole != nullptr) return Status::Ok();
  const gpu::SetupTimer timer(*this, Setup::kPrograms);
  if (cl_program ready = ps.shared->FindWhole(); ready != nullptr) {
    ps.whole = ready;
    ++programs_shared_;
  } else {
    ProgramResult result;
    SDGPU_RETURN_IF_ERROR(BuildOne(KernelSource(), ps.build_options, "the whole kernel library", &result));
    ++programs_built_;
    ps.whole = ps.shared->PublishWhole(ClProgramHandle(api_, result.program));
  }
  ps.wanted_units.clear();
  return CreateBuiltKernelsLocked();  // kernels requested from the units, not built yet
}

Status OpenClDevice::BuildUnitsLocked(ProgramSet& ps, std::set<int> units) const {
  if (ps.whole != nullptr) return Status::Ok();
  units.insert(ps.wanted_units.begin(), ps.wanted_units.end());
  for (auto it = units.begin(); it != units.end();) it = ps.unit_program.count(*it) ? units.erase(it) : std::next(it);
  if (units.empty()) return Status::Ok();
  const gpu::SetupTimer timer(*this, Setup::kPrograms);
  // Units another delegate of the process already built: taken as they are (same source, options and device give
  // the same program), without compiling or reading the disk cache.
  int taken = 0;
  for (auto it = units.begin(); it != units.end();) {
    if (cl_program ready = ps.shared->FindUnit(*it); ready != nullptr) {
      ps.unit_program[*it] = ready;
      ps.wanted_units.erase(*it);
      ++taken;
      it = units.erase(it);
    } else {
      ++it;
    }
  }
  programs_shared_ += taken;
  // The rest: built here, or -- being built by another delegate right now -- waited for (SharedPrograms::Claim).
  std::vector<int> list, theirs;
  ps.shared->Claim(units, &list, &theirs);
  if (!list.empty()) {
    bool whole = false;
    SDGPU_RETURN_IF_ERROR(CompileClaimedLocked(ps, list, taken, &whole));
    if (whole) return Status::Ok();  // the library was built whole instead: it has every kernel
  } else if (theirs.empty()) {
    logger_.Info("opencl: " + std::to_string(taken) + " program(s) taken from other delegates of the process");
  }
  if (!theirs.empty()) {
    const bool own_phase = progress().snapshot().phase.empty();
    if (own_phase) progress().Begin("compiling kernels", static_cast<long long>(theirs.size()));
    progress().SetDetail("waiting for " + std::to_string(theirs.size()) + " program(s) another model is compiling");
    std::set<int> missing;  // their builder failed: built here after all
    for (int u : theirs) {
      if (cl_program ready = ps.shared->WaitUnit(u); ready != nullptr) {
        ps.unit_program[u] = ready;
        ps.wanted_units.erase(u);
        ++programs_shared_;
      } else {
        missing.insert(u);
      }
      if (own_phase) progress().Advance();  // inside another phase (the first inference) its count is launches
    }
    if (own_phase) {
      progress().End();
    } else {
      progress().SetDetail("");
    }
    logger_.Info("opencl: " + std::to_string(theirs.size() - missing.size()) +
                 " program(s) taken from another delegate of the process once it had built them");
    if (!missing.empty()) return BuildUnitsLocked(ps, std::move(missing));
  }
  return CreateBuiltKernelsLocked();
}

Status OpenClDevice::CompileClaimedLocked(ProgramSet& ps, const std::vector<int>& list, int taken,
                                          bool* whole) const {
  // Every claim ends here: published once verified, else abandoned (the waiters then build the unit themselves).
  std::vector<ClProgramHandle> built(list.size());  // released on every path that does not publish them
  bool published = false;
  struct AbandonUnpublished {
    const std::vector<int>& list;
    SharedPrograms& shared;
    const bool& published;
    ~AbandonUnpublished() {
      if (!published) {
        for (int u : list) shared.Abandon(u);
      }
    }
  } abandon{list, *ps.shared, published};
  const KernelLibrary& library = ps.library();
  size_t kernels = 0;
  for (int u : list) kernels += library.KernelsOf(u).size();
  const std::string what = std::to_string(kernels) + " kernel(s) in " + std::to_string(list.size()) + " program(s)";
  // Inside a set-up phase (the first inference: a tuning candidate) the build is its detail; alone, a phase.
  const bool own_phase = progress().snapshot().phase.empty();
  if (own_phase) progress().Begin("compiling kernels", static_cast<long long>(list.size()));
  progress().SetDetail(own_phase ? what : "compiling " + what);
  // One program per unit: a unit's program source does not depend on which other kernels a model uses, so the
  // cache entry (and the runtime's own cache, PoCL's kcache) serves every model that uses the unit. Independent
  // builds run on the host's cores. Only this device's mutex is held meanwhile, not the shared state's: another
  // delegate may build (or take) other units at the same time.
  std::vector<ProgramResult> results(list.size());
  std::vector<Status> status(list.size());
  gpu::HostParallelRanges(static_cast<int64_t>(list.size()), 1, list.size() > 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int u = list[static_cast<size_t>(i)];
      status[static_cast<size_t>(i)] = BuildOne(library.ComposeUnit(u), ps.build_options,
                                                "kernel unit " + library.KernelsOf(u).front(),
                                                &results[static_cast<size_t>(i)]);
      if (own_phase) progress().Advance();  // inside another phase (the first inference) its count is launches
    }
  });
  int from_cache = 0;
  Status s;
  for (size_t i = 0; i < list.size(); ++i) {
    if (results[i].program != nullptr) {
      built[i] = ClProgramHandle(api_, results[i].program);
      ++programs_built_;
      from_cache += results[i].from_cache ? 1 : 0;
    }
    if (s.ok() && !status[i].ok()) s = status[i];
  }
  for (size_t i = 0; i < list.size() && s.ok(); ++i) {
    std::string names;
    s = ProgramKernelNames(*api_, built[i].get(), &names);
    const std::string present = ";" + names + ";";
    for (const std::string& k : library.KernelsOf(list[i])) {
      if (s.ok() && present.find(";" + k + ";") == std::string::npos) s = Status::Error("a program lacks kernel " + k);
    }
  }
  if (own_phase) {
    progress().End();
  } else {
    progress().SetDetail("");
  }
  if (!s.ok()) {  // the split missed a dependency between units: the whole library, as before the split
    std::string why = s.message();
    if (const size_t nl = why.find('\n'); nl != std::string::npos) why.resize(nl);
    logger_.Warning("opencl: building only the model's kernels failed (" + why.substr(0, 300) +
                    "); building the whole library");
    *whole = true;
    return BuildWholeLibraryLocked(ps);  // (the claims are abandoned on return)
  }
  // Published only once verified, so no delegate takes a program the split got wrong.
  for (size_t i = 0; i < list.size(); ++i) {
    ps.unit_program[list[i]] = ps.shared->PublishUnit(list[i], std::move(built[i]));
    ps.wanted_units.erase(list[i]);
  }
  published = true;
  logger_.Info("opencl: " + what + (results.size() == 1 ? "" : ", " + std::to_string(list.size()) + " built in parallel") +
               "; from the cache: " + std::to_string(from_cache) +
               (taken > 0 ? "; " + std::to_string(taken) + " more taken from other delegates of the process" : ""));
  return Status::Ok();
}

bool OpenClDevice::KernelBuildPending(const gpu::Kernel& kernel) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& k = static_cast<const OpenClKernel&>(kernel);
  if (k.get() != nullptr) return false;
  // a unit another delegate of the process built costs no compile: the tuner may launch it
  const ProgramSet& ps = sets_[k.half() ? 1 : 0];
  return k.unit() < 0 ? !ps.shared->HasWhole() : !ps.shared->HasUnit(k.unit());
}

bool OpenClDevice::ProgramsPersist() const {
  return options_.cache && options_.cache->enabled() &&
         (options_.store_binaries == StoreBinaries::kAlways ||
          (options_.store_binaries == StoreBinaries::kAuto && !cpu_device_));
}

Status OpenClDevice::PrepareKernels() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (ProgramSet& ps : sets_) {
    if (ps.shared == nullptr || !ps.split() || ps.whole != nullptr || ps.wanted_units.empty()) continue;
    SDGPU_RETURN_IF_ERROR(BuildUnitsLocked(ps, {}));
  }
  return Status::Ok();
}

Status OpenClDevice::GetKernel(const std::string& name, const gpu::Kernel** out) const {
  std::lock_guard<std::mutex> lock(mu_);
  const bool half = act_half();
  auto it = kernels_.find({half, name});
  if (it == kernels_.end()) {
    ProgramSet* ps = nullptr;
    SDGPU_RETURN_IF_ERROR(CurrentSetLocked(&ps));
    if (ps->whole != nullptr) {
      ClKernelHandle h;
      SDGPU_RETURN_IF_ERROR(CreateClKernelLocked(name, ps->whole, &h));
      auto k = std::make_unique<OpenClKernel>(name, -1, half);
      k->set(std::move(h));
      it = kernels_.emplace(std::make_pair(half, name), std::move(k)).first;
    } else {
      const int unit = ps->library().UnitOf(name);
      if (unit < 0) {
        return Status::Error("opencl: no kernel '" + name + "' in the kernel library (build options '" +
                             ps->build_options + "')");
      }
      auto k = std::make_unique<OpenClKernel>(name, unit, half);
      if (auto built = ps->unit_program.find(unit); built != ps->unit_program.end()) {
        ClKernelHandle h;
        SDGPU_RETURN_IF_ERROR(CreateClKernelLocked(name, built->second, &h));
        k->set(std::move(h));
      } else if (!speculative_requests()) {
        ps->wanted_units.insert(unit);
      }
      it = kernels_.emplace(std::make_pair(half, name), std::move(k)).first;
    }
  }
  *out = it->second.get();
  return Status::Ok();
}

bool OpenClDevice::HasKernel(const std::string& name) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kernels_.count({act_half(), name})) return true;
    ProgramSet* ps = nullptr;
    if (!CurrentSetLocked(&ps).ok()) return false;
    if (ps->split() && ps->whole == nullptr) return ps->library().Has(name);
  }
  return Device::HasKernel(name);  // the whole library: asks the program (creates the kernel)
}

Status OpenClDevice::CreateBuffer(size_t bytes, std::unique_ptr<gpu::Buffer>* out) const {
  if (bytes > max_alloc_bytes_) {  // what the driver would refuse as CL_INVALID_BUFFER_SIZE, said plainly
    return Status::Error("opencl: a " + std::to_string(bytes) + "-byte buffer is above this device's " +
                         std::to_string(max_alloc_bytes_) +
                         "-byte limit for one buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE)");
  }
  cl_int err = CL_SUCCESS;
  cl_mem m = api_->clCreateBuffer(context(), CL_MEM_READ_WRITE, bytes == 0 ? 64 : bytes, nullptr, &err);
  SDGPU_RETURN_IF_ERROR(ClCheck(err, ("clCreateBuffer(" + std::to_string(bytes) + " bytes)").c_str()));
  *out = std::make_unique<OpenClBuffer>(ClMemHandle(api_, m), bytes);
  return Status::Ok();
}

namespace {
class OpenClUploadRing final : public gpu::Device::UploadRing {
 public:
  explicit OpenClUploadRing(std::unique_ptr<HostStagingRing> ring) : ring_(std::move(ring)) {}
  Status Upload(const gpu::Buffer& buffer, size_t offset, size_t bytes, const void* src) override {
    return bytes == 0 ? Status::Ok() : ring_->Write(MemOf(&buffer), offset, bytes, src);
  }

 private:
  std::unique_ptr<HostStagingRing> ring_;
};
}  // namespace

std::unique_ptr<gpu::Device::UploadRing> OpenClDevice::CreateUploadRing() const {
  using Uploads = OpenClDeviceOptions::Uploads;
  if (options_.uploads == Uploads::kDirect || (options_.uploads == Uploads::kAuto && unified_memory_)) return nullptr;
  std::unique_ptr<HostStagingRing> ring;
  if (Status s = HostStagingRing::Create(api_, context(), queue(), &ring); !s.ok()) {
    logger_.Info("opencl: weights go up directly (" + s.message() + ")");
    return nullptr;
  }
  return std::make_unique<OpenClUploadRing>(std::move(ring));
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
Status OpenClDevice::Flush() const { return ClCheck(api_->clFlush(queue()), "clFlush"); }

namespace {
class ClFence final : public gpu::Fence {
 public:
  ClFence(const ClApi* api, cl_event event) : api_(api), event_(event) {}
  ~ClFence() override { api_->clReleaseEvent(event_); }
  ClFence(const ClFence&) = delete;
  ClFence& operator=(const ClFence&) = delete;
  Status Wait() const override { return ClCheck(api_->clWaitForEvents(1, &event_), "clWaitForEvents"); }

 private:
  const ClApi* api_;
  cl_event event_;
};
}  // namespace

Status OpenClDevice::Mark(std::unique_ptr<gpu::Fence>* out) const {
  cl_event event = nullptr;
  SDGPU_RETURN_IF_ERROR(
      ClCheck(api_->clEnqueueMarkerWithWaitList(queue(), 0, nullptr, &event), "clEnqueueMarkerWithWaitList"));
  SDGPU_RETURN_IF_ERROR(ClCheck(api_->clFlush(queue()), "clFlush"));  // the marker must reach the device to complete
  *out = std::make_unique<ClFence>(api_, event);
  return Status::Ok();
}

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
  std::lock_guard<std::mutex> lock(mu_);
  const auto& lazy = static_cast<const OpenClKernel&>(kernel);
  if (lazy.get() == nullptr) {  // its program is not built yet: build it now (with every other wanted unit)
    ProgramSet& ps = sets_[lazy.half() ? 1 : 0];
    SDGPU_RETURN_IF_ERROR(lazy.unit() >= 0 ? BuildUnitsLocked(ps, {lazy.unit()}) : BuildWholeLibraryLocked(ps));
    if (lazy.get() == nullptr) return Status::Error("opencl: kernel " + kernel.name() + " was not built");
  }
  const cl_kernel k = lazy.get();
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
