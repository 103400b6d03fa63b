// The GEMM-shaped ops (FULLY_CONNECTED, BATCH_MATMUL, CONV_2D) and the launch of a tiled GEMM / conv plan; the
// kernels, the tile planner and the tuner are described in gpu/tile_planner.cc, the weight packing is
// gpu/packed_weights.cc.
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

// The split-K partials at `scratch` (a byte offset): written through the GEMM's C (b_half bit 3 under half storage,
// gpu/kernels/gemm_tiled.kern) and read back by the reduce (or the caller, partials_only): float32 in every storage.
TensorRef Partials(const TensorRef& scratch) { return TensorRef{scratch.buffer, scratch.offset, sizeof(float)}; }

// b_half bit 3: the GEMM / conv writes C as float32 partials (a split plan under half activation storage).
int PartialsBit(const Device& dev, bool split) { return split && dev.act_half() ? 8 : 0; }

// gemm_splitk_reduce: C[b, m, n] = act(sum of the plan's split partials in `scratch` + bias[n]) (see the header).
Status LaunchSplitKReduce(const Device& dev, const TilePlan& p, const TensorRef& c, int scb, int scm,
                          const TensorRef& scratch, const TensorRef& bias, bool has_bias, int M, int N, int batch,
                          int act, const Residual& residual, const TensorRef& residual_input, Timings* timings) {
  Args r;
  r.Buf(c).Int(scb).Int(scm).Buf(Partials(scratch));
  r.Int(p.splits);
  r.Buf(bias).Int(has_bias ? 1 : 0).Int(M).Int(N).Int(act);
  AddResidualArgs(residual, residual_input, scratch, &r);
  // any work-group size (the kernel bounds-checks): 16 x 16 where the device allows it
  const size_t rows = std::clamp<size_t>(dev.max_work_group_size() / 16, 1, 16);
  return dev.Launch(*p.reduce, r, {static_cast<size_t>(N), static_cast<size_t>(M), static_cast<size_t>(batch)},
                    {16, rows, 1}, timings);
}

}  // namespace

Status LaunchTiledGemm(const Device& dev, const TilePlan& p, const GemmShape& s, const TensorRef& c,
                       const TensorRef& a, const BOperand& b, const TensorRef* bias, const TensorRef& scratch,
                       Timings* timings, const Residual& residual, const TensorRef& residual_input,
                       bool partials_only, int ln_colsums, float ln_eps) {
  if (p.ln && (ln_colsums < 0 || bias == nullptr || p.splits > 1)) {
    return Status::Error("a LayerNorm GEMM needs its bias with the column sums behind it");
  }
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
  const TensorRef partials = Partials(scratch);
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
                                                              (s.float_ac && dev.act_half() ? 4 : 0) |
                                                              PartialsBit(dev, split));
  g.Buf(bias_ref).Int(has_bias && !split ? 1 : 0);
  g.Int(s.M).Int(s.N).Int(s.K).Float(s.alpha).Int(split ? 0 : s.act).Int(p.splits).Int(p.k_split);
  AddResidualArgs(split ? Residual() : residual, residual_input, a, &g);
  if (p.ln) g.Int(ln_colsums).Float(ln_eps);
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

// gemm_f32 / conv2d_igemm's work-group rows (gemm.kern): kTile, or half as many work-items each computing two rows
// where the device allows fewer than kTile * kTile invocations (GL ES 3.1 guarantees 128).
size_t NaiveRowsPerGroup(const Device& dev) {
  return dev.max_work_group_size() >= kTile * kTile ? kTile : kTile / 2;
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
    const size_t wy = NaiveRowsPerGroup(dev);
    return dev.Launch(*k_, a, {static_cast<size_t>(s_.N), static_cast<size_t>(CeilDiv(s_.M, kTile)) * wy,
                               static_cast<size_t>(s_.batch)}, {kTile, wy, 1}, timings);
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
    const size_t wy = NaiveRowsPerGroup(dev);
    return dev.Launch(*k_, a, {static_cast<size_t>(s_.co), static_cast<size_t>(CeilDiv(M, kTile)) * wy, 1},
                      {kTile, wy, 1}, timings);
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
    // FuseLayerNorm: the column sums sit behind the folded bias (packed_bias_: 2 x N floats)
    const int colsums = ln_colsums_ ? s_.N * s_.batch : -1;
    if (ln_colsums_ && in[s_.a_input].elem_offset() % 4 != 0) {
      return Status::Error("LayerNorm GEMM input rows not 4-element aligned");
    }
    auto run = [&](const TilePlan& p, Timings* t) -> Status {
      if (!p.ln_rows) {
        return LaunchTiledGemm(dev, p, s_, out, in[s_.a_input], b, bias, scratch, t, residual_, residual_input_, false,
                               colsums, ln_eps_);
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
      return LaunchTiledGemm(dev, p, s_, out, rows, b, bias, rest, t, residual_, residual_input_, false);
    };
    if (tuner_.pending()) {
      SDGPU_RETURN_IF_ERROR(tuner_.Tune(dev, [&](const TilePlan& p) { return run(p, nullptr); }, &plan_));
    }
    return run(plan_, timings);
  }

  bool tuning_pending() const override { return tuner_.pending(); }
  void CollectWeights(std::vector<PackedWeights*>* out) override {
    for (PackedWeights* w : {packed_.get(), packed_bias_.get(), ln_ones_.get(), ln_zeros_.get()}) {
      if (w != nullptr) out->push_back(w);  // Enqueue's order: the fold sums flow from packed_ to the bias
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

  // FuseLayerNorm's two weights made on the device when it has the kernels (copy.kern: transpose_tiled,
  // ln_fold_columns, ln_fold_bias): the model's N x K weights uploaded as stored and transposed into scratch, then one
  // pass scales the rows by gamma into the packed weights (in the gated-GELU column order when FuseGatedGelu packed
  // them) and leaves beta . W and the column sums in a small buffer that the bias producer reads. The
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
    // The folded bias (base + beta . W) in the first N floats, the column sums in the next N (ln_fold_bias twice).
    packed_bias_->SetDeviceProducer([=](const Device& d, const Buffer& dst, DeviceStaging*) -> Status {
      if (!state->sums) return Status::Error("the LayerNorm fold's sums were not made before its bias");
      if (base_bias) {
        std::vector<float> base(static_cast<size_t>(N));
        base_bias(base.data());
        SDGPU_RETURN_IF_ERROR(UploadConstant(d, base.data(), base.size() * sizeof(float), &state->base));
      }
      for (const bool colsums : {false, true}) {
        const bool has_base = !colsums && state->base;
        Args a;  // ln_fold_bias(y, yo, sums, so, base, bo, int has_base, int n)
        a.Buf(&dst, colsums ? N : 0).Buf(state->sums.get(), colsums ? N : 0);
        a.Buf(has_base ? state->base.get() : state->sums.get(), 0).Int(has_base ? 1 : 0).Int(N);
        SDGPU_RETURN_IF_ERROR(Launch1D(d, *bias, a, N, nullptr));
      }
      // (a buffer released under a launch that reads it lives until it ran)
      state->gamma_beta.reset();
      state->sums.reset();
      state->base.reset();
      return Status::Ok();
    });
  }

  // The LayerNorm's gamma scales W's rows (k) wherever the packing put its columns (after FuseGatedGelu too), its
  // beta becomes bias + beta W, and the _ln kernels normalise each row of A inside the GEMM (gemm_tiled.kern). Needs
  // the packed fp32 constant weights (with weights_fp16 the column sums would not match the rounded weights), a
  // constant or no bias, one GEMM (or SplitColumns' blocks of one) over K-contiguous rows of A, and an unsplit
  // plan; a kernel without a twin re-plans on the cheapest config with one, and the tuner tries only twins.
  bool FuseLayerNorm(const Device& dev, float eps, const float* gamma, const float* beta, int k) override {
    // one GEMM, or the column blocks of one (SplitColumns: A shared, block b reads packed columns [b*N, (b+1)*N))
    const bool blocks = s_.batch > 1 && s_.sab == 0 && s_.sbb == s_.N && s_.scb == s_.M * s_.N;
    if (packed_ == nullptr || b_half_ || ln_colsums_ ||
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
    // gamma scaling) and the column sums of the scaled weights, for the bias producer that Enqueue ensures right
    // after it (re-producing the whole weights there would double the packing at the first inference). Same double
    // accumulation in k order as WeightedColumnSums, which it falls back to if it runs first.
    struct FoldSums {
      std::vector<double> beta_w, colsum;
    };
    auto sums = std::make_shared<FoldSums>();
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
    // The folded bias, then the column sums of the scaled weights (the _ln kernels read both from the bias buffer).
    packed_bias_ = std::make_unique<PackedWeights>(
        2 * static_cast<size_t>(N), false, [weights, scaled = packed_->producer(), base_bias, be, N, K, sums](float* dst) {
          const std::vector<double> beta_w =
              sums->beta_w.empty() ? WeightedColumnSums(weights, K, N, be.data()) : std::move(sums->beta_w);
          const std::vector<double> colsum =
              sums->colsum.empty() ? WeightedColumnSums(scaled, K, N, nullptr) : std::move(sums->colsum);
          if (base_bias) base_bias(dst);
          for (int n = 0; n < N; ++n) dst[n] = static_cast<float>((base_bias ? dst[n] : 0.0) + beta_w[n]);
          for (int n = 0; n < N; ++n) dst[N + n] = static_cast<float>(colsum[n]);
        });
    ln_colsums_ = true;
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
  bool ln_colsums_ = false;  // FuseLayerNorm: packed_bias_ holds the column sums of the gamma-scaled weights too
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
    const TensorRef partials = Partials(scratch);
    const TensorRef& dst = split ? partials : out;
    const TensorRef& bias = s_.has_bias ? in[2] : in[0];
    Args a;
    // Y's element size goes with it: the shared epilogue can also store float (b_half bit 2, gpu::Arg)
    a.Buf(dst).Int(split ? M * s_.co : 0);
    a.Buf(in[0]);
    a.Buf(b.buffer, b.offset, b.half ? 2 : 4).Int(sbk).Int(sbn).Int((b.half ? 1 : 0) | PartialsBit(dev, split));
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
  SDGPU_RETURN_IF_ERROR(Need(dev.max_work_group_size() >= kTile * kTile / 2, "device work-group limit below 128"));
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
  SDGPU_RETURN_IF_ERROR(Need(dev.max_work_group_size() >= kTile * kTile / 2, "device work-group limit below 128"));
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
