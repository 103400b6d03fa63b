// SdConv2DWinograd on a GPU backend: F(m x m, 3 x 3), m = attrs.tile in {2, 4, 6}, alpha = m + 2,
// as three launches over whole tensors (the CPU reference's layout, ops/conv2d_winograd/cpu.h):
//   winograd_input_fM[_gn | _gnsilu](V, vo, X, xo, int H, int W, int Ci, int tiles_h, int tiles_w, int T, int t0,
//                     int pad, NT, nto)
//       V[a*a][T][Ci] = BT d BT^T per input tile;      global = (Ci, T), local = (64, 1, 1)
//       (_gn / _gnsilu: the input-norm prologue, GpuOp::FuseInputNorm: d = SiLU(x * scale + shift) with a
//       GroupNorm's per-(image, channel) table NT; that GroupNorm then writes only the table)
//   gemm_t* (matmul_ops.h LaunchTiledGemm), batch a*a: M[k] (T x Co) = V[k] (T x Ci) . U[k] (Ci x Co)
//   winograd_output_fM[_sum](Y, yo, M, mo, bias, biaso, int Ho, int Wo, int Co, int tiles_h, int tiles_w, int T,
//                      int t0, int act, R, ro, int rrows, int rsm, int splits)
//       y = act(AT M AT^T + bias) cropped to Ho x Wo (+ the residual epilogue, GpuOp::FuseResidual);
//       global = (Co, T), local = (64, 1, 1)
//       winograd_output_fM[_sum]_st (..., part, po, int G): the same, also writing the (count, mean, M2) chunk
//       partials of the SdGroupNorm that reads y (GpuOp::EmitGroupStats, GpuPartition::FuseNormStatistics)
// (Kernel source, one for every GPU backend: ops/conv2d_winograd/gpu.kern.) U[a*a][Ci][Co] = G g G^T is made once
// before the first invoke (gpu/weight_prep.h): on the device by winograd_filter_fM from the filter as stored (in
// float64 where an OpenCL device has it, bit for bit the host's transform; float elsewhere), else on the host in
// float64 (one rounding, like the CPU backend) and uploaded (see PackedWeights).
// weights_fp16 stores U as half for F(2x2) only: the output transform's cancellation amplifies U's
// rounding (measured, Ci 32..320, max |err| / max |y|: F2 3e-4, F4 5e-3, F6 3e-2 .. 8e-2), so F4/F6 keep
// float32 U -- pick F2 tiles where weight memory matters more than the FLOP savings. V and M live in the op's arena
// scratch: a*a*T*(Ci + Co) float32 elements whatever the activation storage. X, Y and R are half with
// activations_fp16, V and M are not: the transforms amplify their rounding like a half U's (simulated, Ci 128,
// max |err| / max |y| with half V and M: F2 6e-4, F4 1.1e-2, F6 1.4e-2), so every tile stays in the Winograd
// domain at fp32 accuracy for 2x the scratch bytes of half V and M (the GEMM's A and C are float:
// GemmShape::float_ac). Plus float32 split-K partials if the GEMM plan splits (rarely: a*a batches fill the device,
// except the skinny GEMM of b1's 8x8 map, UseSkinny4); the output transform sums the partials
// (winograd_output_f*_sum, `splits`), so no gemm_splitk_reduce launch writes M first.
//
// Bands: where V or M of the whole map would exceed what one kernel operand may address (Device::
// max_operand_bytes_anywhere: GL's storage block size, 128 MiB on many phones), V + M one device buffer (OpenCL's
// CL_DEVICE_MAX_MEM_ALLOC_SIZE, ~1 GB on Adreno) or the kernels' int32 offsets, the three launches run per band of
// consecutive tiles (t0 .. t0 + band - 1; the kernels take t0), with V and M sized for one band: SD1.5's VAE at
// 512 x 512 has F6 V + M of 485 MB per 128-channel conv, which ran as direct convolutions with 128 MiB blocks. The
// scratch shrinks with the band, so the arena does too.
// Falls back to the implicit-GEMM convolution (same math, direct summation, within the same error
// bound) when the device has no Winograd kernels, when the filter is not a
// constant in the model (a DEQUANTIZE output), when U would exceed one kernel operand or a band would be below
// kMinTiles, or when the map has too few tiles T for the batched GEMM: below kMinTiles (16) a GEMM
// row tile is mostly padding while the a*a GEMMs read a*a/9 x the filter bytes; from 16 tiles the
// skinny 16-row kernel gemm_t16x64 streams the transformed weights once per 16 tiles (with that plan
// U is uploaded tile-major, [a*a][ceil(Co/64)][Ci][64], a contiguous slab per work-group: 6-7% faster
// on the H200, BENCHMARKS.md; the plan is then not re-tuned, U's layout being fixed), or, where it fills
// the device, the float4-column gemm_s16x128 on the same layout (UseSkinny4, matmul_ops.h). A backend
// without that kernel (GL today) needs kMinTilesNoSkinny (64) tiles, a full 64-row tile (H200, 1280
// channels, 64-row tiles only: 8x8 map F2 0.17 ms vs direct 0.10 ms, 16x16 F4 0.32 vs 0.30; 16x16
// F2, 64 tiles: 0.18). The planner's GPU profiles mirror this (winograd/cost.py min_tiles).
#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "gpu/matmul_ops.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

#include "ops/conv2d_winograd/matrices.inc"

constexpr size_t kTransformWg = 64;
constexpr int kMinTiles = 16;          // smallest tile count T run in the Winograd domain (header comment)
constexpr int kMinTilesNoSkinny = 64;  // the same without the skinny GEMM kernel
constexpr int kMaxSkinnySplits = 4;    // UseSkinny4's split-K cap (summed by the output transform)
// The tile tuner's split-K candidates for the batched GEMM (2 and 4 K slices of its cheapest configs; the output
// transform sums the partials, so a split costs no reduce launch). Grids of a few work-groups per compute unit
// (32x32 and 16x16 maps at b1: 1 x N/64 tiles x a*a batches) can gain from more, shorter work-groups.
constexpr int kMaxWinogradTuneSplits = 4;

struct WinogradGeom {
  int m = 0, a = 0, n = 0, h = 0, w = 0, ci = 0, co = 0, ho = 0, wo = 0, pad = 0;
  int tiles_h = 0, tiles_w = 0, tiles = 0;
};

const double* GMatrix(int m) { return m == 2 ? kF2_G : m == 4 ? kF4_G : kF6_G; }

// u[(i*a + j)][ci][co] = (G f G^T)[i][j] for the 3x3 filter f = filter[co, :, :, ci] (OHWI), input
// channels [ci0, ci1); tile_major: u[(i*a + j)][co / 64][ci][co % 64] instead (columns padded to 64, left
// as the caller zeroed them).
void TransformFilterChannels(const WinogradGeom& g, const float* filter, float* u, int ci0, int ci1, bool tile_major) {
  const double* G = GMatrix(g.m);
  const int a = g.a;
  const size_t plane = tile_major ? static_cast<size_t>(g.ci) * ((g.co + 63) / 64) * 64 : static_cast<size_t>(g.ci) * g.co;
  auto at = [&](int ci, int co) {
    return tile_major ? (static_cast<size_t>(co / 64) * g.ci + ci) * 64 + co % 64 : static_cast<size_t>(ci) * g.co + co;
  };
  std::vector<double> f(static_cast<size_t>(g.co) * 9);
  for (int ci = ci0; ci < ci1; ++ci) {
    for (int co = 0; co < g.co; ++co) {
      for (int rs = 0; rs < 9; ++rs) f[static_cast<size_t>(co) * 9 + rs] = filter[(static_cast<size_t>(co) * 9 + rs) * g.ci + ci];
    }
    for (int co = 0; co < g.co; ++co) {
      const double* fc = &f[static_cast<size_t>(co) * 9];
      double gf[8][3];  // G f
      for (int i = 0; i < a; ++i) {
        for (int s = 0; s < 3; ++s) gf[i][s] = G[i * 3] * fc[s] + G[i * 3 + 1] * fc[3 + s] + G[i * 3 + 2] * fc[6 + s];
      }
      for (int i = 0; i < a; ++i) {
        for (int j = 0; j < a; ++j) {
          const double v = gf[i][0] * G[j * 3] + gf[i][1] * G[j * 3 + 1] + gf[i][2] * G[j * 3 + 2];
          u[(i * a + j) * plane + at(ci, co)] = static_cast<float>(v);
        }
      }
    }
  }
}

// The whole transform, split over input channels in whole 8-channel chunks on several host threads: it runs once, at
// the op's first Enqueue, but SD1.5's UNet has ~500M filter weights to transform in float64 (~15-20 s on one
// core of the H200 host).
void TransformFilter(const WinogradGeom& g, const float* filter, float* u, bool tile_major) {
  HostParallelRanges(g.ci, 8, true, [&](int64_t c0, int64_t c1) {
    TransformFilterChannels(g, filter, u, static_cast<int>(c0), static_cast<int>(c1), tile_major);
  });
}

class WinogradOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  using GpuOp::float32_inputs_;
  using GpuOp::scratch_bytes_;
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef& scratch,
                 Timings* timings) override {
    SDGPU_RETURN_IF_ERROR(u_->Ensure(dev));
    for (int t0 = 0; t0 < g_.tiles; t0 += band_) {
      SDGPU_RETURN_IF_ERROR(EnqueueBand(dev, in, out, scratch, t0, std::min(band_, g_.tiles - t0), timings));
    }
    return Status::Ok();
  }

  // The three launches for tiles t0 .. t0 + tiles - 1 (the whole map unless it is banded, MakeWinogradConv).
  Status EnqueueBand(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out,
                     const TensorRef& scratch, int t0, int tiles, Timings* timings) {
    const int a2 = g_.a * g_.a;
    // V, M and the GEMM's split-K partials are float32 whatever the activation storage (the header comment).
    const size_t eb = sizeof(float);
    const TensorRef v{scratch.buffer, scratch.offset, eb};
    const TensorRef mbuf{scratch.buffer, scratch.offset + static_cast<size_t>(a2) * tiles * g_.ci * eb, eb};
    const TensorRef rest{scratch.buffer, mbuf.offset + static_cast<size_t>(a2) * tiles * g_.co * eb, eb};
    GemmShape gemm = gemm_;  // M[k] (tiles x Co) = V[k] (tiles x Ci) . U[k]
    gemm.M = tiles;
    gemm.sab = tiles * g_.ci;
    gemm.scb = tiles * g_.co;
    const Dim3 local = {kTransformWg, 1, 1};
    // With the input-norm prologue in[0] is the GroupNorm's table and norm_input_ the tensor to transform.
    const TensorRef& x = norm_ > 0 ? norm_input_ : in[0];
    Args in_args;
    in_args.Buf(v).Buf(x);
    in_args.Int(g_.h).Int(g_.w).Int(g_.ci).Int(g_.tiles_h).Int(g_.tiles_w).Int(tiles).Int(t0).Int(g_.pad);
    in_args.Buf(in[0].buffer, in[0].elem_offset(sizeof(float)));  // NT, float (read by the _gn / _gnsilu twins only)
    SDGPU_RETURN_IF_ERROR(dev.Launch(*input_[norm_], in_args,
                                     {static_cast<size_t>(g_.ci), static_cast<size_t>(tiles), 1}, local, timings));
    if (tuner_.pending()) {  // the input transform above is queued before every candidate (the first band: a whole one)
      // the output transform sums split-K partials, so a split candidate is timed without a reduce launch
      SDGPU_RETURN_IF_ERROR(tuner_.Tune(
          dev,
          [&](const TilePlan& p) {
            return LaunchTiledGemm(dev, p, gemm, mbuf, v, u_->operand(), nullptr, rest, nullptr, {}, {},
                                   p.splits > 1);
          },
          &plan_));
    }
    // A split plan's partials are summed by the output transform (no reduce launch).
    const bool sum_partials = plan_.splits > 1;
    SDGPU_RETURN_IF_ERROR(
        LaunchTiledGemm(dev, plan_, gemm, mbuf, v, u_->operand(), nullptr, rest, timings, {}, {}, sum_partials));
    const TensorRef& m = sum_partials ? rest : mbuf;
    Args o;
    // the bias is float whatever the activation storage (float32_inputs_)
    o.Buf(out).Buf(m);
    o.Buf(in[2].buffer, in[2].elem_offset(sizeof(float)));
    o.Int(g_.ho).Int(g_.wo).Int(g_.co).Int(g_.tiles_h).Int(g_.tiles_w).Int(tiles).Int(t0).Int(act_);
    AddResidualArgs(residual_, residual_input_, x, &o);
    o.Int(sum_partials ? plan_.splits : 1);
    if (stats_groups_ > 0) o.Buf(stats_buffer_.buffer, stats_buffer_.elem_offset(sizeof(float))).Int(stats_groups_);
    const Kernel* output = stats_groups_ > 0 ? output_st_[sum_partials ? 1 : 0] : sum_partials ? output_sum_ : output_;
    return dev.Launch(*output, o, {static_cast<size_t>(g_.co), static_cast<size_t>(tiles), 1}, local, timings);
  }

  int EmitGroupStats(const Device& dev, int64_t n, int64_t positions, int64_t channels, int groups) override {
    if (!stats_ok_ || groups <= 0 || n != g_.n || positions != int64_t{g_.ho} * g_.wo || channels != g_.co ||
        g_.co % groups != 0) {
      return 0;
    }
    const int64_t chunks = int64_t{g_.tiles_h} * g_.tiles_w * (g_.co / groups);
    if (3 * chunks * g_.n * groups > INT_MAX) return 0;
    // requested only now that they are used (a lazy backend builds only the kernels a model asks for)
    if (!dev.GetKernel("winograd_output" + suffix_ + "_st", &output_st_[0]).ok() ||
        !dev.GetKernel("winograd_output" + suffix_ + "_sum_st", &output_st_[1]).ok()) {
      output_st_[0] = output_st_[1] = nullptr;
      return 0;
    }
    stats_groups_ = groups;
    return static_cast<int>(chunks);
  }

  // The output transforms index R without a division per pixel, which needs rows = 1 or a multiple of an image's
  // pixels (every layout GpuPartition folds; any other leaves the ADD to run).
  bool FuseResidual(const Device&, const Residual& r) override {
    const int64_t hw = int64_t{g_.ho} * g_.wo;
    if (r.rows != 1 && (hw <= 0 || r.rows % hw != 0)) return false;
    return AcceptResidual(r);
  }
  void CollectWeights(std::vector<PackedWeights*>* out) override { out->push_back(u_.get()); }
  bool tuning_pending() const override { return tuner_.pending(); }

  bool FuseInputNorm(const Device& dev, bool silu) override {
    if (!norm_ok_ || !dev.GetKernel("winograd_input" + suffix_ + (silu ? "_gnsilu" : "_gn"), &input_[silu ? 2 : 1]).ok()) {
      return false;  // only on devices with the prologue
    }
    norm_ = silu ? 2 : 1;
    return true;
  }

  WinogradGeom g_;
  int band_ = 0;  // tiles per launch (g_.tiles unless the map is banded)
  int act_ = 0;
  int norm_ = 0;  // input-norm prologue: 0 none, 1 affine, 2 affine + SiLU (input_[norm_])
  GemmShape gemm_;
  TilePlan plan_;
  TileTuner tuner_;
  std::string suffix_;  // "_fM"
  // winograd_input_fM, and its _gn / _gnsilu twins once FuseInputNorm asked for them (norm_ok_: the device has
  // them), else null
  const Kernel* input_[3] = {nullptr, nullptr, nullptr};
  bool norm_ok_ = false;
  const Kernel* output_ = nullptr;
  const Kernel* output_sum_ = nullptr;  // winograd_output_fM_sum once a split plan needs it, else null
  // the GroupNorm statistics epilogue (EmitGroupStats): winograd_output_fM[_sum]_st once asked for (stats_ok_)
  const Kernel* output_st_[2] = {nullptr, nullptr};
  bool stats_ok_ = false;
  int stats_groups_ = 0;  // > 0: the output transform also writes that GroupNorm's partials (EmitGroupStats)
  std::unique_ptr<PackedWeights> u_;
};

int TfLiteActivation(ConvActivation a) {
  switch (a) {
    case ConvActivation::kNone: return 0;
    case ConvActivation::kRelu: return 1;
    case ConvActivation::kReluN1To1: return 2;
    case ConvActivation::kRelu6: return 3;
    case ConvActivation::kTanh: return 4;
  }
  return 0;
}

}  // namespace

Status MakeWinogradConv(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto& attrs = std::get<Conv2DWinogradAttrs>(node.sd_op->attrs);
  const Dims x = DimsOf(node.inputs[0]), w = DimsOf(node.inputs[1]), o = DimsOf(node.outputs[0]);
  WinogradGeom g;
  g.m = attrs.tile;
  g.a = attrs.tile + 2;
  g.n = static_cast<int>(x[0]);
  g.h = static_cast<int>(x[1]);
  g.w = static_cast<int>(x[2]);
  g.ci = static_cast<int>(x[3]);
  g.co = static_cast<int>(w[0]);
  g.ho = static_cast<int>(o[1]);
  g.wo = static_cast<int>(o[2]);
  g.pad = attrs.same_padding ? 1 : 0;
  g.tiles_h = (g.ho + g.m - 1) / g.m;
  g.tiles_w = (g.wo + g.m - 1) / g.m;
  g.tiles = g.n * g.tiles_h * g.tiles_w;
  const int act = TfLiteActivation(attrs.activation);

  const abi::TfLiteTensor* filter = node.inputs[1];
  const bool constant_filter = IsConstant(filter) && filter->type == abi::kTfLiteFloat32;
  const int64_t a2 = int64_t{g.a} * g.a;
  // U (float32 here; a tile-major U pads Co to 64) is one kernel operand: on GL it must fit one storage block binding
  // (GL_MAX_SHADER_STORAGE_BLOCK_SIZE, 128 MiB on many phones), which the model's tensors are checked against
  // (gpu_backend.cc) but this derived one is not. SD1.5's 1280-channel F4 U is 236 MB.
  const int64_t co_padded = std::max<int64_t>(g.co, int64_t{(g.co + 63) / 64} * 64);
  const uint64_t operand_limit = dev.max_operand_bytes_anywhere();
  const bool fits = a2 * g.ci * g.co <= INT_MAX &&
                    static_cast<uint64_t>(int64_t{sizeof(float)} * a2 * g.ci * co_padded) <= operand_limit;
  // V and M (float32, a2 x band x Ci / Co) each one operand within the int32 offsets, both in one device buffer: the
  // most tiles per band (the header comment). Bands are whole 64-tile GEMM row tiles where more than one is needed.
  const int64_t per_tile = a2 * std::max(g.ci, g.co);
  const int64_t band_max = std::min<int64_t>({int64_t{g.tiles}, INT_MAX / per_tile,
                                              static_cast<int64_t>(operand_limit / (sizeof(float) * per_tile)),
                                              static_cast<int64_t>(dev.max_buffer_bytes() /
                                                                   (sizeof(float) * a2 * (g.ci + g.co)))});
  const int band = band_max >= g.tiles ? g.tiles : static_cast<int>(band_max >= 64 ? band_max / 64 * 64 : band_max);
  const size_t vm_bytes = static_cast<size_t>(a2 * band * (int64_t{g.ci} + g.co)) * sizeof(float);  // V and M
  auto u = std::make_unique<WinogradOp>();
  const std::string suffix = "_f" + std::to_string(g.m);
  const int min_tiles = dev.HasKernel("gemm_t16x64") ? kMinTiles : kMinTilesNoSkinny;
  bool ok = constant_filter && fits && g.tiles >= min_tiles && band >= min_tiles &&
            dev.GetKernel("winograd_input" + suffix, &u->input_[0]).ok() &&
            dev.GetKernel("winograd_output" + suffix, &u->output_).ok();
  // The fused variants exist on every device, but each is requested (built) only where it is used: _gn / _gnsilu
  // by FuseInputNorm, _st / _sum_st by EmitGroupStats, _sum below.
  const bool fusion = ok && dev.HasKernel("winograd_input" + suffix + "_gn") &&
                      dev.HasKernel("winograd_input" + suffix + "_gnsilu") &&
                      dev.HasKernel("winograd_output" + suffix + "_sum");
  u->suffix_ = suffix;
  u->norm_ok_ = fusion;
  u->stats_ok_ = fusion && dev.HasKernel("winograd_output" + suffix + "_st") &&
                 dev.HasKernel("winograd_output" + suffix + "_sum_st");
  const bool half_u = node.weights_fp16 && g.m == 2;  // see the header comment
  bool tc = false;                                     // the batched GEMM on tensor cores (TensorCoreGemm)
  if (ok) {
    GemmShape& s = u->gemm_;  // one band's (EnqueueBand)
    s.M = band;
    s.N = g.co;
    s.K = g.ci;
    s.batch = static_cast<int>(a2);
    s.sab = band * g.ci;
    s.sam = g.ci;
    s.sak = 1;
    s.sbb = g.ci * g.co;
    s.sbk = g.co;
    s.sbn = 1;
    s.scb = band * g.co;
    s.scm = g.co;
    s.float_ac = true;  // V and M (header comment)
    // no tensor cores under half storage, as for every GEMM (backends/opencl/nvidia is not built for it)
    tc = !dev.default_act_half() && TensorCoreGemm(dev, s, half_u);
    ok = PlanTiles(dev, false, s.M, s.N, s.K, s.batch, &u->plan_, tc).ok();
    if (ok) UseSkinny4(dev, s.M, s.N, s.K, s.batch, &u->plan_, fusion ? kMaxSkinnySplits : 1);
    // V, M and the plan's split-K partials are one scratch region, so one device buffer (OpenCL: at most
    // CL_DEVICE_MAX_MEM_ALLOC_SIZE, ~1 GB on Adreno; SD1.5's VAE at 512 x 512 has F2 V + M of 1.07 GB).
    ok = ok && vm_bytes <= dev.max_buffer_bytes() && u->plan_.scratch_bytes <= dev.max_buffer_bytes() - vm_bytes;
  }
  if (ok && fusion) {
    // A split plan's partials are summed by the _sum output transform: requested now when the plan splits, else as
    // a tuning candidate's kernel (built only if a tuned split plan ever launches it).
    std::optional<Device::SpeculativeKernels> speculative;
    if (u->plan_.splits <= 1) speculative.emplace(dev);
    ok = dev.GetKernel("winograd_output" + suffix + "_sum", &u->output_sum_).ok();
  }
  if (!ok) {  // direct convolution, same result up to rounding
    ConvShape s;
    s.n = g.n;
    s.h = g.h;
    s.w = g.w;
    s.ci = g.ci;
    s.co = g.co;
    s.kh = s.kw = 3;
    s.oh = g.ho;
    s.ow = g.wo;
    s.ph = s.pw = g.pad;
    s.act = act;
    s.has_bias = true;
    return MakeConvWithFilter(dev, s, constant_filter ? static_cast<const float*>(filter->data.data) : nullptr,
                              node.weights_fp16, node.gemm_autotune, out);
  }
  u->g_ = g;
  u->band_ = band;
  u->act_ = act;
  const float* fdata = static_cast<const float*>(filter->data.data);
  // The skinny kernel streams U faster from per-work-group slabs (header comment); U's layout is fixed at upload,
  // so that plan is then kept (no tuning: the tuner could pick a kernel that reads U row-major).
  const int col_tiles = (g.co + 63) / 64;
  const bool tile_major = ReadsTileMajorB(*u->plan_.kernel) && a2 * g.ci * col_tiles * 64 <= INT_MAX;
  if (tile_major) u->gemm_.sbb = g.ci * col_tiles * 64;
  u->u_ = std::make_unique<PackedWeights>(
      static_cast<size_t>(a2) * g.ci * (tile_major ? col_tiles * 64 : g.co), half_u,
      [g, fdata, tile_major](float* dst) { TransformFilter(g, fdata, dst, tile_major); }, tile_major);
  // U on the device (winograd_filter_fM, the end of ops/conv2d_winograd/gpu.kern): the filter goes up
  // as stored, a^2/9 x fewer bytes than U, and the host does no transform.
  const Kernel* filter_kernel = nullptr;
  const Kernel* pack_half = half_u ? PackHalfKernel(dev) : nullptr;  // F(2x2)'s half U: packed on the device too
  if ((!half_u || pack_half != nullptr) && dev.HasKernel("winograd_filter" + suffix) &&
      dev.GetKernel("winograd_filter" + suffix, &filter_kernel).ok() && dev.max_work_group_size() >= kTransformWg) {
    const int ld = tile_major ? col_tiles * 64 : 0;
    u->u_->SetDeviceProducer([g, fdata, filter_kernel, ld](const Device& d, const Buffer& dst,
                                                           DeviceStaging* staging) -> Status {
      const Buffer* raw = nullptr;
      SDGPU_RETURN_IF_ERROR(staging->Upload(d, fdata, sizeof(float) * 9 * static_cast<size_t>(g.ci) * g.co, &raw));
      // winograd_filter_fM(U, uo, F, fo, int Ci, int Co, int ld)
      Args a;
      a.Buf(&dst, 0).Buf(raw, 0).Int(g.ci).Int(g.co).Int(ld);
      return d.Launch(*filter_kernel, a, {static_cast<size_t>(ld > 0 ? ld : g.co), static_cast<size_t>(g.ci), 1},
                      {kTransformWg, 1, 1}, nullptr);
    }, pack_half);
  }
  u->device_inputs_ = {0, 2};
  u->float32_inputs_ = {2};  // the bias (the output transform's float `bias`)
  SDGPU_RETURN_IF_ERROR(u->tuner_.Init(dev, false, u->gemm_.M, u->gemm_.N, u->gemm_.K, u->gemm_.batch,
                                       half_u ? "wino,h" : "wino,f", node.gemm_autotune && !tile_major,
                                       fusion ? kMaxWinogradTuneSplits : 1, tc));
  u->tuner_.KeepScratchWithin(dev.max_buffer_bytes() - vm_bytes);  // (the plan fits: checked above)
  // V and M are float32; so are the split-K partials (sized so by the planners)
  u->scratch_bytes_ = vm_bytes + std::max(u->plan_.scratch_bytes, u->tuner_.scratch_bytes());
  *out = std::move(u);
  return Status::Ok();
}

}  // namespace sdgpu::gpu
