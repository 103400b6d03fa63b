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
// Activation storage (delegate option activations_fp16, Device::act_half): A, C and the residual are the kernels'
// ACT data, so offsets come from TensorRef::elem_offset(); the split-K partials are float32 in every storage (b_half
// bit 3: half partials would round a split output about twice); a non-constant B (or filter) is then half storage,
// read through b_half bit 0; a bias input stays float32 (float32_inputs_); the tensor-core configs (fp32 only) are
// never candidates. GemmShape::float_ac (Winograd's V and M) keeps A and C float32 whatever the storage: b_half bit 2.
//
// Tuning knob (benchmarks and tests only): the delegate option gemm_tiles=BMxBN[nTHREADS|tc][/splits] forces one tile
//
// This file: the tile configs, the cost model that ranks them, the forced-tiles option and the measured choice
// (TileTuner); the weight packing is gpu/packed_weights.cc, the ops and their launches gpu/matmul_ops.cc.
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
  if (p.splits > 1 && !dev.ScratchOperandFits(partial)) p.splits = 1;  // (GL: one storage block)
  if (p.splits == 1) p.k_split = std::max(K, 1);
  SDGPU_RETURN_IF_ERROR(dev.GetKernel(conv ? sp.config->conv : sp.config->gemm, &p.kernel));
  if (p.splits > 1) {
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("gemm_splitk_reduce", &p.reduce));
    p.scratch_bytes = static_cast<size_t>(partial) * sizeof(float);  // float32 partials (gemm_tiled.kern, b_half bit 3)
  }
  *out = p;
  return Status::Ok();
}

// Choices made earlier in the process: "device|problem" -> (bm, bn, threads, splits, ln_rows, tc) and, for the cost
// model's plan of a shape a budget left untuned, that budget in ms (-1: a tuned winner).
std::mutex& TuneMutex() {
  static std::mutex m;
  return m;
}
using TuneWinner = std::array<int, 6>;
struct TuneChoice {
  TuneWinner winner{};
  long long planned_ms = -1;
};
std::map<std::string, TuneChoice>& TuneMemo() {
  static std::map<std::string, TuneChoice> memo;
  return memo;
}
TuneWinner WinnerOf(const TilePlan& p) {
  return {p.bm, p.bn, p.threads, p.splits, p.ln_rows ? 1 : 0, p.tc ? 1 : 0};
}

// A choice as a cache entry's payload, and back. A tuned winner is "tiles v1 bm bn threads splits ln_rows tc"; the
// cost model's plan kept for a shape the budget left untuned adds " planned BUDGET_MS", the tuning budget it was
// decided under. The parse accepts exactly those forms with values in range, anything else is a miss (Tune then
// checks it names a candidate). `planned_ms`: -1 for a tuned winner.
std::string WinnerText(const TuneWinner& w, long long planned_ms = -1) {
  std::string s = "tiles v1";
  for (int v : w) s += " " + std::to_string(v);
  if (planned_ms >= 0) s += " planned " + std::to_string(planned_ms);
  return s;
}
bool ParseWinner(const std::string& text, TuneWinner* out, long long* planned_ms) {
  TuneWinner w{};
  int used = 0;
  if (text.size() > 128 || std::sscanf(text.c_str(), "tiles v1 %d %d %d %d %d %d%n", &w[0], &w[1], &w[2], &w[3],
                                       &w[4], &w[5], &used) != 6) {
    return false;
  }
  long long budget = -1;
  if (static_cast<size_t>(used) != text.size()) {
    int more = 0;
    if (std::sscanf(text.c_str() + used, " planned %lld%n", &budget, &more) != 1 || budget < 0 ||
        static_cast<size_t>(used + more) != text.size()) {
      return false;
    }
  }
  for (int v : w) {
    if (v < 0 || v > 4096) return false;
  }
  *out = w;
  *planned_ms = budget;
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
    if (!dev.ScratchOperandFits(int64_t{splits} * batch * M * N)) return false;
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
  p.scratch_bytes = splits > 1 ? static_cast<size_t>(splits) * batch * M * N * sizeof(float) : 0;
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
  // The tensor-core kernels (backends/opencl/nvidia/) keep float32 storage, and under half storage they stay off for
  // the whole delegate, float storage islands included: the NVIDIA-only code stays out of the phone preset.
  if (dev.default_act_half()) return false;
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

void TileTuner::KeepScratchWithin(size_t bytes) {
  candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(),
                                   [&](const TilePlan& p) { return p.scratch_bytes > bytes; }),
                    candidates_.end());
  if (candidates_.size() < 2) candidates_.clear();
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
  // A plan a budget left untuned stays the choice unless this delegate may tune more.
  auto keeps = [&](const TuneChoice& c) { return c.planned_ms < 0 || dev.tuning_budget_ms() <= c.planned_ms; };
  {
    std::lock_guard<std::mutex> lock(TuneMutex());
    auto it = TuneMemo().find(key_);
    if (it != TuneMemo().end() && keeps(it->second) && pick(it->second.winner)) {
      if (it->second.planned_ms >= 0) dev.NoteTuning(Device::Tuning::kUntuned);
      return Status::Ok();
    }
  }
  // Chosen by an earlier process on this device, driver and delegate build. An entry naming none of today's
  // candidates (a valid entry of another candidate list) is tuned again and replaced.
  const std::string cache_key = "tiles|" + dev.cache_key() + "|" + key_;
  TuneChoice cached;
  std::string payload;
  if (dev.cache().Load(CacheKind::kTiles, cache_key, &payload) &&
      ParseWinner(payload, &cached.winner, &cached.planned_ms) && keeps(cached) && pick(cached.winner)) {
    std::lock_guard<std::mutex> lock(TuneMutex());
    TuneMemo()[key_] = cached;
    dev.NoteTuning(cached.planned_ms < 0 ? Device::Tuning::kFromCache : Device::Tuning::kUntuned);
    return Status::Ok();
  }
  // The cost model's plan, kept as this shape's choice under this budget (in the process and the cache): later
  // starts with the same budget take it at once -- no tuning time at every start until every shape is tuned, and
  // the same kernels, so the same pixels, each start -- and a start with a larger budget tunes it.
  auto untuned = [&] {
    dev.progress().SetDetail("");
    dev.NoteTuning(Device::Tuning::kUntuned);
    const TuneChoice c{WinnerOf(*plan), dev.tuning_budget_ms()};
    dev.cache().Store(CacheKind::kTiles, cache_key, WinnerText(c.winner, c.planned_ms));
    std::lock_guard<std::mutex> lock(TuneMutex());
    TuneMemo()[key_] = c;
    return Status::Ok();
  };
  // So when the budget is spent, or when a candidate would be compiled for this process alone (PoCL: tens of
  // seconds per candidate, every start).
  auto needs_compile = [&](const TilePlan& p) {
    return dev.KernelBuildPending(*p.kernel) || (p.reduce != nullptr && dev.KernelBuildPending(*p.reduce));
  };
  const bool compiles_lost = !dev.ProgramsPersist() && std::any_of(candidates.begin(), candidates.end(), needs_compile);
  if (dev.tuning_budget_left_ns() <= 0 || compiles_lost) return untuned();
  if (dev.tuning_budget_left_ns() < kTuneCompileBudgetNs) {  // no compiles: the built candidates (and the plan)
    std::vector<TilePlan> built;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (i == 0 || !needs_compile(candidates[i])) built.push_back(candidates[i]);
    }
    candidates.swap(built);
    if (candidates.size() < 2) return untuned();
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
  for (size_t i = 0; i < n; ++i) {  // warm-up (a kernel's first launch may carry set-up costs), then size a round
    // Out of budget part-way (a candidate's first launch may compile it): the cost model's plan.
    if (i > 0 && over_budget()) return untuned();
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
      if (estimate_s > left_s) return untuned();
    }
  }
  for (int round = 0; round < kTuneRounds; ++round) {
    for (size_t i = 0; i < n; ++i) {
      if (over_budget()) return untuned();
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
  TuneMemo()[key_] = TuneChoice{w, -1};
  return Status::Ok();
}


}  // namespace sdgpu::gpu
