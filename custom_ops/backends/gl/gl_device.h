// gpu::Device on OpenGL ES 3.1 compute shaders through headless EGL.
// Everything above the device (ops, partition, planning) lives in gpu/.
//
// The EGL display and context: gl_context.h.
//
// Buffers are SSBOs (glBufferData); Upload = glBufferSubData (copies before it
// returns, so "non-blocking" uploads are trivially safe), Download =
// glMapBufferRange(READ) (waits for the writes). Kernels are compute programs
// compiled lazily per (name, local size) on first launch and cached; a Launch
// binds the k-th buffer argument to SSBO binding k, sets the scalars to the
// uniforms at locations 0, 1, ... (checked against the program's active
// uniforms: a parameter-order mismatch between an op and its shader is an
// error, not garbage), dispatches ceil(global / local) work-groups (split into
// several dispatches with a group-base uniform where a dimension exceeds
// GL_MAX_COMPUTE_WORK_GROUP_COUNT) and issues glMemoryBarrier so the next
// dispatch, upload or map sees the writes. The barrier takes ALL bits, not
// just SHADER_STORAGE | BUFFER_UPDATE: a compute-only context pays little for
// the others, and a driver may serve `readonly` SSBO reads through caches
// (constant / texture) that only other bits are documented to invalidate.
//
// Debugging knobs (delegate options, per device; for localising a driver-specific parity failure, not for
// production; GlDeviceOptions):
//   gl_finish_each=1      glFinish after every launch (no overlap at all)
//   gl_barrier=minimal    SHADER_STORAGE | BUFFER_UPDATE bits only
//   gl_plain_buffers=1    compile without readonly / writeonly qualifiers
//   gl_nv_pragmas=0       compile without the `#pragma optionNV(...)` lines of the sources
//   gl_kernel_alias=a=b,c=d  GetKernel("a") returns kernel b (A/B a variant under an op's kernel name)
//   gl_dump_dir=dir       write each compiled program's source (<kernel>_<local>.comp) and driver
//                         binary (.bin: NVIDIA's holds its assembly as text) into dir
//   gl_limits=shared_bytes=N,...  report a smaller device's limits (capped, never raised) and N compute units
//                         (delegate/options.h): the planners' choices for such a device, on this one
//
// Threads: a GL context is current on at most one thread. Every entry point
// takes the context's mutex and makes it current on the calling thread
// (GlScope); all entries except Launch restore the thread's previous EGL
// binding before returning. Launch leaves it current (making a context current per dispatch
// would cost more than the dispatch), so a sequence of launches must end with
// a blocking call (Download or Finish, as GpuPartition::Invoke always does) on
// the same thread before another thread may use the device: prepare and
// invoke may come from different threads, one invoke's launches may not.
// Otherwise the other thread gets a one-line EGL_BAD_ACCESS error.
//
// Profiling: GL_EXT_disjoint_timer_query (one GL_TIME_ELAPSED query per
// launch, results read in Finish) when the context has it, else glFinish +
// steady_clock around each launch (serialises the device; profiles only).
// Software rasterizers (llvmpipe: dispatches run lazily at flush time, so
// its queries read ~1 ns) always take the second method.
// timing_method() names the one in use ("gl_timer_query" or
// "gl_finish_host_clock"); the profile JSON records it as "method".
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/gl/gl_api.h"
#include "backends/gl/gl_context.h"
#include "backends/gl/gl_shaders.h"
#include "common/log.h"
#include "common/status.h"
#include "gpu/device.h"

namespace sdgpu::gl {

struct GlDeviceOptions {
  bool profiling = false;  // launches record Timers
  // the debugging knobs above (delegate options gl_*)
  bool finish_each = false;
  bool minimal_barrier = false;
  bool plain_buffers = false;
  bool nv_pragmas = true;
  std::string kernel_alias;  // "a=b,c=d"
  std::string dump_dir;
  GlLimits limits;  // gl_limits
  bool act_half = false;  // delegate option activations_fp16: the half-storage shader library
};

class GlDevice final : public gpu::Device {
 public:
  // Creates the context (gl_context.h), reads the limits, parses the embedded shader library. One-line
  // error when no EGL / OpenGL ES 3.1 is available.
  static Status Create(const GlDeviceOptions& options, const Logger& logger, std::unique_ptr<GlDevice>* out);
  ~GlDevice() override;
  GlDevice(const GlDevice&) = delete;
  GlDevice& operator=(const GlDevice&) = delete;

  const char* backend_name() const override { return "gl"; }
  const std::string& name() const override { return device_name_; }
  // The invocation limit, or the x size limit where that is lower (GL ES 3.1 allows it: 128 each at the minimums, but
  // a device may pair 256 invocations with a 128-wide x): the 1-D launches size their work-groups by this.
  size_t max_work_group_size() const override {
    return static_cast<size_t>(std::min(max_invocations_, max_group_size_[0]));
  }
  size_t local_memory_bytes() const override { return static_cast<size_t>(shared_bytes_); }
  // GL has no query for it: 0 (unknown) unless gl_limits sets it.
  int compute_units() const override { return compute_units_; }
  bool profiling() const override { return options_.profiling; }
  const char* timing_method() const override { return timer_query_ ? "gl_timer_query" : "gl_finish_host_clock"; }
  std::string cache_key() const override { return device_key_; }
  ProgramCounts program_counts() const override {
    ProgramCounts c;
    c.built = programs_built_;
    c.shared = programs_shared_;
    return c;
  }
  long long upload_waits() const override { return upload_waits_; }
  long long upload_drains() const override { return upload_drains_; }
  int staging_buffers() const override { return 2; }

  Status CreateBuffer(size_t bytes, std::unique_ptr<gpu::Buffer>* out) const override;
  // An arena above the storage block size is bound per argument as a range (glBindBufferRange) that starts at the
  // aligned byte offset at or below the tensor's, its element offset rebased; its tensors stay within
  // max_tensor_bytes(), which the backend checks before it claims a node.
  Status CreateArena(size_t bytes, std::unique_ptr<gpu::Buffer>* out) const override;
  Status NewBuffer(size_t bytes, bool ranged, std::unique_ptr<gpu::Buffer>* out) const;
  size_t max_tensor_bytes() const override;
  Status Upload(const gpu::Buffer& buffer, size_t offset, size_t bytes, const void* src, bool blocking) const override;
  Status Download(const gpu::Buffer& buffer, size_t offset, size_t bytes, void* dst) const override;
  // Succeeds when the library has the kernel and the device allows as many storage blocks as its shader declares
  // (GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS; an error names both, so planners skip it with that reason); programs are
  // compiled on first launch per local size.
  Status GetKernel(const std::string& name, const gpu::Kernel** out) const override;
  Status Launch(const gpu::Kernel& kernel, const gpu::Args& args, const gpu::Dim3& global, const gpu::Dim3& local,
                gpu::Timings* timings) const override;
  Status Finish() const override;
  Status Flush() const override;
  // A GL fence sync: waiting for it does not drain what was dispatched after it.
  Status Mark(std::unique_ptr<gpu::Fence>* out) const override;

  // Uniform location of `uvec3 sd_group_base` (shaders/common.glsl): the work-group offset of a split dispatch.
  static constexpr int kGroupBaseLocation = 120;

  struct TimerState;  // one launch's measurement (gl_device.cc)

 private:
  struct Program {
    GLuint id = 0;
    std::vector<GLenum> uniform_types;  // by location; 0 = no active uniform there
    std::vector<GLint> ssbo_bindings;   // bindings of the active storage blocks
    // By binding: bytes per element of the buffer parameter's own type, the unit of its offset argument (float /
    // int 4, vec4 16, a half buffer read through its _u32 view 2; from the generated declarations).
    std::vector<int> elem_bytes;
    bool has_group_base = false;
    std::array<GLuint, 3> group_base = {0, 0, 0};  // value last set
    std::vector<bool> uniform_known;      // by location: a value was set
    std::vector<int32_t> uniform_bits;    // by location: the value last set (float bits for floats)
    std::string checked_signature;        // argument kinds ('b', 'i', 'f') last checked against the program
  };

  GlDevice(std::shared_ptr<GlContext> context, const Logger& logger) : ctx_(std::move(context)), logger_(logger) {}
  Status Init(const GlDeviceOptions& options);
  // The caller holds a GlScope.
  Status ProgramFor(const ShaderLibrary& library, const KernelSource& kernel, const std::array<size_t, 3>& local,
                    Program** out) const;
  // The caller holds a GlScope. A linked program for `source`: from the persistent cache when it has a binary the
  // driver takes, else compiled (and its binary stored). *id = 0 and an error when the source does not compile.
  Status LinkProgram(const std::string& source, const std::string& what, GLuint* id) const;
  // A program from a [format, uint32 LE][binary] payload; false (nothing made) where the driver refuses it.
  bool ProgramFromBinary(const std::string& payload, GLuint* id) const;
  Status CheckSignature(const std::string& kernel, const Program& p, const gpu::Args& args) const;
  Status ResolveTimers() const;
  // gl_dump_dir: best effort (a failed write is logged, never an error).
  void DumpProgram(const std::string& stem, const std::string& source, GLuint program) const;

  std::shared_ptr<GlContext> ctx_;
  const GlApi& api() const { return ctx_->api(); }
  Logger logger_;
  GlDeviceOptions options_;
  // By activation storage ([0] float, [1] half): the device's own library is parsed at Init, the other one at the
  // first kernel requested inside a gpu::Device::StorageScope of that storage (a partition's float storage islands).
  // The compact variants are taken where a kernel has too many blocks; parsed at the first such kernel. (Guarded by
  // ctx_->mutex(), as GetKernel.)
  mutable std::array<ShaderLibrary, 2> libraries_;
  mutable std::array<bool, 2> parsed_ = {false, false};
  mutable std::array<ShaderLibrary, 2> compact_libraries_;
  mutable std::array<bool, 2> compact_parsed_ = {false, false};
  // The library of one storage, parsed now if it was not.
  Status LibraryLocked(bool half, bool compact, const ShaderLibrary** out) const;
  std::string device_name_;
  std::string device_key_;    // "gl|vendor|renderer|version|build" (cache keys)
  bool program_binaries_ = false;  // the driver has binary formats and the ES 3.0 binary entry points
  // (atomic: the stats read them while a warm-up thread compiles, and a progress bar polls the stats meanwhile)
  mutable std::atomic<long long> programs_built_{0};   // compiled, or read from the delegate cache (programs_built)
  mutable std::atomic<long long> programs_shared_{0};  // binaries another GL delegate of the process compiled meanwhile
  mutable std::atomic<long long> upload_waits_{0};     // uploads that first waited for launches reading their buffer
  mutable std::atomic<long long> upload_drains_{0};    // of them, those that waited for every launch (glFinish)
  GLint max_invocations_ = 0;
  GLint shared_bytes_ = 0;  // GL_MAX_COMPUTE_SHARED_MEMORY_SIZE
  std::array<GLint, 3> max_group_count_ = {0, 0, 0};
  std::array<GLint, 3> max_group_size_ = {0, 0, 0};
  GLint max_ssbo_blocks_ = 0;
  int compute_units_ = 0;  // gl_limits compute_units
  GLint64 max_ssbo_size_ = 0;
  GLint64 ssbo_align_ = 16;  // GL_SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT, at least 16 (float4 views stay aligned)
  bool timer_query_ = false;
  GLbitfield barrier_bits_ = GL_ALL_BARRIER_BITS;
  bool finish_each_ = false;
  bool plain_buffers_ = false;
  bool no_nv_pragmas_ = false;
  std::map<std::string, std::string> kernel_alias_;  // gl_kernel_alias
  std::string dump_dir_;                             // gl_dump_dir

  // Guarded by ctx_->mutex() (every access is inside a GlScope).
  mutable std::map<std::pair<bool, std::string>, std::unique_ptr<gpu::Kernel>> kernels_;  // by (storage, name)
  // by kernel source (one per library and kernel) and local size
  mutable std::map<std::tuple<const KernelSource*, size_t, size_t, size_t>, Program> programs_;
  mutable std::vector<std::shared_ptr<TimerState>> pending_timers_;
  mutable std::vector<GLuint> free_queries_;
  mutable std::vector<GLuint> all_queries_;
  mutable GLuint current_program_ = 0;
  // (serial, range start in bytes) of the buffer at SSBO binding k (serial 0 = none)
  mutable std::array<std::pair<uint64_t, size_t>, 16> bound_ = {};
  mutable uint64_t buffer_serial_ = 0;           // last serial handed out (CreateBuffer)
  mutable uint64_t launches_ = 0;                // Launch calls so far
  mutable uint64_t finished_launches_ = 0;       // launches known complete (a glFinish or an upload fence)
  // Fences made by Upload, oldest first: (launches issued before it, sync). An upload into a buffer that a launch
  // still reads waits for the oldest fence after that launch instead of for every launch (glFinish).
  mutable std::deque<std::pair<uint64_t, GLsync>> upload_fences_;
  // The caller holds a GlScope: returns once launch `launch` is complete.
  Status WaitForLaunch(uint64_t launch) const;
  void DropFencesThrough(uint64_t launches) const;  // deletes the fences covering no launch after `launches`
};

}  // namespace sdgpu::gl
