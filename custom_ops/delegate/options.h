// Delegate options as passed through the external-delegate string dictionary
// (Python: load_delegate(path, {"backend": "cpu", ...})).
//
//   backend            "cpu" (default: Sd* ops only, builtins stay on XNNPACK), "opencl" or "gl" (whole graph on the GPU)
//   log_level          silent|error|warning (default)|info|debug, or 0..4
//   num_threads        CPU worker threads incl. the caller: 1..256, or "auto"
//                      (default: hardware concurrency capped at 8)
//   attention_block_q  SdAttention CPU query-tile rows (default 64, 1..1024)
//   attention_block_k  SdAttention CPU key-tile columns (default 256, 1..4096; 256 keeps SD1.5 16x16 self-attention
//                      in one tile, where partial_softmax would otherwise recompute scores)
//   profile_path       opencl: write per-node GPU kernel times (OpenCL events) as JSON here
//   cache_dir          gpu backends: the persistent cache folder shared by every GPU backend and process
//                      (common/disk_cache.h): compiled programs and measured GEMM tile choices, so a later start skips
//                      that set-up. "" (default) = $XDG_CACHE_HOME/sdgpu or ~/.cache/sdgpu; "none" = no cache.
//   cache_max_mb       gpu backends: size cap of that folder in MiB (1..1048576, default 1024); a store that exceeds
//                      it deletes the least recently used entries.
//   opencl_cache_dir   deprecated alias of cache_dir (one warning; an error when both are set and differ)
//   cache_programs     opencl: "auto" (default) stores compiled programs' binaries for GPUs and accelerators, not
//                      for CPU devices (PoCL generates every kernel's machine code to hand out a binary, and keeps its
//                      own cache of launched kernels); "1" always, "0" never (nor reads them). GL programs are
//                      stored whenever the driver offers binary formats.
//   setup_progress     gpu backends: "1" (default) prints a progress line every few seconds while a set-up phase
//                      (compiling, preparing weights, the first inference) runs longer than 3 s; "0" keeps the log
//                      quiet (sdlite's own progress bar reads the same counters from the stats).
//   tuning_budget_ms   gpu backends: host time the GEMM tile tuner (gemm_autotune) may spend per delegate, 0..3600000
//                      (default 1000). Shapes left when it runs out (or in progress then) take the cost model's
//                      plan, cached as their choice under that budget: a later start with the same or a smaller
//                      budget reuses it and tunes nothing, one with a larger budget tunes them. Choices read from
//                      the cache cost nothing. Below 30000 the tuner only times kernels the model has already built
//                      (a candidate's compile costs seconds).
//   weights_fp16       gpu backends: "1" stores the constant weights the GEMM/conv/Winograd ops pack
//                      (FULLY_CONNECTED, CONV_2D filters, Winograd U) as half -- half the device weight
//                      memory; arithmetic stays fp32 (relative error ~1e-3). "0" (default) keeps float32.
//   release_weight_pages  gpu backends: "1" (default) gives back the host pages of the model's weights once the
//                      device holds what was made from them (common/host_pages.h: read-only shared file mappings
//                      only, as LiteRT maps a model file; a later read faults them back in): SD1.5's fp32 UNet file
//                      no longer stays in the resident set; and makes the float32 copies of an fp16 / int8 model's
//                      large weights one at a time (GpuPartition::FoldedConstant). "0" leaves the pages mapped and
//                      folds every weight at load (A/B measurements).
//   activations_fp16   gpu backends: "1" stores the partition's float tensors (activations, and the float constants
//                      ops read like them) as half: half the arena's bytes and of the memory traffic the
//                      paper names as the bottleneck; arithmetic stays fp32, inputs and outputs stay float32
//                      (converted at the partition's edge). The coarsest level of an image model keeps float32
//                      storage (gpu/storage_islands.h). A node whose kernels keep float storage runs on the
//                      CPU, with the reason logged. "0" (default) keeps float32.
//   attention_key_splits  gpu backends: key ranges per SdAttention query block (flash, row-wise tilings), merged
//                      by one more launch; "0" (default) = the measured rule (AttnKeySplits, ops/attention/gpu.cc),
//                      "1" = never, "2".."64" = that many (capped at one range per staged key tile).
//   gemm_tiles         gpu backends, benchmarks and tests: "BMxBN[nTHREADS|tc][/splits]" (e.g. "64x64n128/2") forces
//                      that GEMM/conv tile config and split count on every tiled GEMM (no tuning, no skinny swap);
//                      "tc" names a 3xTF32 tensor-core config (opencl, NVIDIA; GEMMs whose operands it takes);
//                      "" (default) = the cost model / tuner. Malformed is an error here; a config the backend
//                      lacks is an error when the first GEMM is built.
//   attention_tiling   gpu backends, benchmarks and tests: an SdAttention tiling suffix (e.g. "r40", "h80",
//                      "dyn"; "legacy" = the fallback kernels) tried first for every attention whose head dim it
//                      fits (ignored where the device lacks its local memory, work-group size or kernel); "" (default)
//                      = the per-shape rule (gpu/attention_tiling.cc kAttnTilings).
//   layer_norm_fold    gpu backends: how a LayerNorm folded into the FULLY_CONNECTED that reads it runs: "twin" (default)
//                      = inside the GEMM (its _ln kernels), "rows" = one layer_norm_rows launch into the FC's scratch,
//                      then the plain GEMM; "auto" = the tuner times both (gemm_autotune; untuned: "twin"). On the
//                      H200 auto gained <= 1.5% on SD's b2 GEGLUs and its picks lost 11% on b1's 32x32 GEGLUs
//                      (the tuner's spread; BENCHMARKS.md), hence twin.
//   tensor_cores       opencl: "3xtf32" runs on NVIDIA tensor cores (Ampere or newer), with 3xTF32 products, an
//                      fp32-accurate emulation (each product a*b as big*big + big*small + small*big of TF32 halves,
//                      fp32 accumulation): SdAttention's long self-attention at head dim 40 (SD1.5's 64x64 level,
//                      ~1.5x there) and 80 (32x32, grids of more than one wave) and the tiled GEMMs and convolutions
//                      (FULLY_CONNECTED, BATCH_MATMUL, CONV_2D, Winograd's batched GEMM: gemm_tc.cl, 1.4-1.7x at
//                      SD1.5's FC shapes) as tuner candidates. H200 UNet step
//                      14-18% faster, full-UNet parity ~3e-5 against ~2e-5 in fp32 (BENCHMARKS.md). "fp64"
//                      runs the same ops on the FP64 tensor cores (Hopper or newer: sm_90's mma.sync m16n8k8 .f64):
//                      fp32 operands converted to double exactly, exact products, fp64 sums rounded to fp32 once
//                      (the attention's softmax stays fp32), so the products are at least as accurate as fp32 FMAs;
//                      gemm_d64x64 / conv_d64x64 and attn_flash_f40 / f80. H200: UNet step 7-12% faster, full-UNet
//                      parity 1.1e-5 against 2.1e-5 with fp32 FMAs (BENCHMARKS.md). "auto" (default) = "fp64"
//                      where the device built those kernels (NVIDIA, compute capability >= 9), else "off". "off" = fp32
//                      FMA arithmetic everywhere. Without NVIDIA's OpenCL (no inline PTX) the fp32 kernels run.
//   weight_uploads     opencl: how the first invoke's set-up uploads the model's weights (opencl/host_staging_ring.h):
//                      "ring" = through host-visible staging slots (CL_MEM_ALLOC_HOST_PTR, mapped once) that all host
//                      cores fill, each written to the device from there (page-locked on a discrete GPU: DMA at its
//                      own rate, overlapping the next fill); "direct" = one write from the model's memory each (the
//                      driver copies through its own staging, on one core). "auto" (default) = "ring" on a device
//                      without unified host memory (a discrete GPU), else "direct" (a phone's or PoCL's device reads
//                      host-visible memory as its own, so the ring would only add a copy).
//   gl_finish_each, gl_barrier, gl_plain_buffers, gl_nv_pragmas, gl_kernel_alias, gl_dump_dir
//                      gl, debugging a driver-specific parity failure (not for production; backends/gl/gl_device.h):
//                      "1" = glFinish after every launch; "minimal" = SHADER_STORAGE | BUFFER_UPDATE barrier bits only
//                      ("all", default); "1" = no readonly / writeonly qualifiers; "0" = the sources' `#pragma
//                      optionNV` lines dropped (default "1"); "a=b,c=d" = kernel b compiled where an op asks for a;
//                      a folder to write each compiled program's source and driver binary into.
//   gl_limits          gl, tests and tuning: "shared_bytes=N,invocations=N,group_size_x=N,storage_blocks=N,
//                      storage_block_bytes=N,compute_units=N,pbuffer=1" (any subset; group_size_x: a work-group's
//                      largest x size, GL_MAX_COMPUTE_WORK_GROUP_SIZE[0], which GL ES 3.1 lets be below the invocation
//                      limit; pbuffer=1: the context made current on a 1x1 pbuffer
//                      surface, as on a display without EGL_KHR_surfaceless_context such as the Android
//                      emulator's): the device reports a smaller device's limits (the first four
//                      capped at N, never above the driver's: e.g. GL ES 3.1's minimums 16384 / 128 / 4 / 2^24) so the
//                      planners choose what such a device can run, and N compute units (GL has no query for them; planners that size grids by them, e.g.
//                      the Winograd GEMM's gemm_s16x128, then act as on OpenCL).
//   opencl_limits      opencl, tests and tuning: "max_alloc_bytes=N": the device reports at most N bytes for one buffer
//                      (CL_DEVICE_MAX_MEM_ALLOC_SIZE, capped, never raised; Qualcomm's Adreno drivers report ~1 GB),
//                      so a partition's arena is planned in buffers of at most N bytes and a larger tensor's node runs
//                      on the CPU kernels, as on such a device.
//
// Unknown keys are an error: a typo must not silently fall back to defaults.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/status.h"

namespace sdgpu {

// layer_norm_fold (see above).
enum class LnFold { kAuto, kTwin, kRows };
// gl_limits (see above); 0 = the driver's value.
struct GlLimits {
  int shared_bytes = 0;
  int invocations = 0;
  int group_size_x = 0;
  int storage_blocks = 0;
  int storage_block_bytes = 0;
  int compute_units = 0;
  int pbuffer = 0;  // 1: the context on a 1x1 pbuffer, as on a display without EGL_KHR_surfaceless_context
};
// A gl_limits value: comma-separated key=N pairs (N >= 1) of the keys above. False when `text` is malformed.
bool ParseGlLimits(const std::string& text, GlLimits* out);
// opencl_limits (see above); 0 = the driver's value.
struct OpenClLimits {
  long long max_alloc_bytes = 0;
};
// An opencl_limits value: "max_alloc_bytes=N", N >= 1. False when `text` is malformed.
bool ParseOpenClLimits(const std::string& text, OpenClLimits* out);
// tensor_cores (see above).
enum class TensorCores { kAuto, kOff, k3xTf32, kFp64 };
// cache_programs (see above).
enum class CachePrograms { kAuto, kAlways, kNever };
// weight_uploads (see above).
enum class WeightUploads { kAuto, kRing, kDirect };

struct DelegateOptions {
  std::string backend = "cpu";
  LogLevel log_level = LogLevel::kWarning;
  int num_threads = 0;  // 0 = auto
  int attention_block_q = 64;
  int attention_block_k = 256;
  std::string profile_path;      // opencl: per-node kernel times (JSON) written after each invoke
  std::string cache_dir;         // gpu: persistent cache folder ("" = the per-user default, "none" = off)
  bool cache_dir_from_alias = false;  // set through the deprecated opencl_cache_dir (SdDelegate warns once)
  int cache_max_mb = 1024;       // gpu: the cache folder's size cap
  int tuning_budget_ms = 1000;   // gpu: host time the tile tuner may spend per delegate
  CachePrograms cache_programs = CachePrograms::kAuto;  // opencl: which compiled programs' binaries are stored
  bool setup_progress = true;    // gpu: progress lines during long set-up phases
  bool weights_fp16 = false;     // gpu: packed constant weights stored as half (vload_half), fp32 math
  bool activations_fp16 = false; // gpu: float tensors of the partition stored as half, fp32 math
  bool release_weight_pages = true;  // gpu: model weight pages given back once on the device
  bool gemm_autotune = true;     // gpu: time the GEMM/conv tile configs per shape at the first run (TileTuner)
  bool fuse_epilogues = true;    // gpu: residual ADDs / gated GELUs / LayerNorms / GroupNorm prologues folded
  int attention_key_splits = 0;  // gpu: SdAttention key ranges per query block (0 = auto, 1 = off, 2..64)
  std::string gemm_tiles;        // gpu: forced tile config "BMxBN[nTHREADS|tc][/splits]" ("" = planner)
  std::string attention_tiling;  // gpu: forced SdAttention tiling suffix ("" = per-shape rule)
  LnFold layer_norm_fold = LnFold::kTwin;  // gpu: folded LayerNorm inside the GEMM, as its own launch, or timed
  TensorCores tensor_cores = TensorCores::kAuto;  // opencl: FP64 tensor cores where built (sm_90), 3xTF32, or fp32
  WeightUploads weight_uploads = WeightUploads::kAuto;  // opencl: set-up uploads through a host-visible ring or not
  // gl debugging knobs (see above)
  bool gl_finish_each = false;
  bool gl_minimal_barrier = false;
  bool gl_plain_buffers = false;
  bool gl_nv_pragmas = true;
  std::string gl_kernel_alias;
  std::string gl_dump_dir;
  GlLimits gl_limits;
  OpenClLimits opencl_limits;
};

// A gemm_tiles value: BMxBN[nTHREADS|tc][/splits] (threads default 256, splits 1, 2, 4, 8 or 16; default 1). False
// when `text` is malformed.
struct GemmTiles {
  int bm = 0, bn = 0, threads = 256, splits = 1;
  bool tc = false;  // "BMxBNtc": a tensor-core config (gemm_tc.cl, 128 threads), forced even without tensor_cores
};
bool ParseGemmTiles(const std::string& text, GemmTiles* out);

Status ParseDelegateOptions(const char* const* keys, const char* const* values, size_t count,
                            DelegateOptions* out);

// num_threads with "auto" resolved.
int ResolvedNumThreads(const DelegateOptions& options);

// The cache folder cache_dir names: "" -> $XDG_CACHE_HOME/sdgpu, else $HOME/.cache/sdgpu (none of them set: no
// cache); "none" -> "" (off); anything else as given.
std::string ResolvedCacheDir(const DelegateOptions& options);

// Options that parse but cannot do their job (a cache_dir that cannot be written: programs are then compiled at
// every start). One line each; the delegate logs them when it is created, sdgpu_check_options returns them.
std::vector<std::string> OptionWarnings(const DelegateOptions& options);

}  // namespace sdgpu
