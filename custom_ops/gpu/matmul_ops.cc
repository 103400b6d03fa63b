// GEMM-shaped ops (kernels in backends/<backend>/kernels/gemm*.*).
//
// Tiled kernels (gpu/kernels/gemm_tiled.kern, every GPU backend), work-group 16 x TY (TY = threads / 16: 16, or 8
// for the `n128` instances), global = (ceil(N/BN)*16, ceil(M/BM)*TY, z):
//   gemm_tBMxBN(C, co, int scb, int scs, int scm, A, ao, int sab, int sam, int sak, B, bo, int sbb, int sbk,
//               int sbn, int b_half, bias, biaso, int has_bias, int M, int N, int K, float alpha, int act,
//               int splits, int k_split)                                   z = batch * splits
//   conv_tBMxBN(Y, yo, int scs, X, xo, B, bo, int sbk, int sbn, int b_half, bias, biaso, int has_bias, int H,
//               int Wd, int Ci, int OH, int OW, int Co, int KH, int KW, int sh, int sw, int dh, int dw, int ph,
//               int pw, int M, int act, int splits, int k_split)           z = splits; needs Ci % 16 == 0
//   gemm_splitk_reduce(C, co, int scb, int scm, P, po, int splits, bias, biaso, int has_bias, int M, int N,
//                      int act)                                            global = (N, M, batch), local 16 x 16
//                                                                          (16 x 8 on 128-invocation devices)
// each followed by the residual epilogue's R, ro, int rrows, int rsm, with BMxBN in {64x64, 128x64, 128x128}
// (256 threads) and {64x64n128, 32x64n128, 128x64n128, 64x128n128, 32x128n128} (128 threads), plus the GEMM-only
// skinny gemm_t16x64 (same parameters; rows M <= 16 per tile: the Winograd GEMMs of small maps, where T = 16 tiles
// would leave 3/4 of a 64-row tile idle, and FCs of a few rows; weight-bandwidth bound by design, see
// gemm_tiled.kern). A config whose kernel the device lacks, or whose work-group or local memory exceeds the device's
// (GL ES 3.1 guarantees only 128 invocations and 16 KiB), is skipped. Winograd's tile-major U can also run on
// gemm_s16x128 (same parameters, float4 columns; UseSkinny4), which is not a tile config of the planner.
// With tensor_cores=3xtf32 (or gemm_tiles "BMxBNtc") the 3xTF32 tensor-core configs gemm_x / conv_x {128x128, 128x64,
// 64x64} (backends/opencl/nvidia/gemm_tc.cl, NVIDIA only, 128 threads, same parameters and twins) join the candidates of GEMMs whose A has
// a contiguous k axis and B a contiguous n or k axis in fp32 (TensorCoreGemm), and of every tiled convolution
// without half weights. With tensor_cores=fp64 the FP64 tensor-core config gemm_d64x64 / conv_d64x64 (NVIDIA sm_90:
// exact products, fp64 sums, at least fp32-accurate) takes their place.
// Constant weights (FULLY_CONNECTED, CONV_2D filters) are re-laid out once as a K x N row-major matrix (float32,
// or half with weights_fp16) so B tiles load along N; non-constant operands are read in place through their strides.
// Activation storage (delegate option activations_fp16, Device::act_half): A, C, the residual and the split-K
// partials are the kernels' ACT data, so offsets come from TensorRef::elem_offset() and the partials take
// dev.act_bytes() per element of scratch; a non-constant B (or filter) is then half storage, read through b_half bit
// 0; a bias input stays float32 (float32_inputs_); the tensor-core configs (fp32 only) are never candidates.
// GemmShape::float_ac (Winograd's V and M) keeps A, C and the partials float32 whatever the storage: b_half bit 2.
//
// Tuning knob (benchmarks and tests only): the delegate option gemm_tiles=BMxBN[nTHREADS|tc][/splits] forces one tile
// config (and split count) for every tiled GEMM/conv instead of the cost model below.
#include "gpu/matmul_ops.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "common/half.h"
#include "delegate/options.h"
#include "gpu/builtin_params.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

constexpr int kTiledBk = 16;  // GT_BK of the tiled kernels: K step, split granularity, conv Ci multiple
constexpr const char* kSkinny4Kernel = "gemm_s16x128";  // UseSkinny4's kernel
constexpr int kSkinny4MinKSplit = 128;                  // UseSkinny4: the shallowest K slice it splits into (one A chunk)
constexpr int kSkinny4Threads = 128;

// Local memory of the kernels (bytes), as gemm_tiled.kern / gemm_tc.cl declare it; an implicit-GEMM conv adds its
// row table (BM int4s, ConvLocalBytes). gemm_tBMxBN: the A and B tiles of GT_DECLS, GT_BK x (BM + GT_PAD) and
// GT_BK x (BN + GT_PAD) floats.
constexpr int TiledLocalBytes(int bm, int bn) { return 4 * kTiledBk * (bm + 4 + bn + 4); }
// gemm_xBMxBN / gemm_dBMxBN: STAGES ring slots of an A tile [BM][GX_AP] and a B tile (KN [16][BN + 8] or NK
// [BN][GX_AP], whichever is larger), GX_AP = 20.
constexpr int TcLocalBytes(int bm, int bn, int stages) {
  return 4 * stages * (bm * 20 + (bn * 20 > 16 * (bn + 8) ? bn * 20 : 16 * (bn + 8)));
}
// gemm_t16x64: the A tile As4[16 * GS_AST] (GS_AST = 17 float4s) and the lanes' partials red[4 * 16 * 64].
constexpr int kSkinnyLocalBytes = 16 * 17 * 16 + 4 * 16 * 64 * 4;
// gemm_s16x128: GV_LDS4(128, 4, 128, 16) float4s (the lanes' partials, 4 x 16 x 128 floats).
constexpr int kSkinny4LocalBytes = 4 * 16 * 128 * 4;

// Tile configs of the tiled kernels, largest first. `speed`: relative throughput per work-group tile,
// fitted on the H200 (bench/opencl_gemm_bench.py, every config forced at the SD1.5 shapes). 128x128
// holds 64 accumulators per work-item, which costs occupancy: forced, it was slower than 128x64 at every
// SD1.5 FC and conv shape measured (FF in 4096x2560x320: 0.252 vs 0.215 ms; 256x10240x1280: 0.336 vs
// 0.247; VAE 128x128x512 3x3: 2.35 vs 2.17), so it ranks below 128x64 and is only picked when that
// config's padding or fill is worse.
struct TileConfig {
  int bm, bn, threads;
  double speed;
  const char* gemm;
  const char* conv;  // nullptr: no implicit-GEMM conv instance
  int local_bytes;   // local memory of the GEMM kernel (the conv kernel adds its row table)
  bool tc = false;   // tensor cores (gemm_tc.cl): only where TensorCoreGemm / TensorCoresWanted allow, or forced
  bool fp64 = false;  // a tc config of the FP64 tensor cores: a candidate under tensor_cores=fp64 only (3xTF32 ones
                      // never then), so a forced "BMxBNtc" names the option's form
};
// The skinny config's speed reflects one FMA per local read (no register blocking along m): it only
// wins where the 64-row tiles would mostly compute padding (M <= ~32).
constexpr TileConfig kTileConfigs[] = {
    {128, 128, 256, 0.7, "gemm_t128x128", "conv_t128x128", TiledLocalBytes(128, 128)},
    {128, 64, 256, 0.8, "gemm_t128x64", "conv_t128x64", TiledLocalBytes(128, 64)},
    {64, 64, 256, 0.6, "gemm_t64x64", "conv_t64x64", TiledLocalBytes(64, 64)},
    {128, 64, 128, 0.5, "gemm_t128x64n128", "conv_t128x64n128", TiledLocalBytes(128, 64)},
    {64, 128, 128, 0.5, "gemm_t64x128n128", "conv_t64x128n128", TiledLocalBytes(64, 128)},
    {64, 64, 128, 0.5, "gemm_t64x64n128", "conv_t64x64n128", TiledLocalBytes(64, 64)},
    {32, 64, 128, 0.4, "gemm_t32x64n128", nullptr, TiledLocalBytes(32, 64)},
    // 4x8 per work-item: 32 FMAs per 3 local float4 reads (4x4: 16 per 2), for 32-row problems (cfg batch 2's
    // Winograd GEMMs of the 16x16 and 8x8 maps); ranked below 32x64n128, so only the tuner picks it
    {32, 128, 128, 0.35, "gemm_t32x128n128", nullptr, TiledLocalBytes(32, 128)},
    {16, 64, 256, 0.35, "gemm_t16x64", nullptr, kSkinnyLocalBytes},
    // 3xTF32 on tensor cores (NVIDIA, tensor_cores=3xtf32); speeds from mma_lab.py --async on the H200 (BENCHMARKS
    // 1.4-1.7x the best fp32 tile at SD1.5's FC shapes)
    {128, 128, 128, 1.3, "gemm_x128x128", "conv_x128x128", TcLocalBytes(128, 128, 2), true},
    {128, 64, 128, 1.25, "gemm_x128x64", "conv_x128x64", TcLocalBytes(128, 64, 3), true},
    {64, 64, 128, 1.2, "gemm_x64x64", "conv_x64x64", TcLocalBytes(64, 64, 4), true},
    // FP64 tensor cores (NVIDIA sm_90, tensor_cores=fp64): exact products, fp64 sums; dmma_lab.py on the H200: 1.25-1.45x
    // the best fp32 tile at SD1.5's FC shapes
    {64, 64, 128, 1.3, "gemm_d64x64", "conv_d64x64", TcLocalBytes(64, 64, 4), true, true},
};
// Threads that keep a large GPU busy (two 256-thread work-groups resident per SM on a 132-SM
// H200); fewer leave SMs idle, which the cost model charges and split-K repairs. Smaller GPUs
// fill a fortiori.
constexpr double kFillThreads = 264.0 * 256.0;
constexpr int kMaxSplits = 16;
constexpr int kMinSplitK = 256;  // no split slice shorter than 16 K steps
// TileTuner's extra candidates: the unsplit plan and (free splits: the consumer sums the partials) K slices of at
// least 8 K steps, for the cheapest kFreeSplitConfigs configs.
constexpr int kMinFreeSplitK = 128;
constexpr int kFreeSplitConfigs = 3;
constexpr size_t kTuneScratchCap = size_t{16} << 20;  // split-K partials a tuning candidate may add
// Tuning time per candidate: kTuneRounds rounds (candidates interleaved), each of at least kTuneRuns launches and
// at least kTuneMinRoundS of host time (at most kTuneMaxRuns launches); the fastest round counts. Three launches
// of a 70 us kernel timed once on the host clock (an earlier tuner) picked a 7% slower Winograd GEMM plan in an
// H200 run: Finish latency and host jitter were a large share of the ~0.2 ms measured. Timing the rounds by OpenCL
// events instead (on a second, profiling-enabled queue; each launch's duration summed, or the round's span from
// first start to last end) made the graphs slower on the H200 (unfused b1 +1.4-3.5%: 16-row FCs dropped their
// split-K plans; BENCHMARKS.md), so the host clock stays.
constexpr int kTuneRuns = 3;
constexpr int kTuneMaxRuns = 64;
constexpr int kTuneRounds = 2;
constexpr double kTuneMinRoundS = 0.5e-3;
// A candidate whose program is not built yet compiles at its first launch: 0.3-3 s per program on NVIDIA's driver and
// up to ~17 s on PoCL for the 128-wide tiles, i.e. more than the whole default budget (1 s). On an H200 such
// compiles were most of every model's first inference, warm cache included (each start tuned a few more shapes and
// compiled their candidates: text encoder 5-7 s, UNet 2.5-11 s, VAE 3-13 s). Below this budget the tuner chooses
// among the kernels the model already built; a budget this large (an explicit tuning run) may compile candidates.
constexpr long long kTuneCompileBudgetNs = 30LL * 1000000000;
size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Relative time of one (config, splits) choice: padding waste / (tile speed x SM fill), plus
// the partial-sum traffic of split-K (~56 * splits / K of the GEMM time at the H200's
// FLOP/byte balance).
double PlanCost(const TileConfig& c, int64_t M, int64_t N, int64_t K, int64_t batch, int splits) {
  const int64_t tm = CeilDiv(M, c.bm), tn = CeilDiv(N, c.bn);
  const double pad = static_cast<double>(tm * c.bm * tn * c.bn) / static_cast<double>(M * N);
  const double fill = std::min(1.0, static_cast<double>(batch * tm * tn * splits) * c.threads / kFillThreads);
  const double split_cost = splits > 1 ? 1.0 + 56.0 * splits / static_cast<double>(K) : 1.0;
  return pad / (c.speed * fill) * split_cost;
}

// The tile config the delegate option gemm_tiles forces (Device::overrides), or nullptr: the planner decides.
const GemmTiles* ForcedTiles(const Device& dev) {
  const std::optional<GemmTiles>& t = dev.overrides().gemm_tiles;
  return t ? &*t : nullptr;
}

// Why the device cannot run a config's GEMM (or conv) kernel, or "" when it can: its work-group size or local memory
// exceeds the device's (the GL backend compiles the kernels from the same source for every device, and GL ES 3.1
// guarantees only 128 invocations and 16 KiB of shared memory).
std::string DoesNotFit(const Device& dev, const char* kernel, int threads, int local_bytes) {
  if (static_cast<size_t>(threads) > dev.max_work_group_size()) {
    return std::string(kernel) + " needs work-groups of " + std::to_string(threads) + " work-items, the device allows " +
           std::to_string(dev.max_work_group_size());
  }
  if (static_cast<size_t>(local_bytes) > dev.local_memory_bytes()) {
    return std::string(kernel) + " needs " + std::to_string(local_bytes) + " bytes of local memory, the device has " +
           std::to_string(dev.local_memory_bytes());
  }
  return "";
}
std::string ConfigDoesNotFit(const Device& dev, const TileConfig& c, bool conv) {
  return DoesNotFit(dev, conv ? c.conv : c.gemm, c.threads, c.local_bytes + (conv ? 16 * c.bm : 0));
}

// "64x64, 128x64, ..., 64x64n128, ..." as gemm_tiles spells the configs (error messages).
std::string ConfigNames() {
  std::string names;
  for (const TileConfig& c : kTileConfigs) {
    if (c.fp64) continue;  // spelled as the 3xTF32 config of its size
    names += (names.empty() ? "" : ", ") + std::to_string(c.bm) + "x" + std::to_string(c.bn) +
             (c.tc ? "tc" : c.threads == 256 ? "" : "n" + std::to_string(c.threads));
  }
  return names;
}

}  // namespace

// Weight packing runs once, at an op's first Enqueue, but SD1.5's UNet packs ~3.3 GB of FC / conv weights: one
// thread took 2.4 s of the H100 host's first inference (BENCHMARKS.md), so matrices from 2^20 elements are
// split into bands of whole 32-row cache blocks of the source over several host threads.
void TransposeInto(const float* src, int rows, int cols, float* dst) {
  constexpr int kBlock = 32;  // cache blocking
  const bool parallel = static_cast<size_t>(rows) * cols >= (size_t{1} << 20);
  HostParallelRanges(rows, kBlock, parallel, [&](int64_t rb0, int64_t rb1) {
    for (int r0 = static_cast<int>(rb0); r0 < rb1; r0 += kBlock) {
      for (int c0 = 0; c0 < cols; c0 += kBlock) {
        const int r1 = std::min(static_cast<int>(rb1), r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
        for (int r = r0; r < r1; ++r) {
          for (int c = c0; c < c1; ++c) dst[static_cast<size_t>(c) * rows + r] = src[static_cast<size_t>(r) * cols + c];
        }
      }
    }
  });
}

Status DeviceStaging::Upload(const Device& dev, const void* src, size_t bytes, const Buffer** out) {
  if (!buffer_ || buffer_->bytes() < bytes) {
    buffer_.reset();  // a launch still reading it keeps it alive (OpenCL / GL release deferred)
    SDGPU_RETURN_IF_ERROR(dev.CreateBuffer(bytes, &buffer_));
  }
  SDGPU_RETURN_IF_ERROR(dev.Upload(*buffer_, 0, bytes, src, /*blocking=*/false));
  *out = buffer_.get();
  return Status::Ok();
}

Status DeviceStaging::Scratch(const Device& dev, size_t bytes, const Buffer** out) {
  if (!scratch_ || scratch_->bytes() < bytes) {
    scratch_.reset();  // a launch still reading it keeps it alive (OpenCL / GL release deferred)
    SDGPU_RETURN_IF_ERROR(dev.CreateBuffer(bytes, &scratch_));
  }
  *out = scratch_.get();
  return Status::Ok();
}

Status PackedWeights::UploadHost(const Device& dev, const float* data) {
  if (!half_) {
    SDGPU_RETURN_IF_ERROR(UploadWeights(dev, data, elements_ * sizeof(float), &buffer_));
  } else {
    std::vector<uint16_t> h(elements_);
    {
      const SetupTimer timer(dev, Device::Setup::kWeightsHost);
      // On all host cores: one thread converted SD1.5's 1.6 G UNet weights in ~20 s of the H200's first run.
      HostParallelRanges(static_cast<int64_t>(elements_), int64_t{1} << 16, elements_ >= (size_t{1} << 20),
                         [&](int64_t b, int64_t e) {
                           for (int64_t i = b; i < e; ++i) h[static_cast<size_t>(i)] = HalfFromFloat(data[i]);
                         });
    }
    SDGPU_RETURN_IF_ERROR(UploadWeights(dev, h.data(), elements_ * sizeof(uint16_t), &buffer_));
  }
  dev.NoteWeightsPrepared(false);
  produce_ = nullptr;  // never needed again; what it captured (host sources, fold sums) goes with it
  device_produce_ = nullptr;
  return Status::Ok();
}

Status PackedWeights::Ensure(const Device& dev, DeviceStaging* staging) {
  if (buffer_) return Status::Ok();
  if (device_produce_) {
    DeviceStaging own;
    DeviceStaging* st = staging != nullptr ? staging : &own;
    std::unique_ptr<Buffer> buffer;
    {
      const SetupTimer timer(dev, Device::Setup::kWeightsUpload);
      if (!half_) {
        SDGPU_RETURN_IF_ERROR(dev.CreateBuffer(elements_ * sizeof(float), &buffer));
        SDGPU_RETURN_IF_ERROR(device_produce_(dev, *buffer, st));
      } else {
        const Buffer* values = nullptr;
        SDGPU_RETURN_IF_ERROR(st->Scratch(dev, elements_ * sizeof(float), &values));
        SDGPU_RETURN_IF_ERROR(device_produce_(dev, *values, st));
        const size_t pairs = (elements_ + 1) / 2;  // pack_half writes whole pairs
        SDGPU_RETURN_IF_ERROR(dev.CreateBuffer(pairs * 2 * sizeof(uint16_t), &buffer));
        // pack_half(y, yo, x, xo, int n)
        Args a;
        a.Buf(buffer.get(), 0).Buf(values, 0).Int(static_cast<int>(elements_));
        constexpr size_t kWg = 64;
        SDGPU_RETURN_IF_ERROR(dev.Launch(*pack_half_, a, {(pairs + kWg - 1) / kWg * kWg, 1, 1}, {kWg, 1, 1}, nullptr));
      }
    }
    dev.NoteWeightBytes(elements_ * (half_ ? sizeof(uint16_t) : sizeof(float)));
    dev.NoteWeightsPrepared(true);
    buffer_ = std::move(buffer);
    produce_ = nullptr;
    device_produce_ = nullptr;
    return Status::Ok();
  }
  float* host = nullptr;
  {
    const SetupTimer timer(dev, Device::Setup::kWeightsHost);
    host = dev.StagingFloats(elements_);
    produce_(host);
  }
  return UploadHost(dev, host);
}

namespace {

constexpr size_t kPackTile = 32, kPackRows = 8;  // transpose_tiled's TR_T x TR_ROWS work-group (copy.cl, copy_ops.cc)

}  // namespace

const Kernel* PackHalfKernel(const Device& dev) {
  const Kernel* k = nullptr;
  if (dev.max_work_group_size() < 64 || !dev.HasKernel("pack_half") || !dev.GetKernel("pack_half", &k).ok()) {
    return nullptr;
  }
  return k;
}

const Kernel* TransposeKernel(const Device& dev) {
  const Kernel* k = nullptr;
  if (dev.max_work_group_size() < kPackTile * kPackRows || !dev.HasKernel("transpose_tiled") ||
      !dev.GetKernel("transpose_tiled", &k).ok()) {
    return nullptr;
  }
  return k;
}

PackedWeights::DeviceProducer DeviceTranspose(const Kernel* transpose, const float* src, int rows, int cols) {
  if (transpose == nullptr || src == nullptr || static_cast<int64_t>(rows) * cols > INT_MAX) return nullptr;
  return [transpose, src, rows, cols](const Device& dev, const Buffer& dst, DeviceStaging* staging) -> Status {
    const Buffer* raw = nullptr;
    SDGPU_RETURN_IF_ERROR(staging->Upload(dev, src, sizeof(float) * static_cast<size_t>(rows) * cols, &raw));
    // transpose_tiled(y, yo, x, xo, int R, int C, int sb, int ld): y[c][r] = x[r * ld + c]
    Args a;
    a.Buf(&dst, 0).Buf(raw, 0).Int(rows).Int(cols).Int(0).Int(cols);
    const Dim3 global = {(static_cast<size_t>(cols) + kPackTile - 1) / kPackTile * kPackTile,
                         (static_cast<size_t>(rows) + kPackTile - 1) / kPackTile * kPackRows, 1};
    return dev.Launch(*transpose, a, global, {kPackTile, kPackRows, 1}, nullptr);
  };
}

namespace {

struct ScoredPlan {
  const TileConfig* config;
  int splits;
  double cost;
};

// Every (config, splits) the device can run for the problem, with its cost-model cost, cheapest first
// (only the forced one under gemm_tiles).
Status ScorePlans(const Device& dev, bool conv, int M, int N, int K, int batch, std::vector<ScoredPlan>* out,
                  bool tc) {
  const GemmTiles* forced = ForcedTiles(dev);
  out->clear();
  std::string unfit;  // why the last config the backend has does not fit the device
  for (const TileConfig& c : kTileConfigs) {
    if (c.tc && (!tc || c.fp64 != dev.overrides().tensor_cores_fp64)) continue;
    if (forced && (c.bm != forced->bm || c.bn != forced->bn || c.threads != forced->threads || c.tc != forced->tc)) {
      continue;
    }
    const char* name = conv ? c.conv : c.gemm;
    if (name == nullptr || !dev.HasKernel(name)) continue;  // config not on this backend
    const std::string why = ConfigDoesNotFit(dev, c, conv);
    if (!why.empty()) {
      unfit = why;
      continue;
    }
    for (int s = 1; s <= kMaxSplits; s *= 2) {
      if (forced && s != std::max(1, std::min(forced->splits, kMaxSplits))) continue;
      if (s > 1 && !forced && CeilDiv(K, s) < kMinSplitK) break;
      out->push_back({&c, s, PlanCost(c, M, N, K, batch, s)});
    }
  }
  if (out->empty()) {
    if (!unfit.empty()) return Status::Error("no tile config fits the device: " + unfit);
    return Status::Error(forced ? "gemm_tiles names no tile config of this backend (" + ConfigNames() + ")"
                                : std::string("the device has no tiled GEMM kernels"));
  }
  std::stable_sort(out->begin(), out->end(),
                   [](const ScoredPlan& x, const ScoredPlan& y) { return x.cost < y.cost; });
  return Status::Ok();
}

Status MakePlan(const Device& dev, bool conv, const ScoredPlan& sp, int M, int N, int K, int batch, TilePlan* out) {
  TilePlan p;
  p.bm = sp.config->bm;
  p.bn = sp.config->bn;
  p.threads = sp.config->threads;
  p.tc = sp.config->tc;
  p.k_split = static_cast<int>(CeilDiv(CeilDiv(K, sp.splits), kTiledBk) * kTiledBk);
  p.splits = std::max<int>(1, static_cast<int>(CeilDiv(K, std::max(1, p.k_split))));
  const int64_t partial = static_cast<int64_t>(batch) * p.splits * M * N;
  if (p.splits > 1 && partial > INT_MAX) {  // kernel offsets are int32
    p.splits = 1;
  }
  if (p.splits == 1) p.k_split = std::max(K, 1);
  SDGPU_RETURN_IF_ERROR(dev.GetKernel(conv ? sp.config->conv : sp.config->gemm, &p.kernel));
  if (p.splits > 1) {
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("gemm_splitk_reduce", &p.reduce));
    p.scratch_bytes = static_cast<size_t>(partial) * dev.act_bytes();  // written through C: activation storage
  }
  *out = p;
  return Status::Ok();
}

// Winners of earlier tunings, process-wide: "device|problem" -> (bm, bn, threads, splits, ln_rows, tc).
std::mutex& TuneMutex() {
  static std::mutex m;
  return m;
}
using TuneWinner = std::array<int, 6>;
std::map<std::string, TuneWinner>& TuneMemo() {
  static std::map<std::string, TuneWinner> memo;
  return memo;
}
TuneWinner WinnerOf(const TilePlan& p) {
  return {p.bm, p.bn, p.threads, p.splits, p.ln_rows ? 1 : 0, p.tc ? 1 : 0};
}

// A winner as a cache entry's payload ("tiles v1 bm bn threads splits ln_rows tc"), and back: the parse accepts
// exactly that form with values in range, anything else is a miss (Tune then checks it names a candidate).
std::string WinnerText(const TuneWinner& w) {
  std::string s = "tiles v1";
  for (int v : w) s += " " + std::to_string(v);
  return s;
}
bool ParseWinner(const std::string& text, TuneWinner* out) {
  TuneWinner w{};
  int used = 0;
  if (text.size() > 128 || std::sscanf(text.c_str(), "tiles v1 %d %d %d %d %d %d%n", &w[0], &w[1], &w[2], &w[3],
                                       &w[4], &w[5], &used) != 6 ||
      static_cast<size_t>(used) != text.size()) {
    return false;
  }
  for (int v : w) {
    if (v < 0 || v > 4096) return false;
  }
  *out = w;
  return true;
}

}  // namespace

Status CheckForcedTiles(const Device& dev) {
  const GemmTiles* forced = ForcedTiles(dev);
  if (forced == nullptr) return Status::Ok();
  for (const TileConfig& c : kTileConfigs) {
    if (c.tc == forced->tc && c.bm == forced->bm && c.bn == forced->bn && c.threads == forced->threads &&
        (!c.tc || c.fp64 == dev.overrides().tensor_cores_fp64)) {
      // a config this backend has but the device cannot run: the node says why (a backend without the kernel
      // falls back per op, see the header)
      const std::string why = dev.HasKernel(c.gemm) ? ConfigDoesNotFit(dev, c, false) : "";
      if (!why.empty()) return Status::Error("gemm_tiles config does not fit the device: " + why);
      return Status::Ok();
    }
  }
  return Status::Error("gemm_tiles names no tile config (" + ConfigNames() + ")");
}

bool ReadsTileMajorB(const Kernel& kernel) {
  return kernel.name() == "gemm_t16x64" || kernel.name() == kSkinny4Kernel;
}

bool UseSkinny4(const Device& dev, int M, int N, int K, int batch, TilePlan* plan, int max_splits) {
  const Kernel* kernel = nullptr;
  if (plan->kernel == nullptr || plan->kernel->name() != "gemm_t16x64" || ForcedTiles(dev) != nullptr ||
      dev.compute_units() <= 0 || !dev.HasKernel(kSkinny4Kernel) ||
      !DoesNotFit(dev, kSkinny4Kernel, kSkinny4Threads, kSkinny4LocalBytes).empty()) {
    return false;
  }
  const int64_t groups = static_cast<int64_t>(batch) * CeilDiv(M, 16) * CeilDiv(N, 128);
  const int64_t cus = dev.compute_units();
  int splits = 1, k_split = std::max(K, 1);
  if (groups < 2 * cus) {  // too few to fill the device: split K into one wave of 4 work-groups per compute unit
    splits = static_cast<int>(std::min<int64_t>(max_splits, 4 * cus / std::max<int64_t>(groups, 1)));
    splits = std::min(splits, K / kSkinny4MinKSplit);
    if (splits < 2) return false;
    k_split = CeilDiv(CeilDiv(K, splits), kTiledBk) * kTiledBk;  // whole k steps
    splits = CeilDiv(K, k_split);
  }
  if (!dev.GetKernel(kSkinny4Kernel, &kernel).ok()) return false;
  TilePlan p;
  p.bm = 16;
  p.bn = 128;
  p.threads = kSkinny4Threads;
  p.splits = splits;
  p.k_split = k_split;
  p.kernel = kernel;
  p.scratch_bytes = splits > 1 ? static_cast<size_t>(splits) * batch * M * N * dev.act_bytes() : 0;
  *plan = p;
  return true;
}

Status PlanTiles(const Device& dev, bool conv, int M, int N, int K, int batch, TilePlan* out, bool tc) {
  std::vector<ScoredPlan> scored;
  SDGPU_RETURN_IF_ERROR(ScorePlans(dev, conv, M, N, K, batch, &scored, tc));
  return MakePlan(dev, conv, scored.front(), M, N, K, batch, out);
}

Status PlanLnTiles(const Device& dev, int M, int N, int K, int batch, bool gated, TilePlan* out, bool tc) {
  std::vector<ScoredPlan> scored;
  SDGPU_RETURN_IF_ERROR(ScorePlans(dev, false, M, N, K, batch, &scored, tc));
  for (const ScoredPlan& sp : scored) {
    if (sp.splits != 1 || !dev.HasKernel(std::string(sp.config->gemm) + (gated ? "_gg_ln" : "_ln"))) continue;
    SDGPU_RETURN_IF_ERROR(MakePlan(dev, false, sp, M, N, K, batch, out));
    if (gated) SDGPU_RETURN_IF_ERROR(GatedTwin(dev, out));
    return LnTwin(dev, out);
  }
  return Status::Error("no unsplit tile plan with a LayerNorm twin");
}

bool TensorCoresWanted(const Device& dev) {
  if (dev.act_half()) return false;  // the tensor-core kernels (backends/opencl/nvidia/) keep float32 storage
  const GemmTiles* forced = ForcedTiles(dev);
  if (forced != nullptr) return forced->tc;
  if (dev.overrides().tensor_cores_3xtf32) return true;
  return dev.overrides().tensor_cores_fp64 && HasFp64TensorCoreKernels(dev);  // explicit fp64 too: only where built
}

bool HasFp64TensorCoreKernels(const Device& dev) { return dev.HasKernel("gemm_d64x64"); }

bool TensorCoreGemm(const Device& dev, const GemmShape& s, bool b_half) {
  return TensorCoresWanted(dev) && s.sak == 1 && (s.sbn == 1 || s.sbk == 1) && !b_half;
}

Status GatedTwin(const Device& dev, TilePlan* plan) {
  if (plan->kernel == nullptr) return Status::Error("no kernel planned");
  SDGPU_RETURN_IF_ERROR(dev.GetKernel(plan->kernel->name() + "_gg", &plan->kernel));
  if (plan->reduce != nullptr) SDGPU_RETURN_IF_ERROR(dev.GetKernel("gemm_splitk_reduce_gg", &plan->reduce));
  return Status::Ok();
}

Status TileTuner::UseGatedTwins(const Device& dev) {
  const Device::SpeculativeKernels speculative(dev);
  for (TilePlan& p : candidates_) SDGPU_RETURN_IF_ERROR(GatedTwin(dev, &p));
  return Status::Ok();
}

Status LnTwin(const Device& dev, TilePlan* plan) {
  if (plan->kernel == nullptr) return Status::Error("no kernel planned");
  if (plan->splits > 1 || plan->ln) return Status::Error("no LayerNorm twin for this plan");
  SDGPU_RETURN_IF_ERROR(dev.GetKernel(plan->kernel->name() + "_ln", &plan->kernel));
  plan->ln = true;
  return Status::Ok();
}

void TileTuner::UseLnTwins(const Device& dev, size_t rows_bytes, bool twins) {
  const Device::SpeculativeKernels speculative(dev);
  std::vector<TilePlan> kept;
  for (TilePlan p : candidates_) {
    if (twins && LnTwin(dev, &p).ok()) kept.push_back(p);
  }
  for (TilePlan p : rows_bytes > 0 ? candidates_ : std::vector<TilePlan>{}) {
    p.ln_rows = true;
    p.scratch_bytes += rows_bytes;
    kept.push_back(p);
  }
  candidates_ = kept.size() < 2 ? std::vector<TilePlan>{} : std::move(kept);
}

Status TileTuner::Init(const Device& dev, bool conv, int M, int N, int K, int batch, const std::string& key,
                       bool enabled, int free_splits, bool tc) {
  candidates_.clear();
  if (!enabled) return Status::Ok();
  const Device::SpeculativeKernels speculative(dev);  // candidates are compiled only if a tuning reaches them
  std::vector<ScoredPlan> scored;  // one entry under gemm_tiles: nothing to tune
  SDGPU_RETURN_IF_ERROR(ScorePlans(dev, conv, M, N, K, batch, &scored, tc));
  // Split partials are arena memory for the whole run: a candidate may add at most kTuneScratchCap beyond the cost
  // model's plan (the first candidate). The VAE's 512x512 Winograd GEMMs at 4 splits took its arena from 1.4 to
  // 2.4 GB (H200 kit, 9617e3c).
  auto within_cap = [&](const TilePlan& p) {
    return candidates_.empty() || p.scratch_bytes <= std::max(candidates_.front().scratch_bytes, kTuneScratchCap);
  };
  std::vector<const TileConfig*> seen;
  for (const ScoredPlan& sp : scored) {  // cheapest first: PlanTiles' plan, then each other config's best split
    if (std::find(seen.begin(), seen.end(), sp.config) != seen.end()) continue;
    seen.push_back(sp.config);
    TilePlan p;
    SDGPU_RETURN_IF_ERROR(MakePlan(dev, conv, sp, M, N, K, batch, &p));
    if (within_cap(p)) candidates_.push_back(p);
  }
  const bool forced = ForcedTiles(dev) != nullptr;
  if (forced) free_splits = 1;  // gemm_tiles fixes the split count too
  // The cheapest configs' unsplit plans (the cost model's split pick for a config can hide its faster unsplit
  // form: no reduce launch, no partials round trip) and, with free_splits, their 2.. free_splits-way splits.
  std::vector<int> extra_splits = {1};
  for (int s = 2; s <= free_splits && CeilDiv(K, s) >= kMinFreeSplitK; s *= 2) extra_splits.push_back(s);
  for (size_t i = 0; !forced && i < seen.size() && static_cast<int>(i) < kFreeSplitConfigs; ++i) {
    for (const int s : extra_splits) {
      TilePlan p;
      SDGPU_RETURN_IF_ERROR(MakePlan(dev, conv, ScoredPlan{seen[i], s, 0.0}, M, N, K, batch, &p));
      const bool dup = std::any_of(candidates_.begin(), candidates_.end(), [&](const TilePlan& c) {
        return c.kernel == p.kernel && c.threads == p.threads && c.splits == p.splits;
      });
      if (!dup && within_cap(p)) candidates_.push_back(p);
    }
  }
  if (candidates_.size() < 2) candidates_.clear();
  key_ = dev.name() + "|" + (conv ? "conv|" : "gemm|") + std::to_string(M) + "x" + std::to_string(N) + "x" +
         std::to_string(K) + "x" + std::to_string(batch) + "|" + key + (free_splits > 1 ? "|free" : "") +
         (tc ? (dev.overrides().tensor_cores_fp64 ? "|tc64" : "|tc") : "") + (dev.act_half() ? "|act16" : "");
  return Status::Ok();
}

size_t TileTuner::scratch_bytes() const {
  size_t bytes = 0;
  for (const TilePlan& p : candidates_) bytes = std::max(bytes, p.scratch_bytes);
  return bytes;
}

Status TileTuner::Tune(const Device& dev, const std::function<Status(const TilePlan&)>& launch, TilePlan* plan) {
  if (candidates_.empty()) return Status::Ok();
  std::vector<TilePlan> candidates;
  candidates.swap(candidates_);  // tune once, whatever happens below
  auto pick = [&](const TuneWinner& w) {
    for (const TilePlan& p : candidates) {
      if (WinnerOf(p) == w) {
        *plan = p;
        return true;
      }
    }
    return false;
  };
  {
    std::lock_guard<std::mutex> lock(TuneMutex());
    auto it = TuneMemo().find(key_);
    if (it != TuneMemo().end() && pick(it->second)) return Status::Ok();
  }
  // Tuned by an earlier process on this device, driver and delegate build. An entry naming none of today's
  // candidates (a valid entry of another candidate list) is tuned again and replaced.
  const std::string cache_key = "tiles|" + dev.cache_key() + "|" + key_;
  TuneWinner cached{};
  std::string payload;
  if (dev.cache().Load(CacheKind::kTiles, cache_key, &payload) && ParseWinner(payload, &cached) && pick(cached)) {
    std::lock_guard<std::mutex> lock(TuneMutex());
    TuneMemo()[key_] = cached;
    dev.NoteTuning(Device::Tuning::kFromCache);
    return Status::Ok();
  }
  // The cost model's plan (and a later process tunes this shape) when the budget is spent, or when a candidate
  // would be compiled for this process alone (PoCL: tens of seconds per candidate, every start).
  auto needs_compile = [&](const TilePlan& p) {
    return dev.KernelBuildPending(*p.kernel) || (p.reduce != nullptr && dev.KernelBuildPending(*p.reduce));
  };
  const bool compiles_lost = !dev.ProgramsPersist() && std::any_of(candidates.begin(), candidates.end(), needs_compile);
  if (dev.tuning_budget_left_ns() <= 0 || compiles_lost) {
    dev.NoteTuning(Device::Tuning::kUntuned);
    return Status::Ok();
  }
  if (dev.tuning_budget_left_ns() < kTuneCompileBudgetNs) {  // no compiles: the built candidates (and the plan)
    std::vector<TilePlan> built;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (i == 0 || !needs_compile(candidates[i])) built.push_back(candidates[i]);
    }
    candidates.swap(built);
    if (candidates.size() < 2) {
      dev.NoteTuning(Device::Tuning::kUntuned);
      return Status::Ok();
    }
  }
  const SetupTimer timer(dev, Device::Setup::kTuning);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  // Budget left after this tuning's own time so far (the timer above adds it to the spent time when it ends).
  auto over_budget = [&] {
    return dev.tuning_budget_left_ns() -
               std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count() <= 0;
  };
  auto seconds = [&](const TilePlan& p, int runs, double* out) {
    const Clock::time_point t0 = Clock::now();
    for (int r = 0; r < runs; ++r) SDGPU_RETURN_IF_ERROR(launch(p));
    SDGPU_RETURN_IF_ERROR(dev.Finish());
    *out = std::chrono::duration<double>(Clock::now() - t0).count();
    return Status::Ok();
  };
  dev.progress().SetDetail("tuning the tiles of a " + std::to_string(candidates.front().bm) + "-row-tile GEMM, " +
                           std::to_string(candidates.size()) + " candidates");
  const size_t n = candidates.size();
  std::vector<int> runs(n, kTuneRuns);
  std::vector<double> per_launch(n, 0.0);
  auto give_up = [&] {  // the cost model's plan, nothing stored: a later start (or a larger budget) tunes it
    dev.progress().SetDetail("");
    dev.NoteTuning(Device::Tuning::kUntuned);
    return Status::Ok();
  };
  for (size_t i = 0; i < n; ++i) {  // warm-up (a kernel's first launch may carry set-up costs), then size a round
    // Out of budget part-way (a candidate's first launch may compile it): the cost model's plan, not stored.
    if (i > 0 && over_budget()) return give_up();
    SDGPU_RETURN_IF_ERROR(launch(candidates[i]));
    SDGPU_RETURN_IF_ERROR(dev.Finish());
    double one = 0.0;
    SDGPU_RETURN_IF_ERROR(seconds(candidates[i], 1, &one));
    const double want = one > 0.0 ? std::ceil(kTuneMinRoundS / one) : kTuneMaxRuns;
    runs[i] = static_cast<int>(std::clamp<double>(want, kTuneRuns, kTuneMaxRuns));
    if (i == 0) {  // what the whole tuning would cost at this candidate's speed: give up now if it cannot fit
      const double estimate_s = one * static_cast<double>(n) * (2 + kTuneRounds * runs[0]);
      const double left_s = 1e-9 * static_cast<double>(dev.tuning_budget_left_ns()) -
                            std::chrono::duration<double>(Clock::now() - start).count();
      if (estimate_s > left_s) return give_up();
    }
  }
  for (int round = 0; round < kTuneRounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      if (over_budget()) return give_up();
      double sec = 0.0;
      SDGPU_RETURN_IF_ERROR(seconds(candidates[i], runs[i], &sec));
      const double t = sec / runs[i];
      if (round == 0 || t < per_launch[i]) per_launch[i] = t;
    }
  }
  dev.progress().SetDetail("");
  const TilePlan* best = &candidates[std::min_element(per_launch.begin(), per_launch.end()) - per_launch.begin()];
  *plan = *best;
  dev.NoteTuning(Device::Tuning::kTuned);
  const TuneWinner w = WinnerOf(*best);
  dev.cache().Store(CacheKind::kTiles, cache_key, WinnerText(w));
  std::lock_guard<std::mutex> lock(TuneMutex());
  TuneMemo()[key_] = w;
  return Status::Ok();
}

namespace {

// The split-K partials at `scratch` (a byte offset): written through the GEMM's C and read back by the reduce (or the
// caller, partials_only), so they are activation storage, dev.act_bytes() per element (MakePlan sizes them so).
TensorRef Partials(const Device& dev, const TensorRef& scratch) {
  return TensorRef{scratch.buffer, scratch.offset, dev.act_bytes()};
}

// gemm_splitk_reduce: C[b, m, n] = act(sum of the plan's split partials in `scratch` + bias[n]) (see the header).
Status LaunchSplitKReduce(const Device& dev, const TilePlan& p, const TensorRef& c, int scb, int scm,
                          const TensorRef& scratch, const TensorRef& bias, bool has_bias, int M, int N, int batch,
                          int act, const Residual& residual, const TensorRef& residual_input, Timings* timings) {
  Args r;
  r.Buf(c).Int(scb).Int(scm).Buf(scratch.buffer, Partials(dev, scratch).elem_offset());
  r.Int(p.splits);
  r.Buf(bias).Int(has_bias ? 1 : 0).Int(M).Int(N).Int(act);
  AddResidualArgs(residual, residual_input, scratch, &r);
  // any work-group size (the kernel bounds-checks): 16 x 16 where the device allows it
  const size_t rows = std::clamp<size_t>(dev.max_work_group_size() / 16, 1, 16);
  return dev.Launch(*p.reduce, r, {static_cast<size_t>(N), static_cast<size_t>(M), static_cast<size_t>(batch)},
                    {16, rows, 1}, timings);
}

}  // namespace

size_t FloatPartialBytes(const Device& dev, size_t act_sized) { return act_sized / dev.act_bytes() * sizeof(float); }

Status LaunchTiledGemm(const Device& dev, const TilePlan& p, const GemmShape& s, const TensorRef& c,
                       const TensorRef& a, const BOperand& b, const TensorRef* bias, const TensorRef& scratch,
                       Timings* timings, const Residual& residual, const TensorRef& residual_input,
                       bool partials_only, const TensorRef* ln_colsum, float ln_eps) {
  if (p.ln && (ln_colsum == nullptr || p.splits > 1)) return Status::Error("a LayerNorm GEMM needs its column sums");
  if (residual.rows > 0 && s.batch != 1) return Status::Error("the residual epilogue needs a single GEMM");
  if (p.tc && (b.half || s.sak != 1 || (s.sbn != 1 && s.sbk != 1))) {
    return Status::Error("the tensor-core GEMM " + p.kernel->name() + " needs fp32 B, A's k axis and B's n or k axis "
                         "contiguous");
  }
  if (b.tile_major && !ReadsTileMajorB(*p.kernel)) {
    return Status::Error("a tile-major B operand needs the gemm_t16x64 or gemm_s16x128 kernel, the plan has " +
                         p.kernel->name());
  }
  const bool split = p.splits > 1;
  if (s.float_ac && split && !partials_only) {
    return Status::Error("float32 A / C (GemmShape::float_ac) needs the caller to sum the split-K partials");
  }
  const TensorRef partials =
      s.float_ac ? TensorRef{scratch.buffer, scratch.offset, sizeof(float)} : Partials(dev, scratch);
  const TensorRef& dst = split ? partials : c;
  const int plane = s.M * s.N;
  const bool has_bias = bias != nullptr;
  const TensorRef& bias_ref = has_bias ? *bias : a;
  // A and C are read as float or as activation storage by b_half bit 2: their element size goes with them (gpu::Arg)
  Args g;
  g.Buf(dst);
  g.Int(split ? p.splits * plane : s.scb).Int(split ? plane : 0).Int(split ? s.N : s.scm);
  g.Buf(a).Int(s.sab).Int(s.sam).Int(s.sak);
  // B's element size goes with it too: float weights are indexed bare, half ones (b_half bit 0) through LDH
  g.Buf(b.buffer, b.offset, b.half ? 2 : 4).Int(s.sbb).Int(s.sbk).Int(s.sbn).Int((b.half ? 1 : 0) | (b.tile_major ? 2 : 0) |
                                                              (s.float_ac && dev.act_half() ? 4 : 0));
  g.Buf(bias_ref).Int(has_bias && !split ? 1 : 0);
  g.Int(s.M).Int(s.N).Int(s.K).Float(s.alpha).Int(split ? 0 : s.act).Int(p.splits).Int(p.k_split);
  AddResidualArgs(split ? Residual() : residual, residual_input, a, &g);
  if (p.ln) g.Buf(ln_colsum->buffer, ln_colsum->elem_offset()).Float(ln_eps);
  const size_t ty = static_cast<size_t>(p.threads / 16);
  SDGPU_RETURN_IF_ERROR(dev.Launch(*p.kernel, g,
                                   {static_cast<size_t>(CeilDiv(s.N, p.bn) * 16),
                                    static_cast<size_t>(CeilDiv(s.M, p.bm)) * ty,
                                    static_cast<size_t>(s.batch) * p.splits},
                                   {16, ty, 1}, timings));
  if (!split || partials_only) return Status::Ok();
  return LaunchSplitKReduce(dev, p, c, s.scb, s.scm, scratch, bias_ref, has_bias, s.M, s.N, s.batch, s.act, residual,
                            residual_input, timings);
}

namespace {

// sum_k w[k] * B[k][n] (w null: all ones) of the K x N row-major matrix `produce` writes, in double.
std::vector<double> WeightedColumnSums(const std::function<void(float*)>& produce, int K, int N, const float* w) {
  std::vector<float> b(static_cast<size_t>(N) * K);
  produce(b.data());
  std::vector<double> sums(static_cast<size_t>(N), 0.0);
  for (int k = 0; k < K; ++k) {
    const float* row = b.data() + static_cast<size_t>(k) * N;
    const double wk = w != nullptr ? static_cast<double>(w[k]) : 1.0;
    for (int n = 0; n < N; ++n) sums[n] += wk * row[n];
  }
  return sums;
}

// The TileTuner key of a GEMM: the strides and operand storage (TileTuner::Init).
std::string GemmTuneKey(const GemmShape& g, bool b_half) {
  return std::to_string(g.sab) + "," + std::to_string(g.sam) + "," + std::to_string(g.sak) + "," +
         std::to_string(g.sbb) + "," + std::to_string(g.sbk) + "," + std::to_string(g.sbn) + "," +
         std::to_string(b_half) + "," + std::to_string(g.bias_input >= 0) + "," + std::to_string(g.scb) + "," +
         std::to_string(g.scm);
}

// GpuOp::SplitColumns for a single GEMM C = A B (no bias: a bias would need a per-block offset): the same
// product as `parts` GEMMs batched over column blocks of width W = N / parts; block p reads B's columns
// [p*W, (p+1)*W) (batch stride W columns of B), the whole A (batch stride 0), and writes its own M x W plane.
bool SplitGemmColumns(const GemmShape& s, int parts, GemmShape* out) {
  if (parts < 2 || s.batch != 1 || s.bias_input >= 0 || s.N % parts != 0 || s.scm != s.N) return false;
  GemmShape g = s;
  const int w = s.N / parts;
  g.batch = parts;
  g.N = w;
  g.sab = 0;
  g.sbb = w * s.sbn;
  g.scb = s.M * w;
  g.scm = w;
  *out = g;
  return true;
}

// gemm_f32(C, co, int scb, int scm, A, ao, int sab, int sam, int sak, B, bo, int sbb, int sbk, int sbn,
//          bias, biaso, int has_bias, int M, int N, int K, float alpha, int act); global = (N, M, batch).
class GemmOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::float32_inputs_;  // the bias input (read as float by every kernel here)
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const TensorRef& A = in[s_.a_input];
    const TensorRef& B = in[s_.b_input];
    const bool has_bias = s_.bias_input >= 0;
    const TensorRef& bias = has_bias ? in[s_.bias_input] : A;
    Args a;
    a.Buf(out).Int(s_.scb).Int(s_.scm);
    a.Buf(A).Int(s_.sab).Int(s_.sam).Int(s_.sak);
    a.Buf(B).Int(s_.sbb).Int(s_.sbk).Int(s_.sbn);
    a.Buf(bias).Int(has_bias ? 1 : 0);
    a.Int(s_.M).Int(s_.N).Int(s_.K).Float(s_.alpha).Int(s_.act);
    return dev.Launch(*k_, a, {static_cast<size_t>(s_.N), static_cast<size_t>(s_.M), static_cast<size_t>(s_.batch)},
                      {kTile, kTile, 1}, timings);
  }

  bool SplitColumns(const Device&, int parts) override {
    GemmShape g;
    if (!SplitGemmColumns(s_, parts, &g)) return false;
    s_ = g;
    return true;
  }

  const Kernel* k_ = nullptr;
  GemmShape s_;
};

// conv2d_igemm(Y, yo, X, xo, W, wo, bias, biaso, int has_bias, int H, int Wd, int Ci, int OH, int OW, int Co,
//              int KH, int KW, int sh, int sw, int dh, int dw, int ph, int pw, int M, int act); global = (Co, M).
class ConvOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::float32_inputs_;  // the bias input (read as float by every kernel here)
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const TensorRef& bias = s_.has_bias ? in[2] : in[1];
    const int M = s_.n * s_.oh * s_.ow;
    Args a;
    a.Buf(out).Buf(in[0]).Buf(in[1]);
    a.Buf(bias).Int(s_.has_bias ? 1 : 0);
    a.Int(s_.h).Int(s_.w).Int(s_.ci).Int(s_.oh).Int(s_.ow).Int(s_.co).Int(s_.kh).Int(s_.kw);
    a.Int(s_.sh).Int(s_.sw).Int(s_.dh).Int(s_.dw).Int(s_.ph).Int(s_.pw).Int(M).Int(s_.act);
    return dev.Launch(*k_, a, {static_cast<size_t>(s_.co), static_cast<size_t>(M), 1}, {kTile, kTile, 1}, timings);
  }

  const Kernel* k_ = nullptr;
  ConvShape s_;
};

// FULLY_CONNECTED / BATCH_MATMUL on the tiled kernels; B is either a node input read in place or
// the op's packed constant (then not a device input).
class TiledGemmOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::float32_inputs_;  // the bias input (read as float by every kernel here)
  using GpuOp::scratch_bytes_;
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef& scratch,
                 Timings* timings) override {
    BOperand b;
    if (packed_) {
      SDGPU_RETURN_IF_ERROR(packed_->Ensure(dev));
      b = packed_->operand();
    } else {
      b = BOperand{in[s_.b_input].buffer, in[s_.b_input].elem_offset(), b_half_};  // half: activation storage
    }
    TensorRef packed_bias;
    if (packed_bias_) {
      SDGPU_RETURN_IF_ERROR(packed_bias_->Ensure(dev));
      packed_bias.buffer = packed_bias_->operand().buffer;
    }
    const TensorRef* bias = packed_bias_ ? &packed_bias : s_.bias_input >= 0 ? &in[s_.bias_input] : nullptr;
    TensorRef colsum;
    const TensorRef* colsum_ref = nullptr;
    if (ln_colsum_) {
      SDGPU_RETURN_IF_ERROR(ln_colsum_->Ensure(dev));
      colsum.buffer = ln_colsum_->operand().buffer;
      colsum_ref = &colsum;
      if (in[s_.a_input].elem_offset() % 4 != 0) return Status::Error("LayerNorm GEMM input rows not 4-element aligned");
    }
    auto run = [&](const TilePlan& p, Timings* t) -> Status {
      if (!p.ln_rows) {
        return LaunchTiledGemm(dev, p, s_, out, in[s_.a_input], b, bias, scratch, t, residual_, residual_input_, false,
                               colsum_ref, ln_eps_);
      }
      // the rows, normalised (unit affine), at the head of the scratch (activation storage: layer_norm_rows writes
      // them, the GEMM reads them as A); the plan's own scratch (split partials) after
      const TensorRef rows{scratch.buffer, scratch.offset, dev.act_bytes()};
      const TensorRef rest{scratch.buffer, scratch.offset + ln_rows_bytes_};
      SDGPU_RETURN_IF_ERROR(ln_ones_->Ensure(dev));
      SDGPU_RETURN_IF_ERROR(ln_zeros_->Ensure(dev));
      if (rows.offset % (4 * rows.elem_bytes) != 0) return Status::Error("LayerNorm rows scratch not float4-aligned");
      Args a;
      a.Buf(rows.buffer, rows.vec4_offset(), 4 * rows.elem_bytes).Buf(in[s_.a_input].buffer, in[s_.a_input].vec4_offset(), 4 * in[s_.a_input].elem_bytes);
      a.Buf(ln_ones_->operand().buffer, 0).Buf(ln_zeros_->operand().buffer, 0).Int(s_.K / 4).Float(ln_eps_).Int(0);
      SDGPU_RETURN_IF_ERROR(dev.Launch(*ln_rows_kernel_, a, {static_cast<size_t>(s_.M) * kLayerNormRowsWg, 1, 1},
                                       {kLayerNormRowsWg, 1, 1}, t));
      return LaunchTiledGemm(dev, p, s_, out, rows, b, bias, rest, t, residual_, residual_input_, false, nullptr, 0.0f);
    };
    if (tuner_.pending()) {
      SDGPU_RETURN_IF_ERROR(tuner_.Tune(dev, [&](const TilePlan& p) { return run(p, nullptr); }, &plan_));
    }
    return run(plan_, timings);
  }

  bool tuning_pending() const override { return tuner_.pending(); }
  void CollectWeights(std::vector<PackedWeights*>* out) override {
    for (PackedWeights* w : {packed_.get(), packed_bias_.get(), ln_colsum_.get(), ln_ones_.get(), ln_zeros_.get()}) {
      if (w != nullptr) out->push_back(w);  // Enqueue's order: the fold sums flow from packed_ to the bias / colsum
    }
  }

  bool FuseResidual(const Device&, const Residual& r) override {
    // batched GEMMs have no per-batch residual; a gated output is not the FC's shape
    return s_.batch == 1 && s_.act < kGeluKernelErf && AcceptResidual(r);
  }

  // The weights' (and bias's) columns are re-packed interleaved -- packed column 2j = value column j, 2j + 1 = gate
  // column N/2 + j -- so that each work-item's float4 of columns holds whole (value, gate) pairs, and the epilogue
  // writes the N/2-wide product (gemm_tiled.kern, "Gated-GELU epilogue"). Needs the FC's constant N x K weights.
  bool FuseGatedGelu(const Device& dev, int mode) override {
    if (b_const_ == nullptr || s_.batch != 1 || residual_.rows > 0 || s_.act != 0 ||
        s_.N % 4 != 0 || s_.scm != s_.N || (s_.bias_input >= 0 && bias_const_ == nullptr) || mode < kGeluKernelErf) {
      return false;
    }
    const int N = s_.N, K = s_.K, half = N / 2;
    GemmShape gated = s_;
    gated.act = mode;
    gated.scm = half;
    TilePlan plan = plan_;
    TileTuner tuner;
    if (!GatedTwin(dev, &plan).ok() ||
        !tuner.Init(dev, false, gated.M, gated.N, gated.K, 1, GemmTuneKey(gated, b_half_), autotune_, 1,
                    TensorCoreGemm(dev, gated, b_half_)).ok() ||
        !tuner.UseGatedTwins(dev).ok()) {
      return false;  // no twin kernels on this device: the op is unchanged
    }
    auto source_column = [half](int c) { return (c & 1) != 0 ? half + c / 2 : c / 2; };
    packed_ = std::make_unique<PackedWeights>(
        static_cast<size_t>(N) * K, b_half_, [b = b_const_, N, K, source_column](float* dst) {
          std::vector<float> rows(static_cast<size_t>(N) * K);  // weight rows (output columns) in packed order
          for (int c = 0; c < N; ++c) {
            std::memcpy(rows.data() + static_cast<size_t>(c) * K, b + static_cast<size_t>(source_column(c)) * K,
                        sizeof(float) * static_cast<size_t>(K));
          }
          TransposeInto(rows.data(), N, K, dst);
        });
    if (bias_const_ != nullptr) {
      packed_bias_ = std::make_unique<PackedWeights>(static_cast<size_t>(N), false,
                                                     [bias = bias_const_, N, source_column](float* dst) {
                                                       for (int c = 0; c < N; ++c) dst[c] = bias[source_column(c)];
                                                     });
    }
    plan_ = plan;
    tuner_ = std::move(tuner);
    s_ = gated;
    gated_columns_ = N;
    return true;
  }

  bool SplitColumns(const Device& dev, int parts) override {
    GemmShape g;
    if (residual_.rows > 0 || !SplitGemmColumns(s_, parts, &g)) return false;
    TilePlan plan;
    TileTuner tuner;
    const bool tc = TensorCoreGemm(dev, g, b_half_);
    if (!PlanTiles(dev, false, g.M, g.N, g.K, g.batch, &plan, tc).ok() ||
        !tuner.Init(dev, false, g.M, g.N, g.K, g.batch, GemmTuneKey(g, b_half_), autotune_, 1, tc).ok()) {
      return false;
    }
    s_ = g;
    plan_ = plan;
    tuner_ = std::move(tuner);
    scratch_bytes_ = std::max(plan_.scratch_bytes, tuner_.scratch_bytes());
    return true;
  }

  // FuseLayerNorm's three weights made on the device when it has the kernels (copy.kern: transpose_tiled,
  // ln_fold_columns, ln_fold_bias): the model's N x K weights uploaded as stored and transposed into scratch, then one
  // pass scales the rows by gamma into the packed weights (in the gated-GELU column order when FuseGatedGelu packed
  // them) and leaves beta . W and the column sums in a small buffer that the bias and column-sum producers read. The
  // host producers stay as the fallback (a device without the kernels; lazy Ensure never mixes the two: each weight
  // takes its device producer when it has one).
  void FoldOnDevice(const Device& dev, const std::vector<float>& gamma, const std::vector<float>& beta, int N, int K,
                    const std::function<void(float*)>& base_bias) {
    // the model's N x K weights as stored -> K x N (nullptr: no transpose kernel, or too large for one launch)
    const PackedWeights::DeviceProducer transpose = DeviceTranspose(TransposeKernel(dev), b_const_, N, K);
    const Kernel* fold = nullptr;
    const Kernel* bias = nullptr;
    const bool gated = gated_columns_ != 0;
    if (!transpose || (gated && gated_columns_ != N) || dev.max_work_group_size() < kWg1D ||
        !dev.HasKernel("ln_fold_columns") || !dev.GetKernel("ln_fold_columns", &fold).ok() ||
        !dev.HasKernel("ln_fold_bias") || !dev.GetKernel("ln_fold_bias", &bias).ok()) {
      return;
    }
    struct FoldState {
      std::unique_ptr<Buffer> gamma_beta, sums, base;
      int pending = 2;  // the bias and column-sum producers still to read `sums`
    };
    auto state = std::make_shared<FoldState>();
    packed_->SetDeviceProducer([=](const Device& d, const Buffer& dst, DeviceStaging* staging) -> Status {
      std::vector<float> gb(gamma);
      gb.insert(gb.end(), beta.begin(), beta.end());
      SDGPU_RETURN_IF_ERROR(UploadConstant(d, gb.data(), gb.size() * sizeof(float), &state->gamma_beta));
      SDGPU_RETURN_IF_ERROR(d.CreateBuffer(2 * static_cast<size_t>(N) * sizeof(float), &state->sums));
      const Buffer* kxn = nullptr;
      SDGPU_RETURN_IF_ERROR(staging->Scratch(d, sizeof(float) * static_cast<size_t>(N) * K, &kxn));
      SDGPU_RETURN_IF_ERROR(transpose(d, *kxn, staging));  // uploads the weights through the staging buffer
      Args f;  // ln_fold_columns(y, yo, sums, so, w, wo, gamma, go, beta, bo, int K, int N, int gated)
      f.Buf(&dst, 0).Buf(state->sums.get(), 0).Buf(kxn, 0).Buf(state->gamma_beta.get(), 0);
      f.Buf(state->gamma_beta.get(), K).Int(K).Int(N).Int(gated ? 1 : 0);
      return Launch1D(d, *fold, f, N, nullptr);
    });
    auto from_sums = [=](bool with_bias) -> PackedWeights::DeviceProducer {
      return [=](const Device& d, const Buffer& dst, DeviceStaging*) -> Status {
        if (!state->sums) return Status::Error("the LayerNorm fold's sums were not made before its bias / column sums");
        Args a;  // ln_fold_bias(y, yo, sums, so, base, bo, int has_base, int n)
        const bool has_base = with_bias && base_bias;
        if (has_base) {
          std::vector<float> base(static_cast<size_t>(N));
          base_bias(base.data());
          SDGPU_RETURN_IF_ERROR(UploadConstant(d, base.data(), base.size() * sizeof(float), &state->base));
        }
        a.Buf(&dst, 0).Buf(state->sums.get(), with_bias ? 0 : N);
        a.Buf(has_base ? state->base.get() : state->sums.get(), 0).Int(has_base ? 1 : 0).Int(N);
        SDGPU_RETURN_IF_ERROR(Launch1D(d, *bias, a, N, nullptr));
        if (--state->pending == 0) {  // (a buffer released under a launch that reads it lives until it ran)
          state->gamma_beta.reset();
          state->sums.reset();
          state->base.reset();
        }
        return Status::Ok();
      };
    };
    packed_bias_->SetDeviceProducer(from_sums(true));
    ln_colsum_->SetDeviceProducer(from_sums(false));
  }

  // The LayerNorm's gamma scales W's rows (k) wherever the packing put its columns (after FuseGatedGelu too), its
  // beta becomes bias + beta W, and the _ln kernels normalise each row of A inside the GEMM (gemm_tiled.kern). Needs
  // the packed fp32 constant weights (with weights_fp16 the column sums would not match the rounded weights), a
  // constant or no bias, one GEMM (or SplitColumns' blocks of one) over K-contiguous rows of A, and an unsplit
  // plan; a kernel without a twin re-plans on the cheapest config with one, and the tuner tries only twins.
  bool FuseLayerNorm(const Device& dev, float eps, const float* gamma, const float* beta, int k) override {
    // one GEMM, or the column blocks of one (SplitColumns: A shared, block b reads packed columns [b*N, (b+1)*N))
    const bool blocks = s_.batch > 1 && s_.sab == 0 && s_.sbb == s_.N && s_.scb == s_.M * s_.N;
    if (packed_ == nullptr || b_half_ || ln_colsum_ != nullptr ||
        (s_.batch != 1 && !blocks) || s_.sak != 1 || s_.sam != s_.K || s_.K != k || s_.K % 4 != 0 || s_.sbn != 1 ||
        (s_.sbk != s_.N * s_.batch) || (s_.bias_input >= 0 && packed_bias_ == nullptr && bias_const_ == nullptr)) {
      return false;
    }
    const bool gated = s_.act >= kGeluKernelErf;
    // A split plan stays as it is: its unsplit replacement cost more than the LayerNorm launch it saves (H200,
    // BENCHMARKS.md: SD's 32x32-level attn2 Q 45 -> 58 us, 8x8 GEGLU 79 -> 94 us, vs ~7 us of LayerNorm).
    if (plan_.splits > 1) return false;
    const LnFold fold = dev.overrides().ln_fold;
    TilePlan plan = plan_;
    const bool tc = TensorCoreGemm(dev, s_, b_half_);
    if (fold != LnFold::kRows && !LnTwin(dev, &plan).ok()) {
      // a kernel without the twin (gemm_t16x64): the cheapest unsplit plan with one, when it still fills the device
      // (unsplit plans of a few rows leave most compute units idle: the LayerNorm launch costs less)
      if (!PlanLnTiles(dev, s_.M, s_.N, s_.K, s_.batch, gated, &plan, tc).ok() ||
          static_cast<int64_t>(s_.batch) * CeilDiv(s_.M, plan.bm) * CeilDiv(s_.N, plan.bn) < dev.compute_units()) {
        return false;
      }
    }
    TileTuner tuner;
    if (!tuner.Init(dev, false, s_.M, s_.N, s_.K, s_.batch, GemmTuneKey(s_, b_half_) + ",ln", autotune_, 1, tc).ok() ||
        (gated && !tuner.UseGatedTwins(dev).ok())) {
      return false;
    }
    // The other form (TilePlan::ln_rows; layer_norm_fold=rows, or auto: the tuner times both): layer_norm_rows into
    // the op's scratch, then the plain GEMM. A twin's LayerNorm work sits in its main loop and costs some shapes more
    // than the extra launch (H200, BENCHMARKS.md: SD's 64x64 GEGLU at b2, twin 424 us vs 13.5 + 404), but by
    // little, and under auto the tuner's picks also lost elsewhere (b1 32x32 GEGLU 225 -> 7 + 243 us): twin stays
    // the default.
    size_t rows_bytes = 0;
    if (fold != LnFold::kTwin && s_.K <= kLayerNormRowsMaxC && dev.max_work_group_size() >= kLayerNormRowsWg &&
        dev.GetKernel("layer_norm_rows", &ln_rows_kernel_).ok()) {
      rows_bytes = RoundUp(static_cast<size_t>(s_.M) * static_cast<size_t>(s_.K) * dev.act_bytes(), size_t{256});
    } else if (fold == LnFold::kRows) {
      return false;
    }
    tuner.UseLnTwins(dev, rows_bytes, fold != LnFold::kRows);
    if (fold == LnFold::kRows) {  // the cost model's plain plan (already gated when gated), in its ln_rows form
      plan.ln_rows = true;
      plan.scratch_bytes += rows_bytes;
    }
    const int N = s_.N * s_.batch, K = s_.K;  // packed columns (all blocks)
    const std::function<void(float*)> weights = packed_->producer();  // K x N, before the gamma scaling
    std::function<void(float*)> base_bias;
    if (packed_bias_) {
      base_bias = packed_bias_->producer();
    } else if (bias_const_ != nullptr) {
      base_bias = [b = bias_const_, N](float* dst) { std::memcpy(dst, b, sizeof(float) * static_cast<size_t>(N)); };
    }
    const std::vector<float> g(gamma, gamma + K), be(beta, beta + K);
    // The packed weights' producer computes, in the same pass over the K x N weights, beta . W per column (before the
    // gamma scaling) and the column sums of the scaled weights, for the bias and colsum producers that Enqueue
    // ensures right after it (each used to re-produce the whole weights: 3x the packing at the first inference).
    // Same double accumulation in k order as WeightedColumnSums, which they fall back to if they run first.
    struct FoldSums {
      std::vector<double> beta_w, colsum;
    };
    auto sums = std::make_shared<FoldSums>();
    packed_bias_ = std::make_unique<PackedWeights>(
        static_cast<size_t>(N), false, [weights, base_bias, be, N, K, sums](float* dst) {
          const std::vector<double> beta_w =
              sums->beta_w.empty() ? WeightedColumnSums(weights, K, N, be.data()) : std::move(sums->beta_w);
          if (base_bias) base_bias(dst);
          for (int n = 0; n < N; ++n) dst[n] = static_cast<float>((base_bias ? dst[n] : 0.0) + beta_w[n]);
        });
    packed_->Then([g, be, N, K, sums](float* dst) {
      std::vector<double> beta_w(static_cast<size_t>(N), 0.0), colsum(static_cast<size_t>(N), 0.0);
      // column bands on the host's cores (each band walks all K rows: the same k order per column as one thread)
      HostParallelRanges(N, 64, static_cast<int64_t>(N) * K >= (int64_t{1} << 20), [&](int64_t n0, int64_t n1) {
        for (int kk = 0; kk < K; ++kk) {
          float* row = dst + static_cast<size_t>(kk) * N;
          const double bk = static_cast<double>(be[kk]);
          for (int64_t n = n0; n < n1; ++n) {
            beta_w[n] += bk * row[n];
            row[n] *= g[kk];
            colsum[n] += 1.0 * row[n];
          }
        }
      });
      sums->beta_w = std::move(beta_w);
      sums->colsum = std::move(colsum);
    });
    ln_colsum_ = std::make_unique<PackedWeights>(
        static_cast<size_t>(N), false, [scaled = packed_->producer(), N, K, sums](float* dst) {
          const std::vector<double> colsum =
              sums->colsum.empty() ? WeightedColumnSums(scaled, K, N, nullptr) : std::move(sums->colsum);
          for (int n = 0; n < N; ++n) dst[n] = static_cast<float>(colsum[n]);
        });
    FoldOnDevice(dev, g, be, N, K, base_bias);
    ln_eps_ = eps;
    if (rows_bytes > 0) {
      ln_rows_bytes_ = rows_bytes;
      ln_ones_ = std::make_unique<PackedWeights>(static_cast<size_t>(K), false,
                                                 [K](float* dst) { std::fill(dst, dst + K, 1.0f); });
      ln_zeros_ = std::make_unique<PackedWeights>(static_cast<size_t>(K), false,
                                                  [K](float* dst) { std::fill(dst, dst + K, 0.0f); });
    }
    plan_ = plan;
    tuner_ = std::move(tuner);
    scratch_bytes_ = std::max(plan_.scratch_bytes, tuner_.scratch_bytes());
    return true;
  }

  TilePlan plan_;
  TileTuner tuner_;
  GemmShape s_;
  std::unique_ptr<PackedWeights> packed_;
  std::unique_ptr<PackedWeights> packed_bias_;  // the bias re-packed (gated-GELU epilogue) or LayerNorm-folded
  std::unique_ptr<PackedWeights> ln_colsum_;    // FuseLayerNorm: the column sums of the gamma-scaled weights
  float ln_eps_ = 0.0f;
  // FuseLayerNorm's ln_rows plans: layer_norm_rows, its unit gamma / zero beta (K floats each) and the bytes its
  // normalised rows take at the head of the scratch (0: no ln_rows plan among the candidates)
  const Kernel* ln_rows_kernel_ = nullptr;
  std::unique_ptr<PackedWeights> ln_ones_, ln_zeros_;
  size_t ln_rows_bytes_ = 0;
  int gated_columns_ = 0;  // FuseGatedGelu: the N its packing interleaved (value column j at 2j, gate at 2j + 1)
  const float* b_const_ = nullptr;     // FULLY_CONNECTED's constant N x K weights (host, interpreter lifetime)
  const float* bias_const_ = nullptr;  // and its constant bias, when it has one
  bool b_half_ = false;
  bool autotune_ = false;
};

// CONV_2D (and SdConv2DWinograd's direct path) as the tiled implicit GEMM.
class TiledConvOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::float32_inputs_;  // the bias input (read as float by every kernel here)
  using GpuOp::scratch_bytes_;
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef& scratch,
                 Timings* timings) override {
    // the packed filter first: its production is set-up time of its own kind, not part of the tuning (stats)
    if (packed_) SDGPU_RETURN_IF_ERROR(packed_->Ensure(dev));
    if (tuner_.pending()) {
      SDGPU_RETURN_IF_ERROR(
          tuner_.Tune(dev, [&](const TilePlan& p) { return Launch(dev, p, in, out, scratch, nullptr); }, &plan_));
    }
    return Launch(dev, plan_, in, out, scratch, timings);
  }

  TilePlan plan_;
  TileTuner tuner_;
  ConvShape s_;
  std::unique_ptr<PackedWeights> packed_;

 private:
  Status Launch(const Device& dev, const TilePlan& plan, const std::vector<TensorRef>& in, const TensorRef& out,
                const TensorRef& scratch, Timings* timings) {
    BOperand b;
    int sbk = 1, sbn = s_.kh * s_.kw * s_.ci;  // OHWI in place: a Co x K matrix
    if (packed_) {
      SDGPU_RETURN_IF_ERROR(packed_->Ensure(dev));
      b = packed_->operand();
      sbk = s_.co;  // packed K x Co
      sbn = 1;
    } else {
      b = BOperand{in[1].buffer, in[1].elem_offset(), dev.act_half()};  // the filter input: activation storage
    }
    const bool split = plan.splits > 1;
    const int M = s_.n * s_.oh * s_.ow;
    const TensorRef partials = Partials(dev, scratch);
    const TensorRef& dst = split ? partials : out;
    const TensorRef& bias = s_.has_bias ? in[2] : in[0];
    Args a;
    // Y's element size goes with it: the shared epilogue can also store float (b_half bit 2, gpu::Arg)
    a.Buf(dst).Int(split ? M * s_.co : 0);
    a.Buf(in[0]);
    a.Buf(b.buffer, b.offset, b.half ? 2 : 4).Int(sbk).Int(sbn).Int(b.half ? 1 : 0);
    a.Buf(bias).Int(s_.has_bias && !split ? 1 : 0);
    a.Int(s_.h).Int(s_.w).Int(s_.ci).Int(s_.oh).Int(s_.ow).Int(s_.co).Int(s_.kh).Int(s_.kw);
    a.Int(s_.sh).Int(s_.sw).Int(s_.dh).Int(s_.dw).Int(s_.ph).Int(s_.pw).Int(M).Int(split ? 0 : s_.act);
    a.Int(plan.splits).Int(plan.k_split);
    AddResidualArgs(split ? Residual() : residual_, residual_input_, in[0], &a);
    const size_t ty = static_cast<size_t>(plan.threads / 16);
    SDGPU_RETURN_IF_ERROR(dev.Launch(*plan.kernel, a,
                                     {static_cast<size_t>(CeilDiv(s_.co, plan.bn) * 16),
                                      static_cast<size_t>(CeilDiv(M, plan.bm)) * ty, static_cast<size_t>(plan.splits)},
                                     {16, ty, 1}, timings));
    if (!split) return Status::Ok();
    return LaunchSplitKReduce(dev, plan, out, 0, s_.co, scratch, bias, s_.has_bias, M, s_.co, 1, s_.act, residual_,
                              residual_input_, timings);
  }

 public:
  bool FuseResidual(const Device&, const Residual& r) override { return AcceptResidual(r); }
  void CollectWeights(std::vector<PackedWeights*>* out) override {
    if (packed_) out->push_back(packed_.get());
  }
  bool tuning_pending() const override { return tuner_.pending(); }
};

// The tiled GEMM for `s`, with B packed from `b_const` (an N x K row-major host matrix when
// `b_transposed`, else K x N) when non-null; nullptr when the device has no tiled kernels.
// `bias_const`: the constant bias's host data (FULLY_CONNECTED; for GpuOp::FuseGatedGelu), else nullptr.
Status TryTiledGemm(const Device& dev, const GemmShape& s, std::vector<int> inputs, const float* b_const,
                    bool b_transposed, bool weights_fp16, bool autotune, std::unique_ptr<GpuOp>* out,
                    const float* bias_const = nullptr) {
  auto u = std::make_unique<TiledGemmOp>();
  u->s_ = s;
  if (b_transposed) {  // the gated-GELU re-pack reads N x K weights
    u->b_const_ = b_const;
    u->bias_const_ = bias_const;
  }
  SDGPU_RETURN_IF_ERROR(CheckForcedTiles(dev));  // a typo must not quietly run the fallback kernel
  GemmShape packed = s;  // the strides B has on the device (constant weights are packed K x N below)
  if (b_const != nullptr) {
    packed.sbb = 0;
    packed.sbk = s.N;
    packed.sbn = 1;
  }
  const bool tc = TensorCoreGemm(dev, packed, b_const != nullptr ? weights_fp16 : dev.act_half());
  if (!PlanTiles(dev, false, s.M, s.N, s.K, s.batch, &u->plan_, tc).ok()) return Status::Ok();
  if (b_const != nullptr) {
    const int N = s.N, K = s.K;
    u->packed_ = std::make_unique<PackedWeights>(
        static_cast<size_t>(N) * K, weights_fp16, [b_const, N, K, b_transposed](float* dst) {
          if (b_transposed) {
            TransposeInto(b_const, N, K, dst);
          } else {
            std::memcpy(dst, b_const, sizeof(float) * static_cast<size_t>(N) * K);
          }
        });
    if (b_transposed) {
      u->packed_->SetDeviceProducer(DeviceTranspose(TransposeKernel(dev), b_const, N, K),
                                    weights_fp16 ? PackHalfKernel(dev) : nullptr);
    }
    u->s_ = packed;
    inputs.erase(std::remove(inputs.begin(), inputs.end(), s.b_input), inputs.end());
  }
  // B's storage: packed constant weights are half with weights_fp16, a B input of the partition with half activations
  u->b_half_ = b_const != nullptr ? weights_fp16 : dev.act_half();
  u->autotune_ = autotune;
  SDGPU_RETURN_IF_ERROR(
      u->tuner_.Init(dev, false, s.M, s.N, s.K, s.batch, GemmTuneKey(u->s_, u->b_half_), autotune, 1, tc));
  u->device_inputs_ = std::move(inputs);
  if (s.bias_input >= 0) u->float32_inputs_ = {s.bias_input};
  u->scratch_bytes_ = std::max(u->plan_.scratch_bytes, u->tuner_.scratch_bytes());
  *out = std::move(u);
  return Status::Ok();
}

Status MakeNaiveGemm(const Device& dev, const GemmShape& s, std::vector<int> inputs, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(dev.max_work_group_size() >= kTile * kTile, "device work-group limit below 256"));
  auto u = std::make_unique<GemmOp>();
  u->s_ = s;
  u->device_inputs_ = std::move(inputs);
  if (s.bias_input >= 0) u->float32_inputs_ = {s.bias_input};
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("gemm_f32", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

const float* ConstFloatData(const abi::TfLiteTensor* t) {
  return IsConstant(t) && t->type == abi::kTfLiteFloat32 ? static_cast<const float*>(t->data.data) : nullptr;
}

}  // namespace

Status MakeGemm(const Device& dev, const GemmShape& s, std::vector<int> inputs, bool autotune,
                std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(TryTiledGemm(dev, s, inputs, nullptr, false, false, autotune, out));
  if (*out) return Status::Ok();
  return MakeNaiveGemm(dev, s, std::move(inputs), out);
}

Status MakeConvWithFilter(const Device& dev, const ConvShape& s, const float* filter, bool weights_fp16,
                          bool autotune, std::unique_ptr<GpuOp>* out) {
  const int K = s.kh * s.kw * s.ci;
  TilePlan plan;
  const int M = s.n * s.oh * s.ow;
  SDGPU_RETURN_IF_ERROR(CheckForcedTiles(dev));
  // tensor cores: fp32 B, whether packed K x Co (constant filter) or read in place (OHWI: Co x K, k contiguous)
  const bool tc = TensorCoresWanted(dev) && !(filter != nullptr && weights_fp16);
  if (s.ci % kTiledBk == 0 && PlanTiles(dev, true, M, s.co, K, 1, &plan, tc).ok()) {
    auto u = std::make_unique<TiledConvOp>();
    u->s_ = s;
    u->plan_ = plan;
    std::string key;
    for (int v : {s.h, s.w, s.ci, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.ph, s.pw, s.has_bias ? 1 : 0}) {
      key += std::to_string(v) + ",";
    }
    key += filter != nullptr && weights_fp16 ? "h" : (filter != nullptr ? "f" : "in");
    SDGPU_RETURN_IF_ERROR(u->tuner_.Init(dev, true, M, s.co, K, 1, key, autotune, 1, tc));
    u->scratch_bytes_ = std::max(plan.scratch_bytes, u->tuner_.scratch_bytes());
    if (filter != nullptr) {
      const int co = s.co;
      u->packed_ = std::make_unique<PackedWeights>(static_cast<size_t>(co) * K, weights_fp16,
                                                   [filter, co, K](float* dst) { TransposeInto(filter, co, K, dst); });
      u->packed_->SetDeviceProducer(DeviceTranspose(TransposeKernel(dev), filter, co, K),
                                    weights_fp16 ? PackHalfKernel(dev) : nullptr);
      u->device_inputs_ = s.has_bias ? std::vector<int>{0, 2} : std::vector<int>{0};
    } else {
      u->device_inputs_ = s.has_bias ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
    }
    if (s.has_bias) u->float32_inputs_ = {2};
    *out = std::move(u);
    return Status::Ok();
  }
  SDGPU_RETURN_IF_ERROR(Need(dev.max_work_group_size() >= kTile * kTile, "device work-group limit below 256"));
  auto u = std::make_unique<ConvOp>();
  u->s_ = s;
  u->device_inputs_ = s.has_bias ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1};
  if (s.has_bias) u->float32_inputs_ = {2};
  SDGPU_RETURN_IF_ERROR(dev.GetKernel("conv2d_igemm", &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

Status MakeFullyConnected(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto* prm = static_cast<const FullyConnectedParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && prm->weights_format == 0, "only default weights format"));
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    if (node.inputs[i] != nullptr) {
      SDGPU_RETURN_IF_ERROR(
          Need(node.inputs[i]->type == abi::kTfLiteFloat32, "only float32 operands (dequantize weights first)"));
    }
  }
  const Dims x = DimsOf(node.inputs[0]), w = DimsOf(node.inputs[1]);
  SDGPU_RETURN_IF_ERROR(Need(w.size() == 2, "weights must be 2-D"));
  GemmShape s;
  s.K = static_cast<int>(w[1]);
  s.N = static_cast<int>(w[0]);
  SDGPU_RETURN_IF_ERROR(Need(s.K > 0, "empty weights"));
  s.M = static_cast<int>(NumElements(x) / s.K);
  SDGPU_RETURN_IF_ERROR(Need(static_cast<int64_t>(s.M) * s.K == NumElements(x), "input size not a multiple of K"));
  SDGPU_RETURN_IF_ERROR(
      Need(NumElements(DimsOf(node.outputs[0])) == static_cast<int64_t>(s.M) * s.N, "output size mismatch"));
  s.sam = s.K;
  s.sak = 1;
  s.sbk = 1;
  s.sbn = s.K;
  s.scm = s.N;
  s.a_input = 0;
  s.b_input = 1;
  s.act = prm->activation;
  std::vector<int> inputs = {0, 1};
  if (node.inputs.size() > 2 && node.inputs[2] != nullptr) {
    // the kernels and the host-side repacking read N bias values
    SDGPU_RETURN_IF_ERROR(Need(NumElements(DimsOf(node.inputs[2])) == s.N, "bias size does not match the outputs"));
    s.bias_input = 2;
    inputs.push_back(2);
  }
  SDGPU_RETURN_IF_ERROR(TryTiledGemm(dev, s, inputs, ConstFloatData(node.inputs[1]), /*b_transposed=*/true,
                                     node.weights_fp16, node.gemm_autotune, out,
                                     s.bias_input >= 0 ? ConstFloatData(node.inputs[2]) : nullptr));
  if (*out) return Status::Ok();
  return MakeNaiveGemm(dev, s, inputs, out);
}

Status MakeBatchMatMul(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto* prm = static_cast<const BatchMatMulParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && node.inputs[0]->type == abi::kTfLiteFloat32 &&
                                 node.inputs[1]->type == abi::kTfLiteFloat32,
                             "only float32"));
  const Dims a = DimsOf(node.inputs[0]), b = DimsOf(node.inputs[1]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(a.size() >= 2 && b.size() >= 2 && o.size() >= 2, "rank below 2"));
  GemmShape s;
  const int64_t ar = a[a.size() - 2], ac = a.back(), br = b[b.size() - 2], bc = b.back();
  s.M = static_cast<int>(prm->adj_x ? ac : ar);
  s.K = static_cast<int>(prm->adj_x ? ar : ac);
  s.N = static_cast<int>(prm->adj_y ? br : bc);
  SDGPU_RETURN_IF_ERROR(Need((prm->adj_y ? bc : br) == s.K, "inner dimensions differ"));
  SDGPU_RETURN_IF_ERROR(Need(s.M > 0 && s.N > 0, "empty operands"));
  s.sam = prm->adj_x ? 1 : static_cast<int>(ac);
  s.sak = prm->adj_x ? static_cast<int>(ac) : 1;
  s.sbk = prm->adj_y ? 1 : static_cast<int>(bc);
  s.sbn = prm->adj_y ? static_cast<int>(bc) : 1;
  s.scm = s.N;
  const int64_t ba = NumElements(a) / (ar * ac), bb = NumElements(b) / (br * bc), bo = NumElements(o) / (s.M * s.N);
  SDGPU_RETURN_IF_ERROR(Need((ba == bo || ba == 1) && (bb == bo || bb == 1), "only equal or single batches broadcast"));
  s.batch = static_cast<int>(bo);
  s.sab = ba == 1 ? 0 : static_cast<int>(ar * ac);
  s.sbb = bb == 1 ? 0 : static_cast<int>(br * bc);
  s.scb = s.M * s.N;
  s.a_input = 0;
  s.b_input = 1;
  return MakeGemm(dev, s, {0, 1}, node.gemm_autotune, out);
}

Status MakeConv2D(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto* prm = static_cast<const ConvParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr, "missing params"));
  for (const abi::TfLiteTensor* t : node.inputs) {
    if (t != nullptr) SDGPU_RETURN_IF_ERROR(Need(t->type == abi::kTfLiteFloat32, "only float32 operands"));
  }
  const Dims x = DimsOf(node.inputs[0]), w = DimsOf(node.inputs[1]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(x.size() == 4 && w.size() == 4 && o.size() == 4, "expects NHWC x OHWI"));
  SDGPU_RETURN_IF_ERROR(Need(w[3] == x[3], "grouped convolution is not supported"));
  // the kernels write N x OH x OW x Co values where the output holds o[0..3]: they must be the same
  SDGPU_RETURN_IF_ERROR(Need(o[0] == x[0] && o[3] == w[0], "output batch / channels do not match input and filter"));
  SDGPU_RETURN_IF_ERROR(Need(prm->stride_height >= 1 && prm->stride_width >= 1, "strides must be >= 1"));
  if (node.inputs.size() > 2 && node.inputs[2] != nullptr) {
    SDGPU_RETURN_IF_ERROR(Need(NumElements(DimsOf(node.inputs[2])) == w[0], "bias size does not match the filters"));
  }
  ConvShape s;
  s.n = static_cast<int>(x[0]);
  s.h = static_cast<int>(x[1]);
  s.w = static_cast<int>(x[2]);
  s.ci = static_cast<int>(x[3]);
  s.co = static_cast<int>(w[0]);
  s.kh = static_cast<int>(w[1]);
  s.kw = static_cast<int>(w[2]);
  s.oh = static_cast<int>(o[1]);
  s.ow = static_cast<int>(o[2]);
  s.sh = prm->stride_height;
  s.sw = prm->stride_width;
  s.dh = std::max(1, prm->dilation_height);
  s.dw = std::max(1, prm->dilation_width);
  if (prm->padding == kPaddingSame) {
    const int th = std::max(0, (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1 - s.h);
    const int tw = std::max(0, (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w);
    s.ph = th / 2;
    s.pw = tw / 2;
  }
  s.act = prm->activation;
  s.has_bias = node.inputs.size() > 2 && node.inputs[2] != nullptr;
  return MakeConvWithFilter(dev, s, ConstFloatData(node.inputs[1]), node.weights_fp16, node.gemm_autotune, out);
}

}  // namespace sdgpu::gpu
