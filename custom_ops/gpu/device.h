// The device interface every GPU backend implements (OpenCL today, GL ES 3.1
// next). Everything above it -- op validation, argument marshalling, the
// partition kernel, arena planning, profiling JSON -- lives in gpu/ and is
// written only against this header; a backend contributes a Device plus
// kernel sources with the SAME kernel names and parameter lists.
//
// Kernel parameter convention (all backends, all kernels):
//   * parameters are positional, in the order the op appends them to gpu::Args;
//   * every buffer parameter is immediately followed by an `int` element
//     offset into that buffer (`__global float* y, int yo, ...`): tensors live
//     at offsets inside shared arena buffers, and neither OpenCL 1.2 sub-buffers
//     nor GL SSBO range bindings allow arbitrary (unaligned) offsets; the offset
//     is in elements of the type the kernel reads (float/uint: 4 bytes, half: 2);
//   * scalars are int32 or float; there are no local-memory (`__local`)
//     parameters: shared arrays have compile-time sizes in the kernel source,
//     and the host launches with the matching local size (see the op's comment).
// Backend mapping: OpenCL sets clSetKernelArg in that order (a buffer entry
// takes two slots: the cl_mem, then the offset). GL binds the k-th buffer
// entry to SSBO binding k and the scalars -- offsets included, in order -- to
// the shader's uniforms by position.
//
// Work sizes: `global` counts work-items per dimension and is rounded UP to a
// multiple of `local` by the device (kernels bounds-check), a zero extent
// launches nothing; unused dimensions are 1.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/build_id.h"
#include "common/disk_cache.h"
#include "common/status.h"
#include "delegate/options.h"
#include "gpu/setup_progress.h"
#include "gpu/attention_tiling.h"

namespace sdgpu::gpu {

// A device allocation (RAII: destroying it frees the device memory).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual size_t bytes() const = 0;
};

// A compiled kernel; owned and cached by its Device, valid for the Device's lifetime.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const std::string& name() const = 0;
};

// A tensor as a kernel sees it: a device buffer plus a byte offset into it. elem_bytes is the size of one stored
// element: 4, or 2 for a float tensor of a partition with half activation storage (Device::act_half; the kernels'
// ACT_* macros), so elem_offset() is in the units the kernel indexes.
struct TensorRef {
  const Buffer* buffer = nullptr;
  size_t offset = 0;  // bytes
  size_t elem_bytes = 4;
  int elem_offset() const { return static_cast<int>(offset / elem_bytes); }
  int elem_offset(size_t elem_size) const { return static_cast<int>(offset / elem_size); }
  // The offset in float4s of a kernel parameter declared float4* (ACT_LDV4 / ACT_STV4).
  int vec4_offset() const { return static_cast<int>(offset / (4 * elem_bytes)); }
};

// One kernel argument: a buffer + element offset (two kernel parameters), an int32 or a float.
struct Arg {
  enum class Kind { kBuffer, kInt, kFloat };
  Kind kind = Kind::kInt;
  const Buffer* buffer = nullptr;  // kBuffer
  int32_t i = 0;                   // kInt value, or the element offset of a kBuffer
  float f = 0.0f;                  // kFloat
  // kBuffer: the bytes per element of `i` (a tensor's TensorRef::elem_bytes, x4 for a float4 parameter); 0: the
  // parameter's declared storage. A GL device binding the buffer in ranges needs it where one parameter is read both
  // as float and as half (gemm_tiled.kern's A, B and C by their b_half bits, attention's O with its stats view):
  // its declarations then name two element sizes (gl_device.cc BindingElementBytes).
  int elem_bytes = 0;
};

// Ordered kernel arguments, built fluently: Args().Buf(y, yo).Buf(x, xo).Int(n).Float(eps).
class Args {
 public:
  Args& Buf(const Buffer* buffer, int elem_offset, size_t elem_bytes = 0) {
    Arg a;
    a.kind = Arg::Kind::kBuffer;
    a.buffer = buffer;
    a.i = elem_offset;
    a.elem_bytes = static_cast<int>(elem_bytes);
    items_.push_back(a);
    return *this;
  }
  // A tensor at its element offset, with its element size (the common case of the overload above).
  Args& Buf(const TensorRef& t) { return Buf(t.buffer, t.elem_offset(), t.elem_bytes); }
  Args& Int(int32_t v) {
    Arg a;
    a.kind = Arg::Kind::kInt;
    a.i = v;
    items_.push_back(a);
    return *this;
  }
  Args& Float(float v) {
    Arg a;
    a.kind = Arg::Kind::kFloat;
    a.f = v;
    items_.push_back(a);
    return *this;
  }
  const std::vector<Arg>& items() const { return items_; }

 private:
  std::vector<Arg> items_;
};

using Dim3 = std::array<size_t, 3>;

// The device time of one launch; only valid after Device::Finish() returned.
// OpenCL: event start/end; GL: timer queries (or finish + host clock).
class Timer {
 public:
  explicit Timer(std::string kernel) : kernel_(std::move(kernel)) {}
  virtual ~Timer() = default;
  virtual Status ElapsedMs(double* ms) const = 0;
  // The launched kernel's name (the profile's per-kernel breakdown of multi-launch nodes).
  const std::string& kernel() const { return kernel_; }

 private:
  std::string kernel_;
};

// A point in a device's command stream (Device::Mark): Wait returns once everything enqueued before it completed.
class Fence {
 public:
  virtual ~Fence() = default;
  virtual Status Wait() const = 0;
};

// Launches timed for one node; Launch appends one Timer per launch while profiling.
using Timings = std::vector<std::unique_ptr<Timer>>;

class Device {
 public:
  virtual ~Device() = default;

  // Backend name as the delegate option spells it ("opencl", "gl"); prefixes log lines and errors.
  virtual const char* backend_name() const = 0;
  // Human-readable device name (profile JSON, logs).
  virtual const std::string& name() const = 0;
  virtual size_t max_work_group_size() const = 0;
  // Bytes of local (GL: shared) memory one work-group may use: OpenCL CL_DEVICE_LOCAL_MEM_SIZE, GL
  // GL_MAX_COMPUTE_SHARED_MEMORY_SIZE (ES 3.1 guarantees only 16 KiB; phones have 32 KiB). Planners skip kernels
  // whose local arrays do not fit.
  virtual size_t local_memory_bytes() const { return 16384; }
  // Compute units (OpenCL CL_DEVICE_MAX_COMPUTE_UNITS, SMs on NVIDIA); 0 when the backend does not know.
  virtual int compute_units() const { return 0; }
  // True when launches record Timers (delegate option profile_path set).
  virtual bool profiling() const = 0;
  // How the Timers measure; the profile JSON records it as "method". OpenCL: "events" (event
  // start/end timestamps); GL: "gl_timer_query" or "gl_finish_host_clock".
  virtual const char* timing_method() const { return "events"; }
  // SdAttention tilings whose kernels exist only on this backend / vendor (NVIDIA's OpenCL: the tensor-core and
  // warp-shuffle kernels of backends/opencl/nvidia/), each tried right before the backend-neutral tiling its
  // AttnTiling::before names (gpu/attention_tiling.cc kAttnTilings). Empty by default.
  virtual std::vector<AttnTiling> vendor_attention_tilings() const { return {}; }
  // Activation storage (delegate option activations_fp16): the partition's float tensors are stored as half and
  // the kernels are built with SD_ACT_HALF=1 (gpu/dialect/README.md). Fixed when the device is created, except
  // inside a StorageScope on this thread.
  bool act_half() const { return scope_device_ == this ? scope_half_ : act_half_; }
  size_t act_bytes() const { return act_half() ? 2 : 4; }
  // The device's own storage, whatever scope is open (the delegate option).
  bool default_act_half() const { return act_half_; }
  // While one lives, this thread's act_half() on `dev` says `half`, and GetKernel / HasKernel resolve names in the
  // programs built for that storage: a partition keeping some steps in float32 storage under activations_fp16
  // (gpu/partition.h, "Float storage islands") builds and enqueues those steps' ops inside one. Ops read the storage
  // where they read it today (act_half(), their kernels), so no op takes a storage parameter. Scopes nest.
  class StorageScope {
   public:
    StorageScope(const Device& dev, bool half)
        : prev_device_(scope_device_), prev_half_(scope_half_) {
      scope_device_ = &dev;
      scope_half_ = half;
    }
    ~StorageScope() {
      scope_device_ = prev_device_;
      scope_half_ = prev_half_;
    }
    StorageScope(const StorageScope&) = delete;
    StorageScope& operator=(const StorageScope&) = delete;

   private:
    const Device* prev_device_;
    bool prev_half_;
  };

  virtual Status CreateBuffer(size_t bytes, std::unique_ptr<Buffer>* out) const = 0;
  // A partition's arena: many tensors of 4-byte elements at element offsets. It may be larger than one kernel
  // argument can address (GL: GL_MAX_SHADER_STORAGE_BLOCK_SIZE, 16 MiB at the GL ES 3.1 minimum); each tensor in it
  // stays within max_tensor_bytes().
  virtual Status CreateArena(size_t bytes, std::unique_ptr<Buffer>* out) const { return CreateBuffer(bytes, out); }
  // The largest operand a kernel argument can address when it starts at a MemoryPlanner offset (64-byte aligned),
  // as every tensor of the arena and every buffer does (GL: the storage block size, less the binding alignment
  // where that does not divide 64: SD's VAE at 512 x 512 has tensors of exactly 128 and 256 MiB).
  virtual size_t max_tensor_bytes() const { return SIZE_MAX; }
  // The most bytes one device buffer may hold (OpenCL: CL_DEVICE_MAX_MEM_ALLOC_SIZE); a partition's arena above it
  // is planned in several buffers (MemoryPlanner banks). GL binds one large arena in ranges instead: no limit.
  virtual size_t max_buffer_bytes() const { return SIZE_MAX; }
  // The same for an operand that may start anywhere (a region inside an op's scratch): GL ES caps the binding
  // alignment at 256 bytes.
  size_t max_operand_bytes_anywhere() const {
    const size_t t = max_tensor_bytes();
    return t == SIZE_MAX ? t : t > 256 ? t - 256 : 0;
  }
  // Whether `elems` float32 elements anywhere in an op's scratch (split-K or key-split partials) make one kernel
  // operand: int32 offsets, and within max_operand_bytes_anywhere().
  bool ScratchOperandFits(int64_t elems) const {
    return elems <= INT_MAX && static_cast<uint64_t>(elems) * sizeof(float) <= max_operand_bytes_anywhere();
  }
  // blocking = false: the copy may still be in flight on return; `src` must stay valid until
  // the next blocking call (Download / Finish). Commands execute in submission order.
  virtual Status Upload(const Buffer& buffer, size_t offset, size_t bytes, const void* src, bool blocking) const = 0;
  // Blocking: waits for every earlier command, then copies into `dst`.
  virtual Status Download(const Buffer& buffer, size_t offset, size_t bytes, void* dst) const = 0;
  // Uploads of the first invoke's weight set-up (gpu::DeviceStaging), where a backend has a faster path than Upload
  // for many large writes in a row: Upload's contract with blocking = false, except that `src` may be reused as soon
  // as it returns. Destroying it waits for its writes.
  class UploadRing {
   public:
    virtual ~UploadRing() = default;
    virtual Status Upload(const Buffer& buffer, size_t offset, size_t bytes, const void* src) = 0;
  };
  // Such a path for this device, or null (Upload is the path; also where making one failed).
  virtual std::unique_ptr<UploadRing> CreateUploadRing() const { return nullptr; }

  // The kernel called `name`, compiled once per device (cached; repeated calls are cheap). A backend that compiles
  // lazily (OpenClDevice) returns a handle to a kernel it builds before its first launch: the request itself is
  // what tells it which kernels a model uses, so code that only asks whether a kernel exists calls HasKernel.
  virtual Status GetKernel(const std::string& name, const Kernel** out) const = 0;
  // Whether GetKernel(name) would succeed, without requesting the kernel.
  virtual bool HasKernel(const std::string& name) const {
    const Kernel* k = nullptr;
    return GetKernel(name, &k).ok();
  }
  // Builds every kernel requested so far outside a SpeculativeKernels scope that is not built yet (OpenClDevice:
  // one program for all of them, compiled or read from the cache); other backends compile per kernel at the first
  // launch and do nothing here. GpuPartition calls it before its first invoke.
  virtual Status PrepareKernels() const { return Status::Ok(); }
  // Whether launching `kernel` would compile it first (OpenClDevice: its unit is not built yet), and whether a
  // compiled program outlives this process (its binary is stored in the persistent cache). The tile tuner launches
  // a candidate that needs compiling only where that compile is paid once per device, not once per process.
  virtual bool KernelBuildPending(const Kernel& kernel) const {
    (void)kernel;
    return false;
  }
  virtual bool ProgramsPersist() const { return true; }
  // Programs this device built (compiled, or read from the persistent cache) and programs it took ready-made from
  // another device of the process (OpenClDevice: delegates of one process share their programs); -1 where a backend
  // does not count them. The delegate stats report both (programs_built, programs_shared), and context_shared: 1
  // where the device joined a context another device of the process had made, 0 where it made its own.
  struct ProgramCounts {
    long long built = -1;
    long long shared = -1;
    long long context_shared = -1;
  };
  virtual ProgramCounts program_counts() const { return {}; }
  // Host writes (Upload) that first waited for launches still reading their buffer (GL: glBufferSubData is not
  // ordered after earlier shader reads); -1 where the backend's queue orders them itself (OpenCL's in-order queue).
  virtual long long upload_waits() const { return -1; }
  // Those of them that waited for every launch issued (GL: glFinish), not for a fence after the launch reading the
  // buffer; -1 where upload_waits is.
  virtual long long upload_drains() const { return -1; }
  // Staging buffers the weight set-up takes turns with (DeviceStaging): 1 where the queue orders a host write after
  // the launches reading its buffer (OpenCL); 2 where such a write has to wait for them (GL), so that the upload of
  // the next weight goes into the buffer the launch before last read, not the one the last launch is still reading
  // (for one more buffer of the largest such weight's bytes while the set-up runs).
  virtual int staging_buffers() const { return 1; }
  // While one lives, GetKernel requests are tuning candidates (TileTuner): a lazy backend builds each only when it is
  // first launched, so candidates the tuning budget never reaches cost nothing.
  class SpeculativeKernels {
   public:
    explicit SpeculativeKernels(const Device& dev) : dev_(dev) { ++dev_.speculative_; }
    ~SpeculativeKernels() { --dev_.speculative_; }
    SpeculativeKernels(const SpeculativeKernels&) = delete;
    SpeculativeKernels& operator=(const SpeculativeKernels&) = delete;

   private:
    const Device& dev_;
  };
  bool speculative_requests() const { return speculative_ > 0; }
  // Enqueues one launch (see the header comment for args and work sizes). When profiling()
  // and `timings` is non-null, appends this launch's Timer to it.
  virtual Status Launch(const Kernel& kernel, const Args& args, const Dim3& global, const Dim3& local,
                        Timings* timings) const = 0;
  // Waits until every enqueued command has completed.
  virtual Status Finish() const = 0;
  // A fence after everything enqueued so far, so a caller can wait for that work later while more is enqueued (the
  // first invoke's weight pages: released one batch behind, the device never drained). Default: Wait is Finish.
  virtual Status Mark(std::unique_ptr<Fence>* out) const;
  // Hands what was enqueued so far to the GPU without waiting (clFlush / glFlush): drivers may hold commands back
  // until a flush or a blocking call, and the GPU would idle while the host enqueues the rest of an invoke.
  virtual Status Flush() const { return Status::Ok(); }

  // Bytes of constant model data this device holds: weights and biases as uploaded by the partitions, their
  // packed / re-laid-out / dequantized copies (gpu::UploadWeights: e.g. Winograd's U, a^2/9 x the filter), not
  // kernel metadata. Counted when uploaded, never decremented (a delegate serves one interpreter); the delegate
  // reports it as stats device_weight_bytes, so benchmarks report what the GPU holds, not the model's bytes.
  void NoteWeightBytes(size_t bytes) const { weight_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  size_t weight_bytes() const { return weight_bytes_.load(std::memory_order_relaxed); }
  // Bytes of model constants the partitions hold on the HOST now: the float32 values of folded constant
  // DEQUANTIZEs (GpuPartition::FoldConstantDequantizes), held until the first invoke has produced every op's device
  // weights from them, then released (stats host_weight_bytes).
  void NoteHostWeightBytes(long long delta) const {
    const long long now = host_weight_bytes_.fetch_add(delta, std::memory_order_relaxed) + delta;
    long long most = max_host_weight_bytes_.load(std::memory_order_relaxed);
    while (now > most && !max_host_weight_bytes_.compare_exchange_weak(most, now, std::memory_order_relaxed)) {
    }
  }
  long long host_weight_bytes() const { return host_weight_bytes_.load(std::memory_order_relaxed); }
  // The most they were at once (stats max_host_weight_bytes).
  long long max_host_weight_bytes() const { return max_host_weight_bytes_.load(std::memory_order_relaxed); }
  // Bytes of the model's weight pages the partitions gave back to the system (delegate option
  // release_weight_pages; stats host_pages_released_bytes). Never decremented.
  void NoteHostPagesReleased(size_t bytes) const { host_pages_released_.fetch_add(bytes, std::memory_order_relaxed); }
  size_t host_pages_released() const { return host_pages_released_.load(std::memory_order_relaxed); }
  // Bytes uploaded through an UploadRing (stats upload_ring_bytes).
  void NoteRingUploadBytes(size_t bytes) const { ring_upload_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  size_t ring_upload_bytes() const { return ring_upload_bytes_.load(std::memory_order_relaxed); }

  // Host time of the lazy set-up before and during the first invoke (stats setup_*_us, Backend::Counters):
  // producing packed / transformed constant weights on the host (PackedWeights), uploading weights (UploadWeights,
  // the partitions' constant uploads, the device-side producers' uploads and launches), timing GEMM tile candidates
  // (TileTuner::Tune, its launches, waits and kernel compiles included) and building programs (compiled or read
  // from the cache; OpenCL's kernel units, GL's per-kernel programs). Never decremented.
  enum class Setup { kWeightsHost = 0, kWeightsUpload = 1, kTuning = 2, kPrograms = 3 };
  void NoteSetupNs(Setup kind, long long ns) const {
    setup_ns_[static_cast<int>(kind)].fetch_add(ns, std::memory_order_relaxed);
  }
  long long setup_ns(Setup kind) const { return setup_ns_[static_cast<int>(kind)].load(std::memory_order_relaxed); }

  // Zeroed host memory for n floats, reused by every op's weight production (PackedWeights::Ensure): the first
  // inference then page-faults the largest packed weight once instead of all of them (SD1.5's fused + Winograd UNet
  // produces ~5 GB, and fresh pages cost ~5x a refill on the CI host). Valid until the next call or ReleaseStaging; ops produce
  // their weights one at a time on the invoking thread. GpuPartition releases it after its first invoke.
  float* StagingFloats(size_t n) const {
    if (staging_.size() < n) {
      staging_.clear();
      staging_.shrink_to_fit();
      staging_.resize(n);  // value-initialised: zero
    } else {
      std::fill(staging_.begin(), staging_.begin() + static_cast<std::ptrdiff_t>(n), 0.0f);
    }
    return staging_.data();
  }
  void ReleaseStaging() const { std::vector<float>().swap(staging_); }

  // Planner overrides from the delegate options gemm_tiles / attention_tiling (benchmarks and tests; delegate/
  // options.h documents them): empty = the planners decide. Set once by GpuBackend before any op is built.
  struct Overrides {
    std::optional<GemmTiles> gemm_tiles;  // parsed once (ParseDelegateOptions has checked the syntax)
    std::string attention_tiling;
    LnFold ln_fold = LnFold::kTwin;  // layer_norm_fold
    bool tensor_cores_3xtf32 = false;  // tensor_cores=3xtf32: the tensor-core attention tiling and GEMM / conv
                                       // configs (gemm_tc.cl) are candidates
    bool tensor_cores_fp64 = false;    // tensor_cores=fp64, or auto (the default) on a device that built the FP64
                                       // kernels (sm_90): their FP64 forms instead
  };
  void set_overrides(Overrides o) { overrides_ = std::move(o); }
  const Overrides& overrides() const { return overrides_; }

  // What every persistent cache key of this device starts with: the backend, the device and its driver (OpenCL:
  // platform, device name, driver version; GL: vendor, renderer, version string) and the delegate build (BuildId).
  virtual std::string cache_key() const { return std::string(backend_name()) + "|" + name() + "|" + BuildId(); }
  // The persistent cache (common/disk_cache.h; a disabled one until the backend sets it).
  const DiskCache& cache() const { return *cache_; }
  void set_cache(std::shared_ptr<const DiskCache> cache) { cache_ = std::move(cache); }
  // Set-up progress (log lines, stats); set by the backend.
  SetupProgress& progress() const { return *progress_; }
  void set_progress(std::unique_ptr<SetupProgress> p) { progress_ = std::move(p); }
  // Host time the tile tuner may still spend (delegate option tuning_budget_ms minus the tuning time so far).
  void set_tuning_budget_ms(long long ms) { tuning_budget_ns_ = ms * 1000000; }
  long long tuning_budget_ms() const { return tuning_budget_ns_ / 1000000; }
  long long tuning_budget_left_ns() const { return tuning_budget_ns_ - setup_ns(Setup::kTuning); }

  // What became of each GEMM problem the tile tuner was asked to time (stats tiles_tuned / tiles_from_cache /
  // tiles_untuned): timed now, its winner read from the persistent cache, or left to the cost model's plan because
  // the tuning budget ran out or a candidate would have to be compiled for this process only (ProgramsPersist) --
  // now or at an earlier start with the same or a larger budget (the plan kept in the cache as its choice).
  enum class Tuning { kTuned = 0, kFromCache = 1, kUntuned = 2 };
  void NoteTuning(Tuning what) const { tuning_[static_cast<int>(what)].fetch_add(1, std::memory_order_relaxed); }
  long long tuning(Tuning what) const { return tuning_[static_cast<int>(what)].load(std::memory_order_relaxed); }

  // Weights prepared for the device (gpu/weight_prep.h), by where their data was produced (stats).
  void NoteWeightsPrepared(bool on_device) const {
    (on_device ? weights_on_device_ : weights_on_host_).fetch_add(1, std::memory_order_relaxed);
  }
  long long weights_on_device() const { return weights_on_device_.load(std::memory_order_relaxed); }
  long long weights_on_host() const { return weights_on_host_.load(std::memory_order_relaxed); }

 protected:
  // Set by the backend's device factory from the delegate options, before any kernel is built.
  void set_act_half(bool on) { act_half_ = on; }

 private:
  bool act_half_ = false;
  inline static thread_local const Device* scope_device_ = nullptr;  // StorageScope
  inline static thread_local bool scope_half_ = false;
  mutable std::atomic<size_t> weight_bytes_{0};
  mutable std::atomic<long long> host_weight_bytes_{0};
  mutable std::atomic<long long> max_host_weight_bytes_{0};
  mutable std::atomic<size_t> host_pages_released_{0};
  mutable std::atomic<size_t> ring_upload_bytes_{0};
  mutable std::array<std::atomic<long long>, 4> setup_ns_{};
  mutable std::vector<float> staging_;
  Overrides overrides_;
  mutable int speculative_ = 0;
  std::shared_ptr<const DiskCache> cache_ = std::make_shared<DiskCache>("", 0, Logger());
  std::unique_ptr<SetupProgress> progress_ = std::make_unique<SetupProgress>("", Logger(LogLevel::kSilent), false);
  long long tuning_budget_ns_ = 1000LL * 1000000;
  mutable std::atomic<long long> weights_on_device_{0}, weights_on_host_{0};
  mutable std::array<std::atomic<long long>, 3> tuning_{};
};

// Device::Mark's default: waiting for it drains the device.
class FinishFence final : public Fence {
 public:
  explicit FinishFence(const Device& dev) : dev_(dev) {}
  Status Wait() const override { return dev_.Finish(); }

 private:
  const Device& dev_;
};

inline Status Device::Mark(std::unique_ptr<Fence>* out) const {
  *out = std::make_unique<FinishFence>(*this);
  return Status::Ok();
}

}  // namespace sdgpu::gpu
