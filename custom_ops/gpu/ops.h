// One device operation of a GPU partition: builtin TFLite ops and the Sd*
// fused ops share this interface, for every GPU backend (they only talk to
// gpu::Device). Shapes are static per Prepare; everything that depends only on
// shapes or constant inputs (index metadata, folded weights) is computed and
// uploaded once when the op is built, so Enqueue only marshals arguments and
// launches (no host round-trips).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "abi/tflite_abi.h"
#include "common/status.h"
#include "gpu/device.h"
#include "ops/op_registry.h"
#include "ops/tensor_info.h"

namespace sdgpu::gpu {

class PackedWeights;

// What the op factory knows about a node at partition/prepare time.
struct NodeDesc {
  int builtin_code = -1;            // abi::kTfLiteBuiltinCustom for Sd* ops
  std::string name;                 // op name for logs and profiles
  const void* builtin_data = nullptr;
  const ParsedOp* sd_op = nullptr;  // set for Sd* ops
  std::vector<const abi::TfLiteTensor*> inputs;  // nullptr for an omitted optional input
  std::vector<const abi::TfLiteTensor*> outputs;
  bool weights_fp16 = false;        // delegate option weights_fp16: store packed constant weights as half
  bool gemm_autotune = false;       // delegate option gemm_autotune: time the tile configs at the first run
  int attention_key_splits = 0;     // delegate option attention_key_splits: 0 = auto, 1 = off, n = n ranges
  bool act_half = false;            // delegate option activations_fp16: float tensors stored as half
};

// true when the tensor's data is fixed for the interpreter's lifetime (weights, shapes, masks).
bool IsConstant(const abi::TfLiteTensor* t);

// Residual epilogue (GpuPartition folds `ADD(op output, R)` into the op, GpuOp::FuseResidual): after the op's
// bias and activation, out[m, n] += R[(m / rows) * row_stride + n], m the output row (a pixel of an NHWC conv, a
// token of an FC), n the channel. rows = 1, row_stride = N: R has the output's shape; rows = pixels per image,
// row_stride = N: one R row per image ([B, 1, 1, N], SD's time embedding); rows = M, row_stride = 0: one row ([N]).
struct Residual {
  int rows = 0;  // 0: no residual
  int row_stride = 0;
};

// Appends the residual epilogue's trailing kernel parameters (R, ro, int rrows, int rsm: the tiled GEMM / conv
// kernels, gemm_splitk_reduce and winograd_output_f*, on every backend);
// `placeholder` is any valid buffer, bound when there is no residual.
void AddResidualArgs(const Residual& r, const TensorRef& input, const TensorRef& placeholder, Args* args);

class GpuOp {
 public:
  virtual ~GpuOp() = default;
  // Inputs the runtime must provide as device tensors. Constant inputs that
  // the op consumes on the host at prepare time (shapes, axes, permutations)
  // are not listed, so they are never uploaded.
  const std::vector<int>& device_inputs() const { return device_inputs_; }
  // Device inputs the op's kernels read through float (not ACT_*) parameters -- a bias or gamma given as an input:
  // with activations_fp16 the partition hands a constant one over as float32, and refuses a non-constant one.
  const std::vector<int>& float32_inputs() const { return float32_inputs_; }
  // Extra device memory this op needs between its own launches (planned in the arena).
  size_t scratch_bytes() const { return scratch_bytes_; }
  // Enqueues the op's launches; `timings` (nullable) collects one Timer per launch when profiling.
  virtual Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out,
                         const TensorRef& scratch, Timings* timings) = 0;
  // Column split (GpuPartition's zero-copy column SLICEs): from now on write the [M, N] output as `parts`
  // consecutive blocks [parts][M][N / parts], block p holding columns [p*N/parts, (p+1)*N/parts), so that
  // the SLICEs taking those column blocks become views of it. Ops that can (bias-free FULLY_CONNECTED) run
  // it as a GEMM batched over the blocks and return true; false (the default) leaves the op unchanged.
  // Called before scratch_bytes() is read; may change it.
  virtual bool SplitColumns(const Device& dev, int parts) {
    (void)dev;
    (void)parts;
    return false;
  }
  // Residual epilogue: from now on add R (set_residual_input before each Enqueue) to the output as `r` says.
  // GEMM-shaped ops whose kernels take the epilogue's parameters return true; false (the default) leaves the op
  // unchanged.
  virtual bool FuseResidual(const Device& dev, const Residual& r) {
    (void)dev;
    (void)r;
    return false;
  }
  void set_residual_input(const TensorRef& r) { residual_input_ = r; }
  // Gated-GELU epilogue (GpuPartition folds `SdGelu(gated, mode)` of this op's output into it): from now on write
  // y[m, j] = v * gelu(g) of the output's (value, gate) column pairs -- an [M, N/2] output -- instead of [M, N].
  // `mode`: the kernels' GELU code, 12 erf / 13 tanh / 14 quick. FULLY_CONNECTEDs with constant weights on devices
  // with the epilogue's twin kernels return true; false (the default) leaves the op unchanged.
  virtual bool FuseGatedGelu(const Device& dev, int mode) {
    (void)dev;
    (void)mode;
    return false;
  }
  // Input-norm prologue (GpuPartition folds an SdGroupNorm(+SiLU) that only this op reads into it), consumer side:
  // from now on the op's first input is the GroupNorm's norm table (EmitNormTable) and set_norm_input (before each
  // Enqueue) gives the un-normalised tensor x; the op reads x * scale + shift per (image, channel), then SiLU when
  // `silu`, wherever it read its input. SdConv2DWinograd's input transform returns true; false (the default) leaves
  // the op unchanged.
  virtual bool FuseInputNorm(const Device& dev, bool silu) {
    (void)dev;
    (void)silu;
    return false;
  }
  void set_norm_input(const TensorRef& x) { norm_input_ = x; }
  // LayerNorm folded into the GEMM that reads it (GpuPartition::FuseLayerNorms), consumer side: from now on the op's
  // first input is the LayerNorm's input x (not its output) and the op computes act(LN(x) W + b) with LN's `eps`,
  // `gamma` and `beta` (host data of `k` floats, valid for the interpreter's lifetime). FULLY_CONNECTEDs with
  // constant weights on the tiled GEMM kernels with the _ln twins return true; false (the default) leaves the op
  // unchanged.
  virtual bool FuseLayerNorm(const Device& dev, float eps, const float* gamma, const float* beta, int k) {
    (void)dev;
    (void)eps;
    (void)gamma;
    (void)beta;
    (void)k;
    return false;
  }
  // Producer side: true (and its eps) for a plain LayerNorm over the last axis (SdGroupNorm's [rows, 1, C] view,
  // no SiLU).
  virtual bool LayerNormEps(float* eps) const {
    (void)eps;
    return false;
  }
  // Producer side: the bytes of the norm table this op can write instead of its output (table[2*(n*C + c)] = scale,
  // [+1] = shift; 0: it cannot), and the switch to writing it (SdGroupNorm on channels-last groups).
  virtual size_t NormTableBytes(const Device& dev) const {
    (void)dev;
    return 0;
  }
  virtual void EmitNormTable() {}
  // GroupNorm statistics epilogue (GpuPartition::FuseNormStatistics). Consumer side: true (and the geometry) for an
  // SdGroupNorm that can take its chunk partials (count, mean, M2) from its producer instead of a statistics pass:
  // channels-last x [n, positions, channels] with `groups` groups.
  virtual bool GroupStatsGeometry(int64_t* n, int64_t* positions, int64_t* channels, int* groups) const {
    (void)n;
    (void)positions;
    (void)channels;
    (void)groups;
    return false;
  }
  // Producer side: from now on also write those partials over this op's output (which must be that x) to the
  // buffer of set_stats_buffer, in group_norm_partial's layout; returns the chunks per (image, group), 0 = it cannot
  // (the op is unchanged). SdConv2DWinograd's output transform.
  virtual int EmitGroupStats(const Device& dev, int64_t n, int64_t positions, int64_t channels, int groups) {
    (void)dev;
    (void)n;
    (void)positions;
    (void)channels;
    (void)groups;
    return 0;
  }
  // Consumer side: from now on read `chunks` partials per (image, group) from the buffer of set_stats_buffer instead
  // of computing them. Called before scratch_bytes() is read; may change it.
  virtual void TakeGroupStats(int chunks) { (void)chunks; }
  void set_stats_buffer(const TensorRef& b) { stats_buffer_ = b; }
  // The constant weights this op makes at its first Enqueue (PackedWeights), in the order it ensures them:
  // GpuPartition makes all of them in one pass before its first invoke (gpu/weight_prep.h).
  virtual void CollectWeights(std::vector<PackedWeights*>* out) { (void)out; }
  // Whether the op's first Enqueue still times GEMM tile candidates (TileTuner; set-up progress).
  virtual bool tuning_pending() const { return false; }

 protected:
  // FuseResidual for ops whose kernels all take the epilogue's parameters.
  bool AcceptResidual(const Residual& r) {
    if (r.rows <= 0) return false;
    residual_ = r;
    return true;
  }

  std::vector<int> device_inputs_;
  std::vector<int> float32_inputs_;
  size_t scratch_bytes_ = 0;
  Residual residual_;
  TensorRef residual_input_;
  TensorRef norm_input_;
  TensorRef stats_buffer_;  // the GroupNorm statistics epilogue's partials (both sides)
};

// Validates the node and builds its op (shapes and constants read now).
// The error message is the one-line reason logged when the node stays on CPU.
Status CreateGpuOp(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out);

// Human-readable builtin op name ("CONV_2D"), or "BUILTIN_<code>".
std::string BuiltinName(int code);

}  // namespace sdgpu::gpu
