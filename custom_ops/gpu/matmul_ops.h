// GEMM-shaped ops: FULLY_CONNECTED, BATCH_MATMUL, CONV_2D (gpu/matmul_ops.cc) and
// SdConv2DWinograd (ops/conv2d_winograd/gpu.cc), on two kernel families:
//   * register-blocked tiled kernels (gemm_t*/conv_t* + gemm_splitk_reduce, gpu/kernels/gemm_tiled.kern, every GPU
//     backend; signatures documented there and in gpu/tile_planner.cc), each tile config used where the device can hold
//     its work-group and local memory;
//   * the original one-output-per-work-item kernels gemm_f32 / conv2d_igemm (every backend),
//     the fallback where no tile config fits the device and for convs with Ci % 16 != 0.
#pragma once

#include <climits>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/ops.h"

namespace sdgpu::gpu {

// GT_BK of the tiled kernels (gemm_tiled.kern): their K step, the split-K granularity and the conv Ci multiple.
constexpr int kTiledBk = 16;

// Work-group tile of gemm_f32 / conv2d_igemm. Correctness constant: the kernels'
// shared tiles are TS x TS (TS = this) and the launch uses kTile x kTile groups (kTile x kTile / 2 on a device
// allowing fewer invocations).
constexpr size_t kTile = 16;

// C[b, m, n] = act(alpha * A[b] B[b] + bias) with explicit element strides.
struct GemmShape {
  int M = 0, N = 0, K = 0, batch = 1;
  int sab = 0, sam = 0, sak = 1;
  int sbb = 0, sbk = 0, sbn = 1;
  int scb = 0, scm = 0;
  int a_input = 0, b_input = 1, bias_input = -1;  // indices into the node inputs
  float alpha = 1.0f;
  int act = 0;  // TFLite fused activation code
  // A, C and the split-K partials are float32 whatever the activation storage (Winograd's V and M, kept float
  // because its transforms amplify half rounding; gemm_tiled.kern's b_half bit 2): the caller's TensorRefs of A and
  // C then have elem_bytes 4, and a split plan's partials (float32 in every storage) must be summed by the caller
  // (LaunchTiledGemm's partials_only).
  bool float_ac = false;
};

// NHWC conv, OHWI filter, inputs (x, filter[, bias]).
struct ConvShape {
  int n = 0, h = 0, w = 0, ci = 0, co = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  int sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0, act = 0;
  bool has_bias = false;
};

// How one GEMM problem runs on the tiled kernels: a BM x BN work-group tile and
// `splits` K slices of `k_split` elements each (split-K: partial sums go to scratch
// and gemm_splitk_reduce adds them, the bias and the activation).
struct TilePlan {
  int bm = 64, bn = 64, threads = 256, splits = 1, k_split = 0;  // work-group = 16 x (threads / 16)
  const Kernel* kernel = nullptr;  // gemm_tBMxBN or conv_tBMxBN
  const Kernel* reduce = nullptr;  // gemm_splitk_reduce when splits > 1
  size_t scratch_bytes = 0;        // split-K partials (float32 in every activation storage)
  bool ln = false;                 // the kernel is a LayerNorm twin (NAME_ln / NAME_gg_ln, gemm_tiled.kern)
  // A folded LayerNorm's other form (TiledGemmOp::FuseLayerNorm): the op first normalises A's rows into the head of
  // its scratch (layer_norm_rows, unit affine: gamma and beta are in the packed weights and bias), then runs this
  // plain plan on them; scratch_bytes includes those rows.
  bool ln_rows = false;
  bool tc = false;  // a tensor-core config (gemm_tc.cl, NVIDIA: gemm_x* / conv_x* 3xTF32, gemm_d* / conv_d* FP64)
};

// Picks the tile config and split-K for an (M x N x K, batch) problem from a
// small occupancy/padding cost model (see gpu/tile_planner.cc) and fetches the
// kernels. An error means "the device has no tiled kernels": callers fall back.
// The delegate option gemm_tiles (benchmarks, tests): Ok when unset or naming a tile config; an error when it names
// none (a known config some op kind lacks, e.g. 16x64 for convs, still falls back per op).
// `tc` (TensorCoreGemm's answer for a GEMM's operands, TensorCoresWanted's for a conv): the tensor-core configs are
// candidates too (only they, when gemm_tiles forces one: "BMxBNtc").
Status CheckForcedTiles(const Device& dev);
Status PlanTiles(const Device& dev, bool conv, int M, int N, int K, int batch, TilePlan* out, bool tc = false);
// The cheapest unsplit GEMM plan (same cost model) among the configs with a LayerNorm twin (`gated`: a gated one,
// NAME_gg_ln), already swapped to it.
Status PlanLnTiles(const Device& dev, int M, int N, int K, int batch, bool gated, TilePlan* out, bool tc = false);
// Whether a GEMM of these operands may run on the tensor-core configs (gemm_tc.cl): the option tensor_cores=3xtf32
// or fp64 (auto resolves to fp64 where the FP64 kernels were built), or gemm_tiles forcing a "tc" config; A's k axis
// contiguous, B's n or k axis contiguous, fp32 B (the kernels exist only on NVIDIA's OpenCL; elsewhere the planner
// finds none and nothing changes).
bool TensorCoreGemm(const Device& dev, const GemmShape& s, bool b_half);
// The option side of that (also for the implicit-GEMM convolutions, conv_x* / conv_d*, whose operands always fit).
bool TensorCoresWanted(const Device& dev);
// Whether the device built the FP64 tensor-core kernels (NVIDIA sm_90: SDGPU_NV_SM90).
bool HasFp64TensorCoreKernels(const Device& dev);
// Winograd's GEMM of small maps (tile-major U): a gemm_t16x64 plan becomes gemm_s16x128 (gemm_tiled.kern: 16 FMAs per
// local read instead of 4) when that kernel has at least two 128-thread work-groups per compute unit, the fill at
// which it measured faster on the H200 (BENCHMARKS.md: 16x16 map, F4, 1280 -> 1280 channels, b1 0.100 vs
// 0.115 ms), unsplit. With fewer work-groups and max_splits > 1 it splits K instead, into as many slices (at most
// max_splits, each >= kSkinny4MinKSplit deep) as fit one wave at 4 work-groups per compute unit (the kernel's 128
// registers): the 8x8 map at F2, b1, 160 work-groups, 3 splits: GEMM 0.052 vs 0.061 ms, 0.084 vs 0.113 at 2560
// input channels (BENCHMARKS.md; a split-K plan needs its partials summed, which only pays without the
// reduce launch: Winograd's output transform sums them). Not under gemm_tiles (a forced config stays
// forced), nor when the backend lacks the kernel or does not report its compute units. True when it swapped the
// plan (same U layout; a split plan's scratch_bytes set, its reduce kernel left null).
bool UseSkinny4(const Device& dev, int M, int N, int K, int batch, TilePlan* plan, int max_splits = 1);
// Whether `kernel` reads B tile-major (BOperand::tile_major): gemm_t16x64 and gemm_s16x128.
bool ReadsTileMajorB(const Kernel& kernel);
// The plan with its GEMM and reduce kernels swapped for their gated-GELU twins (NAME_gg, gemm_tiled.kern); an error
// when the device lacks one.
Status GatedTwin(const Device& dev, TilePlan* plan);
// The plan with its GEMM kernel swapped for its LayerNorm twin (NAME_ln, gemm_tiled.kern); an error for a split plan
// (the twins need all of K in one work-group) or when the device lacks the twin.
Status LnTwin(const Device& dev, TilePlan* plan);

// Measured tile choice (delegate option gemm_autotune, GPU backends): the cost model above ranks configs from
// a coarse occupancy/padding model fitted on one GPU, and on the H200 its pick was up to 1.3x slower than the
// best config at some SD1.5 shapes (BENCHMARKS.md). With tuning on, an op's candidates are the cost model's
// plan plus every other config at its best split (split-K partials capped at max(plan's, 16 MiB)); at the
// op's first Enqueue each runs once to warm up and 3 times between two Device::Finish() calls (host wall
// time), and the fastest is kept. Winners are memoised process-wide per (device name, problem, caller key), and
// stored in the persistent cache (kind "tiles", keyed by the device, its driver, the delegate build and the
// problem), so each distinct shape tunes once per device: a later process (any model with that shape) reads the
// winner and launches nothing extra. Tuning time is bounded per delegate (option tuning_budget_ms, Device::
// tuning_budget_left_ns, kernel compiles of candidates included): a shape reached after the budget is spent, or
// whose estimate (its first candidate's launch time x the launches the tuning would make) exceeds what is left,
// keeps the cost model's plan, stored as its choice under that budget: a later start with the same budget reuses
// it (no tuning at warm starts, the same pixels each start), one with a larger budget tunes it. A candidate that
// would have to be compiled for this process alone (Device::ProgramsPersist false: PoCL) makes the shape untuned
// too. Below a 30 s budget no candidate is compiled for tuning at all: the tuner chooses among the kernels already
// built (a compile costs more than the whole default budget). Trade-off: the first invoke on a new device pays ~4
// launches per candidate per distinct shape and one Finish() per candidate; the op reserves the largest candidate's
// scratch; and the choice (hence the float rounding of split-K sums) may differ between devices. gemm_tiles (a
// forced config) disables it.
class TileTuner {
 public:
  // The first candidate is PlanTiles' plan for the same problem, then each other config's cost-model pick, then
  // the unsplit plans of the cheapest configs. `key`: whatever else makes problems of the same M x N x K x batch
  // run differently (strides, operand storage, conv geometry). `free_splits` > 1: the caller sums split-K partials
  // itself (no reduce launch; Tune's `launch` must then leave partials only), so splits up to that count of the
  // cheapest configs are candidates too, whatever the cost model (which charges a reduce) says of them.
  Status Init(const Device& dev, bool conv, int M, int N, int K, int batch, const std::string& key, bool enabled,
              int free_splits = 1, bool tc = false);
  // Scratch the op must reserve for the candidates (0 when not tuning).
  size_t scratch_bytes() const;
  bool pending() const { return !candidates_.empty(); }
  // Runs `launch` for each candidate (the same problem, same output every time) and stores the fastest
  // in *plan; the caller then launches *plan once more for its result. Runs at most once.
  Status Tune(const Device& dev, const std::function<Status(const TilePlan&)>& launch, TilePlan* plan);
  // GatedTwin on every candidate (before Tune).
  Status UseGatedTwins(const Device& dev);
  // LnTwin on every candidate that has one; the others (split plans, configs without the twin) are dropped. With
  // `rows_bytes` > 0 every candidate also stays as an ln_rows plan (its scratch grows by rows_bytes), and with
  // `twins` false only those do.
  void UseLnTwins(const Device& dev, size_t rows_bytes = 0, bool twins = true);
  // Drops the candidates whose scratch is above `bytes` (what the op's other scratch leaves of one device buffer).
  void KeepScratchWithin(size_t bytes);

 private:
  std::vector<TilePlan> candidates_;
  std::string key_;
};

// A GEMM B operand: device buffer + element offset (in halves when `half`: packed weights with weights_fp16, or a B
// tensor of the partition with half activation storage).
struct BOperand {
  const Buffer* buffer = nullptr;
  int offset = 0;
  bool half = false;
  // Stored [batch][ceil(N/64)][K][64] (the skinny 16x64 kernel's contiguous slabs); only with that kernel.
  bool tile_major = false;
};

// Enqueues the tiled GEMM `s` (strides sbb/sbk/sbn of s apply to `b`); `bias` may be null; `residual` (with its
// input) is the epilogue of GpuOp::FuseResidual (batch 1 only; the split-K reduce applies it when splitting).
// `partials_only`: a split plan leaves its partials [batch][split][M][N] in `scratch` for the caller to sum
// (no reduce launch, no bias / activation / residual: the caller's next kernel applies them). The partials are
// float32 in every activation storage, from scratch's byte offset whatever scratch.elem_bytes says. c, a and the
// residual input are ACT tensors (TensorRef::elem_offset()), except a and c with s.float_ac (float32: elem_bytes 4).
// A LayerNorm plan (TilePlan::ln) takes `ln_colsums`, where the column sums of its gamma-scaled B start in the bias
// buffer, in floats after the bias (-1: none), and `ln_eps`.
Status LaunchTiledGemm(const Device& dev, const TilePlan& plan, const GemmShape& s, const TensorRef& c,
                       const TensorRef& a, const BOperand& b, const TensorRef* bias, const TensorRef& scratch,
                       Timings* timings, const Residual& residual = Residual(),
                       const TensorRef& residual_input = TensorRef(), bool partials_only = false,
                       int ln_colsums = -1, float ln_eps = 0.0f);

// Device memory that device-side weight producers upload the model's bytes into before a kernel transforms them
// (PackedWeights::DeviceProducer): Device::staging_buffers() buffers taken in turn by consecutive producers, each
// grown when a larger weight comes. OpenCL's queue runs an upload after the kernel that read the buffer's previous
// contents, so one does; GL's host writes wait for that kernel, so two let the next weight go up while the last one
// is transformed.
class DeviceStaging {
 public:
  // `ring`: upload through the device's UploadRing where it has one (PrepareWeights' shared staging; a weight made
  // alone at its first Enqueue goes directly).
  explicit DeviceStaging(bool ring = false) : want_ring_(ring) {}
  // Uploads `bytes` of `src` (model data, valid for the interpreter's lifetime: the copy may still be in flight on
  // return) and gives the buffer holding them.
  Status Upload(const Device& dev, const void* src, size_t bytes, const Buffer** out);
  // A second buffer of at least `bytes`, reused the same way: a half weight's float32 values before pack_half.
  Status Scratch(const Device& dev, size_t bytes, const Buffer** out);

 private:
  std::vector<std::unique_ptr<Buffer>> buffers_;  // Device::staging_buffers() of them, used in turn
  size_t next_ = 0;
  std::unique_ptr<Buffer> scratch_;
  bool want_ring_ = false;
  std::unique_ptr<Device::UploadRing> ring_;  // made at the first Upload; declared last: its writes end first
};

// A constant GEMM operand owned by its op, made once before the first invoke (gpu/weight_prep.h) -- or lazily at
// the op's first Enqueue -- as float32 or (delegate option weights_fp16) as half:
//   * on the device when the op set a DeviceProducer (the model's bytes uploaded as stored, one kernel transforms
//     them: Winograd's U, the packing transposes; half weights then through pack_half), which uploads less (U is
//     a^2/9 x the filter) and leaves the host idle;
//   * else on the host (`produce`, e.g. the LayerNorm and gated-GELU folds), then uploaded.
// Deferred on purpose: the backend builds every op once just to validate the graph and throws it away, so packing
// at construction would transform and upload every weight twice. `produce` must stay callable until then (it reads
// the model's constant tensors, which live as long as the interpreter).
class PackedWeights {
 public:
  // Enqueues the work that fills `dst` (elements() floats) on the device, uploading through `staging`.
  using DeviceProducer = std::function<Status(const Device& dev, const Buffer& dst, DeviceStaging* staging)>;

  // `tile_major`: `produce` writes BOperand::tile_major's layout (operand() says so to the launcher).
  PackedWeights(size_t elements, bool half, std::function<void(float*)> produce, bool tile_major = false)
      : elements_(elements), half_(half), tile_major_(tile_major), produce_(std::move(produce)) {}
  // Makes the data now if not made yet: on the device when it can (`staging`: shared scratch, else its own), else
  // on the host.
  Status Ensure(const Device& dev, DeviceStaging* staging = nullptr);
  bool ready() const { return buffer_ != nullptr; }
  BOperand operand() const { return BOperand{buffer_.get(), 0, half_, tile_major_}; }
  size_t elements() const { return elements_; }
  // The device-side producer of the float32 values. A half operand takes it only with `pack_half` (PackHalfKernel):
  // the values go to a float32 scratch buffer (DeviceStaging::Scratch), pack_half writes the halves, and the host
  // converts nothing; without it a half operand is made on the host. Cleared by Then().
  void SetDeviceProducer(DeviceProducer p, const Kernel* pack_half = nullptr) {
    if (half_ && (pack_half == nullptr || elements_ > static_cast<size_t>(INT_MAX) - 1)) return;
    device_produce_ = std::move(p);
    pack_half_ = pack_half;
  }
  bool has_device_producer() const { return static_cast<bool>(device_produce_); }
  // The host path in two halves (gpu/weight_prep.h runs them on two threads): fill `dst` (elements() zeroed floats),
  // then convert (half) and upload it.
  void ProduceHost(float* dst) const { produce_(dst); }
  Status UploadHost(const Device& dev, const float* data);
  // The host data's producer, and a step appended to it (before the first Ensure). A host step means the data is
  // no longer what a device producer makes: Then() drops it.
  const std::function<void(float*)>& producer() const { return produce_; }
  void Then(std::function<void(float*)> post) {
    device_produce_ = nullptr;
    produce_ = [first = std::move(produce_), post = std::move(post)](float* dst) {
      first(dst);
      post(dst);
    };
  }

 private:
  size_t elements_;
  bool half_;
  bool tile_major_;
  std::function<void(float*)> produce_;
  DeviceProducer device_produce_;
  const Kernel* pack_half_ = nullptr;
  std::unique_ptr<Buffer> buffer_;
};

// A DeviceProducer for the packing transpose: the model's `rows` x `cols` row-major matrix `src` (host, interpreter
// lifetime) uploaded as stored and written transposed (cols x rows) by `transpose` (transpose_tiled; nullptr: none,
// the host packs).
PackedWeights::DeviceProducer DeviceTranspose(const Kernel* transpose, const float* src, int rows, int cols);
// The transpose_tiled kernel when the device has it and can run its 32 x 8 work-groups, else nullptr (requested at
// op construction, so lazy backends build it with the model's kernels).
const Kernel* TransposeKernel(const Device& dev);

// The pack_half kernel (gpu/kernels/copy.kern) when the device has it, else nullptr (requested at op construction,
// as TransposeKernel).
const Kernel* PackHalfKernel(const Device& dev);

// Transposes a rows x cols row-major matrix into `dst` (cols x rows); from 2^20 elements on several host threads.
void TransposeInto(const float* src, int rows, int cols, float* dst);

// `inputs`: the node inputs read on the device (A, B[, bias]).
// `autotune`: delegate option gemm_autotune (TileTuner).
Status MakeGemm(const Device& dev, const GemmShape& s, std::vector<int> inputs, bool autotune,
                std::unique_ptr<GpuOp>* out);
// CONV_2D / SdConv2DWinograd's direct path with a constant filter (`filter` = OHWI host data,
// valid for the interpreter's lifetime); nullptr reads the filter input on the device.
Status MakeConvWithFilter(const Device& dev, const ConvShape& s, const float* filter, bool weights_fp16, bool autotune,
                          std::unique_ptr<GpuOp>* out);

// ops/conv2d_winograd/gpu.cc: SdConv2DWinograd (input transform, batched tiled GEMM, output transform);
// falls back to the implicit-GEMM convolution where the device lacks the kernels or the
// filter is not a constant.
Status MakeWinogradConv(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);

}  // namespace sdgpu::gpu
