#include "backends/gl/gl_device.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <utility>

#include "backends/gl/shared_binaries.h"
#include "common/build_id.h"
#include "common/hash64.h"
#include "delegate/memory_planner.h"
#include "gpu/op_util.h"

namespace sdgpu::gl {
namespace {

using Clock = std::chrono::steady_clock;

// Blocks until `sync` is signalled (the caller holds a GlScope); `what` names the wait in an error. The first wait
// flushes the commands before the fence, so it completes.
Status WaitForSync(const GlApi& a, GLsync sync, const char* what) {
  for (;;) {
    const GLenum r = a.glClientWaitSync(sync, GL_SYNC_FLUSH_COMMANDS_BIT, GLuint64{100} * 1000000);
    if (r == GL_ALREADY_SIGNALED || r == GL_CONDITION_SATISFIED) return Status::Ok();
    if (r != GL_TIMEOUT_EXPIRED) {
      const Status s = GlCheck(a, what);
      return s.ok() ? Status::Error("gl: glClientWaitSync failed (GL_WAIT_FAILED)") : s;
    }
  }
}

// An SSBO; holds the context so it can be deleted after the device (the context dies with its last user).
class GlBuffer final : public gpu::Buffer {
 public:
  GlBuffer(std::shared_ptr<GlContext> ctx, GLuint id, size_t bytes, size_t alloc, uint64_t serial, bool ranged)
      : ctx_(std::move(ctx)), id_(id), bytes_(bytes), alloc_(alloc), serial_(serial), ranged_(ranged) {}
  ~GlBuffer() override {
    GlScope scope(*ctx_, false);
    // When the context is current on another thread the buffer is freed with the context instead.
    if (scope.status().ok()) {
      ctx_->api().glDeleteBuffers(1, &id_);
      (void)GlCheck(ctx_->api(), "glDeleteBuffers");
    }
  }
  size_t bytes() const override { return bytes_; }
  GLuint id() const { return id_; }
  // Unique per device for its lifetime (GL may reuse a deleted buffer's name; the binding cache keys on this).
  uint64_t serial() const { return serial_; }
  size_t alloc() const { return alloc_; }
  // Larger than the storage block size: bound per argument as a range around the tensor (GlDevice::Launch).
  bool ranged() const { return ranged_; }
  // The device's launch count when a launch last bound this buffer (GlDevice::Upload's write-after-read guard).
  uint64_t last_launch() const { return last_launch_; }
  void set_last_launch(uint64_t launch) const { last_launch_ = launch; }

 private:
  std::shared_ptr<GlContext> ctx_;
  GLuint id_;
  size_t bytes_;  // as requested (the allocation is rounded up to 16 bytes)
  size_t alloc_;
  uint64_t serial_;
  bool ranged_;
  mutable uint64_t last_launch_ = 0;  // guarded by the context's mutex, as every use of the buffer
};

class GlKernel final : public gpu::Kernel {
 public:
  GlKernel(const ShaderLibrary* library, const KernelSource* source) : library_(library), source_(source) {}
  const std::string& name() const override { return source_->name; }
  const ShaderLibrary& library() const { return *library_; }
  const KernelSource& source() const { return *source_; }

 private:
  const ShaderLibrary* library_;  // the device's normal or compact library, which owns source_
  const KernelSource* source_;
};

// The first `lines` non-empty lines of a compile log, joined into one line.
std::string FirstLines(const std::string& log, int lines) {
  std::string s;
  size_t start = 0;
  for (int taken = 0; taken < lines && start < log.size();) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    if (end > start) {
      s += (s.empty() ? "" : " | ") + log.substr(start, end - start);
      ++taken;
    }
    start = end + 1;
  }
  return s;
}

}  // namespace

struct GlDevice::TimerState {
  GLuint query = 0;  // gl_timer_query: the GL_TIME_ELAPSED query (0 once resolved)
  double ms = 0.0;
  bool resolved = false;
};

namespace {

class GlTimer final : public gpu::Timer {
 public:
  GlTimer(std::string kernel, std::shared_ptr<GlDevice::TimerState> s) : Timer(std::move(kernel)), s_(std::move(s)) {}
  Status ElapsedMs(double* ms) const override {
    if (!s_->resolved) return Status::Error("gl: launch time read before Device::Finish()");
    *ms = s_->ms;
    return Status::Ok();
  }

 private:
  std::shared_ptr<GlDevice::TimerState> s_;
};

}  // namespace

Status GlDevice::Create(const GlDeviceOptions& options, const Logger& logger, std::unique_ptr<GlDevice>* out) {
  const GlApi* api = nullptr;
  SDGPU_RETURN_IF_ERROR(LoadGlApi(&api));
  std::shared_ptr<GlContext> ctx;
  SDGPU_RETURN_IF_ERROR(GlContext::Create(api, logger, options.limits.pbuffer > 0, &ctx));
  std::unique_ptr<GlDevice> d(new GlDevice(std::move(ctx), logger));
  SDGPU_RETURN_IF_ERROR(d->Init(options));
  *out = std::move(d);
  return Status::Ok();
}

Status GlDevice::Init(const GlDeviceOptions& options) {
  options_ = options;
  set_act_half(options.act_half);
  const ShaderLibrary* own = nullptr;
  SDGPU_RETURN_IF_ERROR(LibraryLocked(options.act_half, false, &own));
  GlScope scope(*ctx_, false);
  SDGPU_RETURN_IF_ERROR(scope.status());
  const GlApi& a = api();
  auto str = [&](GLenum e) {
    const char* s = reinterpret_cast<const char*>(a.glGetString(e));
    return std::string(s != nullptr ? s : "");
  };
  device_name_ = str(GL_RENDERER);
  const std::string version = str(GL_VERSION), vendor = str(GL_VENDOR);
  const std::string extensions = str(GL_EXTENSIONS);
  for (GLuint i = 0; i < 3; ++i) {
    a.glGetIntegeri_v(GL_MAX_COMPUTE_WORK_GROUP_COUNT, i, &max_group_count_[i]);
    a.glGetIntegeri_v(GL_MAX_COMPUTE_WORK_GROUP_SIZE, i, &max_group_size_[i]);
  }
  a.glGetIntegerv(GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS, &max_invocations_);
  a.glGetIntegerv(GL_MAX_COMPUTE_SHADER_STORAGE_BLOCKS, &max_ssbo_blocks_);
  // A program's active storage blocks also count against the combined limits, which some phones set below the
  // compute stage's own (a survey of opengles.gpuinfo.org quoted in gpuweb/gpuweb#5029: ~360 of ~3,400 GL ES reports
  // combine 8 blocks). A shader above them would fail to link at its first launch instead of being left to the
  // planners.
  GLint combined_blocks = 0, combined_outputs = 0;
  a.glGetIntegerv(GL_MAX_COMBINED_SHADER_STORAGE_BLOCKS, &combined_blocks);
  a.glGetIntegerv(GL_MAX_COMBINED_SHADER_OUTPUT_RESOURCES, &combined_outputs);
  for (GLint limit : {combined_blocks, combined_outputs}) {
    if (limit > 0) max_ssbo_blocks_ = std::min(max_ssbo_blocks_, limit);
  }
  a.glGetInteger64v(GL_MAX_SHADER_STORAGE_BLOCK_SIZE, &max_ssbo_size_);
  a.glGetIntegerv(GL_MAX_COMPUTE_SHARED_MEMORY_SIZE, &shared_bytes_);
  GLint align = 0;
  a.glGetIntegerv(GL_SHADER_STORAGE_BUFFER_OFFSET_ALIGNMENT, &align);
  SDGPU_RETURN_IF_ERROR(GlCheck(a, "reading the compute limits"));
  // A range start must be a multiple of the driver's alignment and of 16 bytes (the float4 and half-pair views of
  // a buffer index from the binding's start); alignments are powers of two.
  ssbo_align_ = std::max<GLint64>(16, align);
  GLint binary_formats = 0;
  a.glGetIntegerv(GL_NUM_PROGRAM_BINARY_FORMATS, &binary_formats);
  a.glGetError();  // a driver without program binaries is not an error
  program_binaries_ = binary_formats > 0 && a.glGetProgramBinary != nullptr && a.glProgramBinary != nullptr &&
                      a.glProgramParameteri != nullptr;
  device_key_ = "gl|" + vendor + "|" + device_name_ + "|" + version + "|" + BuildId();
  // gl_limits: a smaller device's limits, never above the driver's (delegate/options.h)
  auto cap = [](GLint* v, int limit) {
    if (limit > 0 && limit < *v) *v = limit;
  };
  cap(&shared_bytes_, options.limits.shared_bytes);
  cap(&max_invocations_, options.limits.invocations);
  for (GLint& g : max_group_size_) cap(&g, options.limits.invocations);
  cap(&max_group_size_[0], options.limits.group_size_x);
  cap(&max_ssbo_blocks_, options.limits.storage_blocks);
  if (options.limits.storage_block_bytes > 0 && options.limits.storage_block_bytes < max_ssbo_size_) {
    max_ssbo_size_ = options.limits.storage_block_bytes;
  }
  compute_units_ = options.limits.compute_units;
  // Mesa's software rasterizers expose the timer query but run dispatches lazily at flush time, so every
  // query reads ~1 ns; they get the glFinish + host clock method instead.
  const bool software = device_name_.rfind("llvmpipe", 0) == 0 || device_name_.rfind("softpipe", 0) == 0 ||
                        device_name_.find("SwiftShader") != std::string::npos;
  timer_query_ = !software && HasExtension(extensions.c_str(), "GL_EXT_disjoint_timer_query") &&
                 a.glGenQueriesEXT != nullptr && a.glDeleteQueriesEXT != nullptr && a.glBeginQueryEXT != nullptr &&
                 a.glEndQueryEXT != nullptr && a.glGetQueryObjectui64vEXT != nullptr;
  // Debugging knobs (delegate options gl_*; see gl_device.h).
  finish_each_ = options.finish_each;
  if (options.minimal_barrier) barrier_bits_ = GL_SHADER_STORAGE_BARRIER_BIT | GL_BUFFER_UPDATE_BARRIER_BIT;
  plain_buffers_ = options.plain_buffers;
  no_nv_pragmas_ = !options.nv_pragmas;
  dump_dir_ = options.dump_dir;
  for (std::string list = options.kernel_alias, item; !list.empty();) {
    const size_t comma = list.find(',');
    item = list.substr(0, comma);
    list = comma == std::string::npos ? "" : list.substr(comma + 1);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || own->Find(item.substr(eq + 1)) == nullptr) {
      return Status::Error("gl: gl_kernel_alias: '" + item + "' is not <kernel>=<library kernel>");
    }
    kernel_alias_[item.substr(0, eq)] = item.substr(eq + 1);
  }
  if (max_ssbo_blocks_ < 5) {  // select_f32 and attn_pv bind five buffers
    return Status::Error("gl: the context allows only " + std::to_string(max_ssbo_blocks_) +
                         " storage buffers per compute shader (the kernels need 5)");
  }
  logger_.Info("gl: " + ctx_->display_label() + ": " + version + ", renderer '" + device_name_ + "', vendor '" +
               vendor + "'; work-group invocations " + std::to_string(max_invocations_) + ", group count " +
               std::to_string(max_group_count_[0]) + "x" + std::to_string(max_group_count_[1]) + "x" +
               std::to_string(max_group_count_[2]) + ", SSBO blocks " + std::to_string(max_ssbo_blocks_) +
               ", SSBO size " + std::to_string(max_ssbo_size_) + " bytes, shared " + std::to_string(shared_bytes_) +
               " bytes" + (compute_units_ > 0 ? ", " + std::to_string(compute_units_) + " compute units" : "") +
               "; " + std::to_string(own->num_kernels()) + " kernels; program binaries: " +
               (program_binaries_ ? std::to_string(binary_formats) + " format(s)" : std::string("none")) +
               "; profiling timer: " + timing_method() +
               (finish_each_ ? "; gl_finish_each" : "") + (plain_buffers_ ? "; gl_plain_buffers" : "") +
               (barrier_bits_ != GL_ALL_BARRIER_BITS ? "; gl_barrier=minimal" : "") +
               (no_nv_pragmas_ ? "; gl_nv_pragmas=0" : "") + (kernel_alias_.empty() ? "" : "; gl_kernel_alias"));
  return Status::Ok();
}

GlDevice::~GlDevice() {
  GlScope scope(*ctx_, false);
  if (!scope.status().ok()) return;  // the context frees everything when it dies
  const GlApi& a = api();
  DropFencesThrough(UINT64_MAX);
  for (auto& [key, p] : programs_) a.glDeleteProgram(p.id);
  if (!all_queries_.empty()) a.glDeleteQueriesEXT(static_cast<GLsizei>(all_queries_.size()), all_queries_.data());
  (void)GlCheck(a, "deleting programs");
}

// "layout(std430, binding = K) [readonly ]buffer SdBufK[_v4|_u32|_h4] { TYPE name[]; };" (gen_glsl.py): the element
// size of each binding's own declaration (no suffix), or, for a half buffer that has only half views, 2 (_u32) or 8
// (_h4, a float4* parameter). A parameter declared both ways (gemm_tiled.kern's A and C, float or half by a runtime
// switch) gets 4 here; its launcher gives the element size per argument (gpu::Arg::elem_bytes), which wins.
namespace {

std::vector<int> BindingElementBytes(const std::string& source) {
  std::vector<int> bytes;
  const std::string head = "buffer SdBuf";
  for (size_t at = source.find(head); at != std::string::npos; at = source.find(head, at + 1)) {
    size_t i = at + head.size();
    int k = 0;
    while (i < source.size() && std::isdigit(static_cast<unsigned char>(source[i])) != 0) k = k * 10 + (source[i++] - '0');
    const std::string_view rest(source.data() + i, std::min<size_t>(source.size() - i, 16));
    if (static_cast<size_t>(k) >= bytes.size()) bytes.resize(static_cast<size_t>(k) + 1, 0);
    if (rest.rfind(" {", 0) == 0) {  // the parameter's own type
      const size_t brace = source.find('{', i);
      const std::string_view type(source.data() + brace + 2, 5);
      bytes[static_cast<size_t>(k)] = type.rfind("vec4", 0) == 0 || type.rfind("ivec4", 0) == 0 ||
                                               type.rfind("uvec4", 0) == 0 ? 16 : 4;
    } else if (rest.rfind("_u32 {", 0) == 0 && bytes[static_cast<size_t>(k)] == 0) {
      bytes[static_cast<size_t>(k)] = 2;
    } else if (rest.rfind("_h4 {", 0) == 0 && bytes[static_cast<size_t>(k)] == 0) {
      bytes[static_cast<size_t>(k)] = 8;  // four halves: a float4* parameter with half activation storage
    }
  }
  for (int& b : bytes) b = b == 0 ? 4 : b;
  return bytes;
}

}  // namespace

Status GlDevice::CreateBuffer(size_t bytes, std::unique_ptr<gpu::Buffer>* out) const {
  return NewBuffer(bytes, false, out);
}

Status GlDevice::CreateArena(size_t bytes, std::unique_ptr<gpu::Buffer>* out) const {
  return NewBuffer(bytes, true, out);
}

size_t GlDevice::max_tensor_bytes() const {
  // A range starts at the operand's offset rounded down to the alignment: no slack when the planner's 64-byte
  // offsets are multiples of it.
  const GLint64 slack = MemoryPlanner::kAlignment % static_cast<size_t>(ssbo_align_) == 0 ? 0 : ssbo_align_;
  return static_cast<size_t>(std::max<GLint64>(0, max_ssbo_size_ - slack));
}

Status GlDevice::NewBuffer(size_t bytes, bool arena, std::unique_ptr<gpu::Buffer>* out) const {
  // Rounded up so a kernel reading 4-byte words (fp16 pairs in dequant_f16) never reads past the end.
  const size_t alloc = std::max<size_t>(16, (bytes + 15) / 16 * 16);
  const bool ranged = static_cast<GLint64>(alloc) > max_ssbo_size_;
  if (ranged && !arena) {
    return Status::Error("gl: a " + std::to_string(bytes) + "-byte buffer exceeds this driver's "
                         "GL_MAX_SHADER_STORAGE_BLOCK_SIZE (" + std::to_string(max_ssbo_size_) + " bytes)");
  }
  GlScope scope(*ctx_, false);
  SDGPU_RETURN_IF_ERROR(scope.status());
  const GlApi& a = api();
  GLuint id = 0;
  a.glGenBuffers(1, &id);
  SDGPU_RETURN_IF_ERROR(GlCheck(a, "glGenBuffers"));
  a.glBindBuffer(GL_COPY_WRITE_BUFFER, id);
  a.glBufferData(GL_COPY_WRITE_BUFFER, static_cast<GLsizeiptr>(alloc), nullptr, GL_DYNAMIC_COPY);
  Status s = GlCheck(a, ("glBufferData(" + std::to_string(alloc) + " bytes)").c_str());
  a.glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
  if (!s.ok()) {
    a.glDeleteBuffers(1, &id);
    a.glGetError();
    return s;
  }
  *out = std::make_unique<GlBuffer>(ctx_, id, bytes, alloc, ++buffer_serial_, ranged);
  return Status::Ok();
}

Status GlDevice::Upload(const gpu::Buffer& buffer, size_t offset, size_t bytes, const void* src, bool) const {
  if (bytes == 0) return Status::Ok();
  GlScope scope(*ctx_, false);
  SDGPU_RETURN_IF_ERROR(scope.status());
  const GlApi& a = api();
  const auto& buf = static_cast<const GlBuffer&>(buffer);
  // A launch not yet known complete may still read this buffer (weight set-up refills its staging buffers, partitions
  // refill their inputs): glMemoryBarrier orders earlier shader *writes* before a host write, not earlier shader
  // reads. NVIDIA's GL overwrote staged weights under the kernels still packing or transforming the previous one:
  // the SD1.5 UNet b2, fused or fused + Winograd, came out 1e-2 .. 8e-2 wrong in about half of the processes (H200,
  // docs/benchmarks-history/2026-11-30-h200-gl-weight-set-up-race.md), right in every one with this wait. Wait for
  // that launch first.
  if (buf.last_launch() > finished_launches_) {
    SDGPU_RETURN_IF_ERROR(WaitForLaunch(buf.last_launch()));
    ++upload_waits_;
  }
  // A fence after the launches so far: a later upload into a buffer one of them reads waits for it alone, not for
  // the launches issued after it. The weight set-up takes two staging buffers in turn (staging_buffers), so the
  // refill of one waits for the transform that read it a weight ago, while the last weight's transform still runs
  // (a glFinish per weight made SD1.5's set-ups, three at once on their own contexts, wait for each other's work:
  // BENCHMARKS.md, "GL's weight set-up without a drain per weight").
  if (launches_ > finished_launches_ && (upload_fences_.empty() || upload_fences_.back().first < launches_)) {
    GLsync sync = a.glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0);
    SDGPU_RETURN_IF_ERROR(GlCheck(a, "glFenceSync"));
    if (sync != nullptr) upload_fences_.emplace_back(launches_, sync);
    constexpr size_t kMaxFences = 64;  // (a wait for an older launch then takes the oldest fence kept)
    if (upload_fences_.size() > kMaxFences) {
      a.glDeleteSync(upload_fences_.front().second);
      upload_fences_.pop_front();
    }
  }
  a.glBindBuffer(GL_COPY_WRITE_BUFFER, buf.id());
  // A large write (the weights) is copied into the mapped range on all host cores: glBufferSubData is one thread's
  // memcpy inside the driver, and while one model's set-up sits in it, the other models' set-ups (their own
  // contexts, on other threads) wait for the driver too (the same BENCHMARKS.md section).
  // The range was waited for above, so mapping it needs no implicit wait; glBufferSubData copies `src` before it
  // returns either way, so a non-blocking upload needs nothing more.
  constexpr size_t kMappedBytes = size_t{4} << 20;
  bool written = false;
  if (bytes >= kMappedBytes) {
    void* dst = a.glMapBufferRange(GL_COPY_WRITE_BUFFER, static_cast<GLintptr>(offset),
                                   static_cast<GLsizeiptr>(bytes), GL_MAP_WRITE_BIT | GL_MAP_INVALIDATE_RANGE_BIT);
    if (dst != nullptr) {
      gpu::HostParallelRanges(static_cast<int64_t>(bytes), int64_t{1} << 20, true, [&](int64_t b, int64_t e) {
        std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, static_cast<size_t>(e - b));
      });
      written = a.glUnmapBuffer(GL_COPY_WRITE_BUFFER) != 0;  // 0: the store was lost (written again below)
    }
    a.glGetError();  // a refused mapping falls back to glBufferSubData
  }
  if (!written) {
    a.glBufferSubData(GL_COPY_WRITE_BUFFER, static_cast<GLintptr>(offset), static_cast<GLsizeiptr>(bytes), src);
  }
  a.glBindBuffer(GL_COPY_WRITE_BUFFER, 0);
  return GlCheck(a, written ? "writing a mapped buffer range" : "glBufferSubData");
}

Status GlDevice::WaitForLaunch(uint64_t launch) const {
  const GlApi& a = api();
  DropFencesThrough(launch - 1);  // those end before `launch`
  if (upload_fences_.empty()) {  // none made since: every launch
    a.glFinish();
    SDGPU_RETURN_IF_ERROR(GlCheck(a, "glFinish (before refilling a buffer a launch reads)"));
    finished_launches_ = launches_;
    DropFencesThrough(launches_);
    ++upload_drains_;
    return Status::Ok();
  }
  const auto [covered, sync] = upload_fences_.front();
  SDGPU_RETURN_IF_ERROR(WaitForSync(a, sync, "glClientWaitSync (before refilling a buffer a launch reads)"));
  finished_launches_ = std::max(finished_launches_, covered);
  DropFencesThrough(covered);
  return Status::Ok();
}

void GlDevice::DropFencesThrough(uint64_t launches) const {
  while (!upload_fences_.empty() && upload_fences_.front().first <= launches) {
    api().glDeleteSync(upload_fences_.front().second);
    upload_fences_.pop_front();
  }
}

Status GlDevice::Download(const gpu::Buffer& buffer, size_t offset, size_t bytes, void* dst) const {
  if (bytes == 0) return Status::Ok();
  GlScope scope(*ctx_, false);
  SDGPU_RETURN_IF_ERROR(scope.status());
  const GlApi& a = api();
  a.glBindBuffer(GL_COPY_READ_BUFFER, static_cast<const GlBuffer&>(buffer).id());
  // Mapping for reading waits for every earlier write (the launches' memory barriers cover shader writes).
  const void* p = a.glMapBufferRange(GL_COPY_READ_BUFFER, static_cast<GLintptr>(offset),
                                     static_cast<GLsizeiptr>(bytes), GL_MAP_READ_BIT);
  if (p == nullptr) {
    Status s = GlCheck(a, "glMapBufferRange");
    a.glBindBuffer(GL_COPY_READ_BUFFER, 0);
    return s.ok() ? Status::Error("gl: glMapBufferRange returned NULL") : s;
  }
  std::memcpy(dst, p, bytes);
  const GLboolean intact = a.glUnmapBuffer(GL_COPY_READ_BUFFER);
  a.glBindBuffer(GL_COPY_READ_BUFFER, 0);
  SDGPU_RETURN_IF_ERROR(GlCheck(a, "glUnmapBuffer"));
  if (!intact) return Status::Error("gl: glUnmapBuffer reported corrupted buffer contents (display mode change?)");
  return Status::Ok();
}

Status GlDevice::LibraryLocked(bool half, bool compact, const ShaderLibrary** out) const {
  const int i = half ? 1 : 0;
  bool& parsed = compact ? compact_parsed_[i] : parsed_[i];
  ShaderLibrary& library = compact ? compact_libraries_[i] : libraries_[i];
  if (!parsed) {
    const char* source = compact ? (half ? ShaderSourceActHalfCompact() : ShaderSourceCompact())
                                 : (half ? ShaderSourceActHalf() : ShaderSource());
    SDGPU_RETURN_IF_ERROR(ShaderLibrary::Parse(source, &library));
    parsed = true;
  }
  *out = &library;
  return Status::Ok();
}

Status GlDevice::GetKernel(const std::string& name, const gpu::Kernel** out) const {
  std::lock_guard<std::mutex> lock(ctx_->mutex());
  const bool half = act_half();
  auto it = kernels_.find({half, name});
  if (it == kernels_.end()) {
    const auto alias = kernel_alias_.find(name);
    const std::string& source_name = alias != kernel_alias_.end() ? alias->second : name;
    const ShaderLibrary* library = nullptr;
    SDGPU_RETURN_IF_ERROR(LibraryLocked(half, false, &library));
    const KernelSource* src = library->Find(source_name);
    if (src == nullptr) return Status::Error("gl: no kernel '" + name + "' in the GLSL library");
    const int blocks = library->StorageBlocks(*src);
    if (blocks > max_ssbo_blocks_) {  // its compact variant where that one fits (gpu/dialect/prelude.h, LD4A)
      const ShaderLibrary* compact_library = nullptr;  // only devices that refuse a kernel read the compact library
      SDGPU_RETURN_IF_ERROR(LibraryLocked(half, true, &compact_library));
      const KernelSource* compact = compact_library->Find(source_name);
      const int compact_blocks = compact != nullptr ? compact_library->StorageBlocks(*compact) : blocks;
      if (compact_blocks > max_ssbo_blocks_) {
        return Status::Error("gl: kernel '" + name + "' declares " + std::to_string(compact_blocks) +
                             " storage blocks, the device allows " + std::to_string(max_ssbo_blocks_));
      }
      src = compact;
      library = compact_library;
    }
    it = kernels_.emplace(std::make_pair(half, name), std::make_unique<GlKernel>(library, src)).first;
  }
  *out = it->second.get();
  return Status::Ok();
}

Status GlDevice::ProgramFor(const ShaderLibrary& library, const KernelSource& kernel, const std::array<size_t, 3>& local,
                            Program** out) const {
  const auto key = std::make_tuple(&kernel, local[0], local[1], local[2]);
  auto it = programs_.find(key);
  if (it != programs_.end()) {
    *out = &it->second;
    return Status::Ok();
  }
  const GlApi& a = api();
  const auto t0 = Clock::now();
  std::string source = library.Compose(kernel, local);
  if (plain_buffers_) {  // debugging: no readonly/writeonly hints for the compiler
    for (const char* word : {"readonly ", "writeonly "}) {
      for (size_t at; (at = source.find(word)) != std::string::npos;) source.erase(at, std::strlen(word));
    }
  }
  if (no_nv_pragmas_) {  // debugging: the line stays (as an empty one) so #line numbers hold
    for (size_t at; (at = source.find("#pragma optionNV")) != std::string::npos;) {
      source.erase(at, source.find('\n', at) - at);
    }
  }
  const std::string what = "kernel '" + kernel.name + "' (" + library.file_path(kernel.file) + ", local size " +
                           std::to_string(local[0]) + "x" + std::to_string(local[1]) + "x" +
                           std::to_string(local[2]) + ")";
  GLuint prog = 0;
  {
    const gpu::SetupTimer timer(*this, Setup::kPrograms);
    SDGPU_RETURN_IF_ERROR(LinkProgram(source, what, &prog));
  }
  Program p;
  p.id = prog;
  p.elem_bytes = BindingElementBytes(source);
  GLint count = 0;
  a.glGetProgramiv(prog, GL_ACTIVE_UNIFORMS, &count);
  for (GLint i = 0; i < count; ++i) {
    char name[128] = {};
    GLsizei len = 0;
    GLint size = 0;
    GLenum type = 0;
    a.glGetActiveUniform(prog, static_cast<GLuint>(i), sizeof(name), &len, &size, &type, name);
    const GLint loc = a.glGetUniformLocation(prog, name);
    if (loc < 0) continue;
    if (static_cast<size_t>(loc) >= p.uniform_types.size()) p.uniform_types.resize(loc + 1, 0);
    p.uniform_types[loc] = type;
  }
  p.uniform_known.assign(p.uniform_types.size(), false);
  p.uniform_bits.assign(p.uniform_types.size(), 0);
  p.has_group_base = p.uniform_types.size() > kGroupBaseLocation &&
                     p.uniform_types[kGroupBaseLocation] == GL_UNSIGNED_INT_VEC3;
  GLint blocks = 0;
  a.glGetProgramInterfaceiv(prog, GL_SHADER_STORAGE_BLOCK, GL_ACTIVE_RESOURCES, &blocks);
  for (GLint i = 0; i < blocks; ++i) {
    const GLenum prop = GL_BUFFER_BINDING;
    GLint binding = -1;
    a.glGetProgramResourceiv(prog, GL_SHADER_STORAGE_BLOCK, static_cast<GLuint>(i), 1, &prop, 1, nullptr, &binding);
    p.ssbo_bindings.push_back(binding);
  }
  Status s = GlCheck(a, ("building " + what).c_str());
  if (!s.ok()) {
    a.glDeleteProgram(prog);
    return s;
  }
  if (!dump_dir_.empty()) {
    DumpProgram(kernel.name + "_" + std::to_string(local[0]) + "x" + std::to_string(local[1]) + "x" +
                std::to_string(local[2]), source, prog);
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  logger_.Debug("gl: compiled " + what + " in " + std::to_string(ms) + " ms");
  *out = &programs_.emplace(key, std::move(p)).first->second;
  return Status::Ok();
}

bool GlDevice::ProgramFromBinary(const std::string& payload, GLuint* id) const {
  const GlApi& a = api();
  if (payload.size() <= 4) return false;
  GLenum format = 0;  // payload: [format, uint32 LE][binary]
  for (int i = 3; i >= 0; --i) format = (format << 8) | static_cast<unsigned char>(payload[static_cast<size_t>(i)]);
  const GLuint prog = a.glCreateProgram();
  a.glProgramBinary(prog, format, payload.data() + 4, static_cast<GLsizei>(payload.size() - 4));
  GLint ok = 0;
  a.glGetProgramiv(prog, GL_LINK_STATUS, &ok);
  if (ok && GlCheck(a, "glProgramBinary").ok()) {
    *id = prog;
    return true;
  }
  a.glDeleteProgram(prog);
  a.glGetError();
  return false;
}

Status GlDevice::LinkProgram(const std::string& source, const std::string& what, GLuint* id) const {
  const GlApi& a = api();
  const std::string key = "glprog|" + cache_key() + "|" + Hex64(Hash64(source)) + "|" + std::to_string(source.size());
  std::string payload;  // [format, uint32 LE][binary]
  if (program_binaries_ && cache().Load(CacheKind::kProgram, key, &payload) && payload.size() > 4) {
    if (ProgramFromBinary(payload, id)) {
      ++programs_built_;
      return Status::Ok();
    }
    // A valid entry (its checksums held) that this driver refuses: compiled again below, and the entry replaced.
    logger_.Warning("gl: the driver refused a cached program binary for " + what + "; compiling it again");
  }
  // Another GL delegate of the process compiling the same program right now: wait for its binary instead of compiling
  // it too (shared_binaries.h). A claim this device takes is published below, or as "none" if the compile fails.
  std::string shared;
  SharedBinaries::Claim claim =
      program_binaries_ ? SharedBinaries::Process().ClaimOrWait(key, &shared) : SharedBinaries::Claim();
  if (program_binaries_ && !claim.owns() && ProgramFromBinary(shared, id)) {
    ++programs_shared_;
    return Status::Ok();
  }
  const GLuint shader = a.glCreateShader(GL_COMPUTE_SHADER);
  if (shader == 0) {
    Status s = GlCheck(a, "glCreateShader(GL_COMPUTE_SHADER)");
    return s.ok() ? Status::Error("gl: glCreateShader(GL_COMPUTE_SHADER) returned 0") : s;
  }
  // A driver's compile can take seconds (NVIDIA's GL unrolls every loop it can: attn_flash_d512 took 35 s before
  // its loops were bounded); the first inference's progress lines say which program it is busy with.
  const gpu::SetupProgress::ScopedDetail detail(progress(), "compiling " + what);
  const char* text = source.c_str();
  a.glShaderSource(shader, 1, &text, nullptr);
  a.glCompileShader(shader);
  GLint ok = 0;
  a.glGetShaderiv(shader, GL_COMPILE_STATUS, &ok);
  if (!ok) {
    GLint n = 0;
    a.glGetShaderiv(shader, GL_INFO_LOG_LENGTH, &n);
    std::string log(static_cast<size_t>(std::max(n, 1)), '\0');
    a.glGetShaderInfoLog(shader, static_cast<GLsizei>(log.size()), nullptr, log.data());
    a.glDeleteShader(shader);
    return Status::Error("gl: compiling " + what + " failed: " + FirstLines(log.c_str(), 4));
  }
  const GLuint prog = a.glCreateProgram();
  a.glAttachShader(prog, shader);
  if (program_binaries_) a.glProgramParameteri(prog, GL_PROGRAM_BINARY_RETRIEVABLE_HINT, 1);
  a.glLinkProgram(prog);
  a.glDeleteShader(shader);  // flagged; freed with the program
  a.glGetProgramiv(prog, GL_LINK_STATUS, &ok);
  if (!ok) {
    GLint n = 0;
    a.glGetProgramiv(prog, GL_INFO_LOG_LENGTH, &n);
    std::string log(static_cast<size_t>(std::max(n, 1)), '\0');
    a.glGetProgramInfoLog(prog, static_cast<GLsizei>(log.size()), nullptr, log.data());
    a.glDeleteProgram(prog);
    return Status::Error("gl: linking " + what + " failed: " + FirstLines(log.c_str(), 4));
  }
  if (program_binaries_ && (cache().enabled() || claim.owns())) {
    GLint n = 0;
    a.glGetProgramiv(prog, GL_PROGRAM_BINARY_LENGTH, &n);
    if (n > 0) {
      std::string bin(static_cast<size_t>(n) + 4, '\0');
      GLsizei got = 0;
      GLenum format = 0;
      a.glGetProgramBinary(prog, n, &got, &format, bin.data() + 4);
      if (GlCheck(a, "glGetProgramBinary").ok() && got > 0 && got <= n) {
        for (int i = 0; i < 4; ++i) bin[static_cast<size_t>(i)] = static_cast<char>((format >> (8 * i)) & 0xff);
        bin.resize(static_cast<size_t>(got) + 4);
        if (cache().enabled()) cache().Store(CacheKind::kProgram, key, bin);
        claim.Publish(bin);
      }
    }
  }
  ++programs_built_;
  *id = prog;
  return Status::Ok();
}

void GlDevice::DumpProgram(const std::string& stem, const std::string& source, GLuint program) const {
  const GlApi& a = api();
  std::vector<char> binary;
  GLenum format = 0;
  if (a.glGetProgramBinary != nullptr) {
    GLint n = 0;
    a.glGetProgramiv(program, GL_PROGRAM_BINARY_LENGTH, &n);
    binary.resize(static_cast<size_t>(std::max(n, 0)));
    GLsizei got = 0;
    if (n > 0) a.glGetProgramBinary(program, n, &got, &format, binary.data());
    binary.resize(static_cast<size_t>(std::max(got, 0)));
  }
  a.glGetError();  // a driver without program binaries is not an error here
  auto write = [&](const std::string& path, const char* data, size_t bytes) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    const bool ok = f != nullptr && std::fwrite(data, 1, bytes, f) == bytes;
    if (f != nullptr) std::fclose(f);
    if (!ok) logger_.Warning("gl: gl_dump_dir: cannot write " + path);
  };
  write(dump_dir_ + "/" + stem + ".comp", source.data(), source.size());
  if (!binary.empty()) write(dump_dir_ + "/" + stem + ".bin", binary.data(), binary.size());
}

// The op's argument list against the program's interface: every active uniform at location j must be the
// j-th scalar with the same type, every active storage block must have a buffer argument.
Status GlDevice::CheckSignature(const std::string& kernel, const Program& p, const gpu::Args& args) const {
  std::vector<GLenum> scalars;
  size_t buffers = 0;
  for (const gpu::Arg& arg : args.items()) {
    if (arg.kind == gpu::Arg::Kind::kBuffer) ++buffers;
    scalars.push_back(arg.kind == gpu::Arg::Kind::kFloat ? GL_FLOAT : GL_INT);  // a buffer's offset is an int
  }
  for (size_t loc = 0; loc < p.uniform_types.size(); ++loc) {
    const GLenum type = p.uniform_types[loc];
    if (type == 0 || loc == kGroupBaseLocation) continue;
    if (loc >= scalars.size()) {
      return Status::Error("gl: kernel '" + kernel + "' has a uniform at location " + std::to_string(loc) +
                           " but the op passes " + std::to_string(scalars.size()) + " scalar(s)");
    }
    if (type != scalars[loc]) {
      return Status::Error("gl: kernel '" + kernel + "': scalar #" + std::to_string(loc) + " is " +
                           (scalars[loc] == GL_FLOAT ? "float" : "int") + " in the op but not in the shader");
    }
  }
  for (GLint b : p.ssbo_bindings) {
    if (b < 0 || static_cast<size_t>(b) >= buffers) {
      return Status::Error("gl: kernel '" + kernel + "' reads storage binding " + std::to_string(b) +
                           " but the op passes " + std::to_string(buffers) + " buffer(s)");
    }
  }
  return Status::Ok();
}

Status GlDevice::Launch(const gpu::Kernel& kernel, const gpu::Args& args, const gpu::Dim3& global,
                        const gpu::Dim3& local, gpu::Timings* timings) const {
  std::array<size_t, 3> l{}, groups{};
  size_t invocations = 1;
  for (int i = 0; i < 3; ++i) {
    if (global[i] == 0) return Status::Ok();  // empty tensor: nothing to do
    l[i] = local[i] == 0 ? 1 : local[i];
    groups[i] = (global[i] + l[i] - 1) / l[i];
    invocations *= l[i];
    if (l[i] > static_cast<size_t>(max_group_size_[i])) {
      return Status::Error("gl: kernel '" + kernel.name() + "': local size " + std::to_string(l[i]) +
                           " above the device limit " + std::to_string(max_group_size_[i]));
    }
  }
  if (invocations > static_cast<size_t>(max_invocations_)) {
    return Status::Error("gl: kernel '" + kernel.name() + "': work-group of " + std::to_string(invocations) +
                         " invocations above the device limit " + std::to_string(max_invocations_));
  }
  const auto& k = static_cast<const GlKernel&>(kernel);
  GlScope scope(*ctx_, /*keep_current=*/true);  // see the header: launches keep the context current
  SDGPU_RETURN_IF_ERROR(scope.status());
  const GlApi& a = api();
  Program* p = nullptr;
  SDGPU_RETURN_IF_ERROR(ProgramFor(k.library(), k.source(), l, &p));
  // The argument list is checked against the program once per distinct list shape.
  std::string signature;
  signature.reserve(args.items().size());
  for (const gpu::Arg& arg : args.items()) {
    signature += arg.kind == gpu::Arg::Kind::kBuffer ? 'b' : arg.kind == gpu::Arg::Kind::kInt ? 'i' : 'f';
  }
  if (signature != p->checked_signature) {
    SDGPU_RETURN_IF_ERROR(CheckSignature(kernel.name(), *p, args));
    p->checked_signature = signature;
  }
  // Redundant state changes are skipped (program, SSBO bindings, uniform values: GL keeps them, and this
  // context is ours alone), which matters when a step is thousands of small launches.
  if (current_program_ != p->id) {
    a.glUseProgram(p->id);
    current_program_ = p->id;
  }
  GLuint binding = 0;
  GLint location = 0;
  const uint64_t launch = ++launches_;
  auto set_uniform = [&](const gpu::Arg& arg, int32_t value) {
    if (static_cast<size_t>(location) < p->uniform_types.size() && p->uniform_types[location] != 0 &&
        (!p->uniform_known[location] || p->uniform_bits[location] != value)) {
      if (arg.kind == gpu::Arg::Kind::kFloat) {
        a.glUniform1f(location, arg.f);
      } else {
        a.glUniform1i(location, value);
      }
      p->uniform_known[location] = true;
      p->uniform_bits[location] = value;
    }
    ++location;
  };
  for (const gpu::Arg& arg : args.items()) {
    if (arg.kind == gpu::Arg::Kind::kBuffer) {
      if (static_cast<GLint>(binding) >= max_ssbo_blocks_ || binding >= bound_.size()) {
        return Status::Error("gl: kernel '" + kernel.name() + "' needs more storage buffers than the device's " +
                             std::to_string(max_ssbo_blocks_));
      }
      const auto* buf = static_cast<const GlBuffer*>(arg.buffer);
      if (buf != nullptr) buf->set_last_launch(launch);
      const uint64_t serial = buf != nullptr ? buf->serial() : 0;
      const bool ranged = buf != nullptr && buf->ranged();
      size_t start = 0;  // bytes: the range's start (0: the whole buffer)
      // the launcher's element size where the kernel switches a parameter's storage at run time (gpu::Arg)
      const size_t unit = arg.elem_bytes > 0                    ? static_cast<size_t>(arg.elem_bytes)
                          : binding < p->elem_bytes.size() ? static_cast<size_t>(p->elem_bytes[binding])
                                                           : 4;
      if (ranged) {
        // A tensor root starts at a 64-byte planner offset: the range starts at it where the alignment divides 64,
        // else within its first alignment unit (max_tensor_bytes() leaves that room); a view or an operand inside
        // an op's scratch ends within its root's or max_operand_bytes_anywhere() of the range's start. The
        // alignment (>= 16) is a multiple of every element size.
        start = static_cast<size_t>(arg.i) * unit / static_cast<size_t>(ssbo_align_) * static_cast<size_t>(ssbo_align_);
      }
      if (bound_[binding] != std::make_pair(serial, start)) {
        if (ranged) {
          const size_t size = std::min<size_t>(buf->alloc() - start, static_cast<size_t>(max_ssbo_size_));
          a.glBindBufferRange(GL_SHADER_STORAGE_BUFFER, binding, buf->id(), static_cast<GLintptr>(start),
                              static_cast<GLsizeiptr>(size));
        } else {
          a.glBindBufferBase(GL_SHADER_STORAGE_BUFFER, binding, buf != nullptr ? buf->id() : 0);
        }
        bound_[binding] = {serial, start};
      }
      ++binding;
      const int32_t rebased = arg.i - static_cast<int32_t>(start / unit);
      set_uniform(arg, rebased);
      continue;
    }
    int32_t bits = arg.i;  // the int
    if (arg.kind == gpu::Arg::Kind::kFloat) std::memcpy(&bits, &arg.f, sizeof(bits));
    set_uniform(arg, bits);
  }
  SDGPU_RETURN_IF_ERROR(GlCheck(a, ("binding the arguments of '" + kernel.name() + "'").c_str()));
  bool split = false;
  for (int i = 0; i < 3; ++i) split = split || groups[i] > static_cast<size_t>(max_group_count_[i]);
  if (split && !p->has_group_base) {
    return Status::Error("gl: kernel '" + kernel.name() + "' needs a split dispatch but does not use sd_group_base");
  }

  std::shared_ptr<TimerState> timer;
  Clock::time_point t0;
  if (options_.profiling && timings != nullptr) {
    timer = std::make_shared<TimerState>();
    if (timer_query_) {
      if (free_queries_.empty()) {
        GLuint q = 0;
        a.glGenQueriesEXT(1, &q);
        SDGPU_RETURN_IF_ERROR(GlCheck(a, "glGenQueriesEXT"));
        all_queries_.push_back(q);
        free_queries_.push_back(q);
      }
      timer->query = free_queries_.back();
      free_queries_.pop_back();
      a.glBeginQueryEXT(GL_TIME_ELAPSED_EXT, timer->query);
    } else {
      a.glFinish();  // time this launch alone
      t0 = Clock::now();
    }
  }
  // One dispatch unless a dimension has more work-groups than GL_MAX_COMPUTE_WORK_GROUP_COUNT allows; then
  // several, each telling the shader its first group through sd_group_base (shaders/common.glsl).
  for (size_t z0 = 0; z0 < groups[2]; z0 += max_group_count_[2]) {
    for (size_t y0 = 0; y0 < groups[1]; y0 += max_group_count_[1]) {
      for (size_t x0 = 0; x0 < groups[0]; x0 += max_group_count_[0]) {
        const std::array<GLuint, 3> base = {static_cast<GLuint>(x0), static_cast<GLuint>(y0),
                                            static_cast<GLuint>(z0)};
        if (base != p->group_base) {
          a.glUniform3ui(kGroupBaseLocation, base[0], base[1], base[2]);
          p->group_base = base;
        }
        a.glDispatchCompute(static_cast<GLuint>(std::min<size_t>(max_group_count_[0], groups[0] - x0)),
                            static_cast<GLuint>(std::min<size_t>(max_group_count_[1], groups[1] - y0)),
                            static_cast<GLuint>(std::min<size_t>(max_group_count_[2], groups[2] - z0)));
      }
    }
  }
  // The next dispatch and the next upload/map must see these writes (see barrier_bits_).
  a.glMemoryBarrier(barrier_bits_);
  // A timer query ends before gl_finish_each's glFinish: after it, the query would also time the host's wake-up and
  // the End command's submission (NVIDIA: a UNet step's queries summed 1.2 s for a 78 ms invoke). With the finish,
  // the next launch's query starts on an idle GPU: its own time, not the drain of the launches before it.
  if (timer && timer_query_) {
    a.glEndQueryEXT(GL_TIME_ELAPSED_EXT);
    pending_timers_.push_back(timer);
  }
  if (finish_each_ || (timer && !timer_query_)) {
    a.glFinish();
    finished_launches_ = launches_;
  }
  if (timer) {
    if (!timer_query_) {  // the host clock around this launch alone (the finish above)
      timer->ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      timer->resolved = true;
    }
    timings->push_back(std::make_unique<GlTimer>(kernel.name(), timer));
  }
  return GlCheck(a, ("glDispatchCompute(" + kernel.name() + ")").c_str());
}

Status GlDevice::ResolveTimers() const {
  const GlApi& a = api();
  for (const std::shared_ptr<TimerState>& t : pending_timers_) {
    GLuint64 ns = 0;
    a.glGetQueryObjectui64vEXT(t->query, GL_QUERY_RESULT_EXT, &ns);
    t->ms = static_cast<double>(ns) * 1e-6;
    t->resolved = true;
    free_queries_.push_back(t->query);
    t->query = 0;
  }
  pending_timers_.clear();
  GLint disjoint = 0;
  a.glGetIntegerv(GL_GPU_DISJOINT_EXT, &disjoint);
  if (disjoint) logger_.Warning("gl: GL_GPU_DISJOINT_EXT was set: this profile's launch times are unreliable");
  return GlCheck(a, "reading the timer queries");
}

Status GlDevice::Flush() const {
  GlScope scope(*ctx_, true);
  SDGPU_RETURN_IF_ERROR(scope.status());
  const GlApi& a = api();
  a.glFlush();
  return GlCheck(a, "glFlush");
}

namespace {
class GlFence final : public gpu::Fence {
 public:
  GlFence(const GlContext& ctx, const GlApi& api, GLsync sync) : ctx_(ctx), api_(api), sync_(sync) {}
  ~GlFence() override {
    GlScope scope(ctx_, true);
    if (scope.status().ok()) api_.glDeleteSync(sync_);
  }
  GlFence(const GlFence&) = delete;
  GlFence& operator=(const GlFence&) = delete;
  Status Wait() const override {
    GlScope scope(ctx_, true);
    SDGPU_RETURN_IF_ERROR(scope.status());
    return WaitForSync(api_, sync_, "glClientWaitSync");
  }

 private:
  const GlContext& ctx_;
  const GlApi& api_;
  GLsync sync_;
};
}  // namespace

Status GlDevice::Mark(std::unique_ptr<gpu::Fence>* out) const {
  GlScope scope(*ctx_, true);
  SDGPU_RETURN_IF_ERROR(scope.status());
  const GlApi& a = api();
  GLsync sync = a.glFenceSync(GL_SYNC_GPU_COMMANDS_COMPLETE, 0);
  SDGPU_RETURN_IF_ERROR(GlCheck(a, "glFenceSync"));
  if (sync == nullptr) return Status::Error("gl: glFenceSync returned no sync object");
  *out = std::make_unique<GlFence>(*ctx_, a, sync);
  return Status::Ok();
}

Status GlDevice::Finish() const {
  GlScope scope(*ctx_, false);
  SDGPU_RETURN_IF_ERROR(scope.status());
  const GlApi& a = api();
  a.glFinish();
  SDGPU_RETURN_IF_ERROR(GlCheck(a, "glFinish"));
  finished_launches_ = launches_;
  DropFencesThrough(launches_);
  return pending_timers_.empty() ? Status::Ok() : ResolveTimers();
}

}  // namespace sdgpu::gl
