// The TFLite kernel of one GPU partition (any mix of builtin and Sd* nodes),
// for every GPU backend: it only talks to gpu::Device.
//
// init(): builds one GpuOp per node (node registrations are only readable
//   while the delegate partitions; the SD graphs have static shapes).
//   Constant DEQUANTIZEs (the fp16 / int8 weight-only exports): a DEQUANTIZE
//   of a constant whose output is not a partition output launches nothing.
//   Its float32 values are computed once on the host and its readers see
//   them as a constant tensor (FoldConstantDequantizes), so they pack,
//   transform (Winograd's U) and upload them once like any float32 weight
//   instead of reading a per-invoke copy in the arena as non-constant
//   operands (which also cost a direct-conv fallback for Winograd convs).
//   The host holds that float32 copy (2x the fp16 bytes) only until the
//   weights made from it are on the device -- a large one is made just
//   before (FoldedConstant, release_weight_pages) -- and at most until the
//   first invoke has produced every op's device weights (stats
//   host_weight_bytes, max_host_weight_bytes); the GPU holds what it would
//   for a float32 model (half with the weights_fp16 option).
// prepare(): re-checks the output sizes, uploads constant inputs once (kept
//   across prepares, keyed by tensor), plans ONE device arena for every tensor
//   that lives only inside the partition plus per-node scratch
//   (delegate/memory_planner.h: buffers with disjoint lifetimes share bytes),
//   and gives each partition input/output its own device buffer.
//   Zero-copy views: a RESHAPE / SQUEEZE / EXPAND_DIMS (same bytes, new shape)
//   whose output is not a partition output launches nothing; its output
//   tensor resolves to the device memory of its input's root (arena request,
//   constant or partition input/output buffer), and the root's arena request
//   lives until the last consumer of any view (MemoryPlanner::Alias). A view
//   that IS a partition output keeps its copy kernel: each output owns its
//   buffer, so an output never shares bytes with an input or another output.
//   Two kinds of SLICE are views too, at a byte offset into their root:
//   * contiguous slices, whose output is one contiguous run of the input
//     (e.g. [1, 22*C] -> [1, C], the b1 time-embedding projections that
//     `--fuse` merges into one FULLY_CONNECTED);
//   * column blocks of a split GEMM: when every reader of a bias-free
//     FULLY_CONNECTED's [M, N] output is a SLICE taking one of `parts` equal
//     column blocks (the q/k/v and cross-attention k/v projections merged by
//     `--fuse`), the op writes [parts][M][N/parts] instead (GpuOp::SplitColumns,
//     one batched GEMM launch) and each SLICE is the view of its block.
//     Decided at init; the FC output must not be a partition output.
//   Residual ADDs: an ADD (no fused activation) of a GEMM-shaped op's output
//   (FULLY_CONNECTED, CONV_2D, SdConv2DWinograd; its only reader, not a
//   partition output) and a tensor R that exists before that op runs (R the
//   same shape, or one row per image / one row for all, like SD's time
//   embedding) launches nothing: the op writes the ADD's output with R added
//   in its epilogue (GpuOp::FuseResidual; OpenCL kernels only). SD's ResNet
//   outputs, the time-embedding adds and the transformer residuals. When R
//   is a SLICE of the last axis ([B, C] out of [B, Ctot], through RESHAPE
//   views; each its only reader) the epilogue reads the SLICE's input at the
//   column offset with row stride Ctot and the SLICE launches nothing: cfg
//   batch 2's time-embedding projections, which `--fuse` merges into one
//   [2, 22*C] FULLY_CONNECTED, are strided columns that no byte-offset view
//   covers (BENCHMARKS.md: 22 ADD + 22 SLICE launches at b2).
//   Gated GELUs: an SdGelu(gated) whose input is a FULLY_CONNECTED's output,
//   directly or through a RESHAPE (each its only reader, not a partition
//   output; constant weights) launches nothing: the FC's epilogue writes
//   v * gelu(g) (GpuOp::FuseGatedGelu; OpenCL kernels only). SD's GEGLU
//   feed-forward inputs.
//   GroupNorm prologues: an SdGroupNorm(+SiLU) whose output only an
//   SdConv2DWinograd reads (as its input, not a partition output) writes a
//   per-(image, channel) norm table instead of its normalised tensor, and
//   the conv's input transform normalises x (the GroupNorm's input) as it
//   reads it (GpuOp::FuseInputNorm / EmitNormTable; OpenCL kernels only):
//   no apply pass, and the GroupNorm's output shrinks to the table in the
//   arena. SD's ResNet norm1/norm2 -> conv1/conv2.
//   GroupNorm statistics: an SdGroupNorm (channels-last) whose input an SdConv2DWinograd writes -- after its
//   residual ADD, when folded -- takes the (count, mean, M2) partials of its groups from the conv's output
//   transform, which computes them from the values it writes (GpuOp::EmitGroupStats / TakeGroupStats; OpenCL
//   kernels only): the GroupNorm launches only group_norm_finalize[_affine] (+ apply), no pass over its input.
//   The partials live in the arena from the conv to the GroupNorm. SD's ResNet norm2 (after conv1 + time
//   embedding) and the norms after a ResNet's output (conv2 + shortcut): the next ResNet's norm1, a transformer's
//   norm.
//   LayerNorms: an SdGroupNorm LayerNorm (no SiLU, constant gamma / beta)
//   whose output only a FULLY_CONNECTED reads launches nothing: gamma and
//   beta are folded into the FC's packed weights and bias, and its GEMM
//   (the _ln kernel twins) normalises each row of the LayerNorm's input as
//   it reads it (GpuOp::FuseLayerNorm; OpenCL kernels only, unsplit plans).
//   SD's transformer norm1/2/3 -> QKV / attn2 Q / GEGLU projections.
//   Delegate option fuse_epilogues=0 turns these five folds off (A/B
//   benchmarks).
//   Float storage islands (gpu/storage_islands.h): with activations_fp16, the steps of the coarsest level of an
//   image model (the smallest H x W a convolution writes) keep float32 storage; the partition builds and enqueues
//   their ops inside a Device::StorageScope, so they take the kernels built for float storage. A step that reads a
//   tensor of the other storage reads a copy converted once per invoke, at its first such reader (dequant_f16: half
//   to float; pack_half: float to half), planned in the arena like any tensor. A view keeps its root's storage, and
//   no epilogue fold joins two steps of different storage (the fold changes which step writes a tensor).
//   Sines and cosines of products: a SIN / COS whose input is a MUL's output
//   (no fused activation, one constant operand) computes f(a * b) itself
//   (mul_unary_f32, the constant read as float32), and the MUL launches
//   nothing once no other step reads its output and it is not a partition
//   output. SD's timestep phase t * freqs, the input of the sinusoidal
//   embedding, reaches ~1000 rad: with activations_fp16, storing it (or
//   freqs) as half would move its sin / cos by up to 0.25 (half's spacing
//   is 0.5 at 1000), which turns the embedding's high frequencies into
//   noise. Keeping the product in registers needs no per-tensor storage
//   type, which the kernels do not have (the ACT_* storage is
//   program-wide), so this fold is the whole fix; it is on whatever
//   fuse_epilogues says (one launch fewer otherwise).
// invoke(): uploads the partition inputs, enqueues every node in order (no host
//   synchronisation in between), reads the outputs back with blocking reads.
//   With profiling on, the device times of all launches of a node are summed
//   per node and written as JSON to the profile path.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "abi/tflite_abi.h"
#include "common/host_pages.h"
#include "delegate/memory_planner.h"
#include "gpu/ops.h"

namespace sdgpu {

class Backend;
class SdDelegate;

namespace gpu {

class GpuBackend;

// Everything CreateGpuOp needs for one node; `parsed` backs desc.sd_op.
struct NodeView {
  NodeDesc desc;
  ParsedOp parsed;
};

// Reads node `node_index` of the context into `view`; the reason when the node
// cannot run on a GPU backend at all (foreign custom op, bad Sd* options).
Status ViewNode(abi::TfLiteContext* context, const Backend& backend, int node_index, NodeView* view);

class GpuPartition {
 public:
  // `custom_name` (static storage) names the delegate kernel in TFLite's graph ("SdGpuOpenCL").
  static abi::TfLiteRegistration Registration(const char* custom_name);

 private:
  struct Step {
    int node_index = -1;
    std::string name;
    std::vector<int> inputs;  // tensor indices (-1 = omitted)
    int output = -1;
    std::unique_ptr<GpuOp> op;
    bool view = false;     // RESHAPE/SQUEEZE/EXPAND_DIMS with output bytes == input bytes
    bool aliased = false;  // this prepare: output aliases the input (no launch)
    // Plain SLICE with constant begin (else empty): input dims and begin (its output dims: out_dims).
    std::vector<int64_t> slice_in, slice_begin;
    int64_t fc_columns = 0;     // FULLY_CONNECTED: N (the output's last dim), else 0
    int code = -1;              // builtin code (kCustom for Sd* ops)
    int add_activation = -1;    // ADD: its fused activation
    std::vector<std::vector<int64_t>> add_in_dims;  // ADD: the dims of its two inputs
    std::vector<int64_t> out_dims;
    int residual = -1;          // tensor added in this op's epilogue (its output is then the ADD's)
    size_t residual_offset = 0; // bytes into `residual` where R starts (a strided SLICE's columns, else 0)
    int gated_gelu = -1;        // SdGelu(gated): the kernels' GELU code (12 erf, 13 tanh, 14 quick), else -1
    int group_norm_silu = -1;   // SdGroupNorm: 1 with SiLU, 0 without; else -1
    int norm_input = -1;        // input-norm prologue: the tensor this op normalises as it reads it (FuseInputNorms)
    size_t table_bytes = 0;     // an SdGroupNorm writing its norm table instead of its output: the table's bytes
    // statistics epilogue (FuseNormStatistics): on an SdGroupNorm, the step writing its partials and their bytes;
    // on both steps, the partials' planner request at this prepare
    int stats_producer = -1;
    size_t stats_bytes = 0;
    int stats_request = -1;
    bool half = false;          // its activation storage (float storage islands); its op was built for it
    std::vector<int> converts;  // conversions_ launched just before it (its first read of each)
    bool absorbed = false;      // an ADD, gated GELU (and a RESHAPE before it) or LayerNorm folded into a GEMM: no launch
    bool column_block = false;  // a block of a split GEMM's output (header comment): always a view
    size_t alias_offset = 0;    // bytes into the input, when aliased
    int scratch_request = -1;
    size_t output_bytes = 0;    // as stored on the device (half a float32 tensor's with activations_fp16)
    size_t elem_bytes = 4;      // of the output as stored (TensorRef::elem_bytes)
    double total_ms = 0.0;
    // Per kernel name, in first-launch order: device ms and launches summed over invocations (the profile's
    // "kernels" divides them by the invocations).
    struct KernelTime {
      std::string name;
      double ms = 0.0;
      int64_t launches = 0;
    };
    std::vector<KernelTime> kernel_ms;
  };

  // A constant DEQUANTIZE's float32 values on the host under a view of its output tensor that its readers take as
  // a constant (header comment). With release_weight_pages, a large one is made when the first of its readers
  // needs it (FillFolded: Prepare's constant uploads, the weight producers, before the first Enqueue) and freed
  // when the last weight made from it is on the device, so the host holds a few float32 copies at a time instead
  // of the whole model's (SD1.5's fp16 UNet: 3.4 GB). Op construction and the fold passes may read small ones
  // (a folded LayerNorm's gamma and beta): those below kLazyFoldElements are made at the fold.
  struct FoldedConstant {
    enum class State { kEmpty, kFilled, kFreed };
    abi::TfLiteTensor tensor{};
    AnonymousBuffer data;
    abi::TfLiteTensor source{};  // the stored (fp16 / int8) constant, copied: the context's tensor array can move
    int64_t n = 0;
    State state = State::kEmpty;
  };
  static constexpr int64_t kLazyFoldElements = 16384;

  GpuPartition(SdDelegate* d, GpuBackend* b) : delegate_(d), backend_(b) {}
  // Fills folded_ from the partition's DEQUANTIZE nodes (before any op is built).
  Status FoldConstantDequantizes(abi::TfLiteContext* context, const abi::TfLiteDelegateParams* params);
  // After the first invoke: frees the folded constants' host values (every op has uploaded what it derives from
  // them: Prepare's constant uploads, PackedWeights at the ops' first Enqueue).
  void ReleaseFoldedConstants();
  // The folded constant whose view `t` is, else nullptr.
  FoldedConstant* FoldedOf(const abi::TfLiteTensor* t) const;
  // Makes a folded constant's values now if not made yet (any thread); an error once it was freed.
  Status FillFolded(FoldedConstant* f);
  void FreeFolded(FoldedConstant* f);
  // GetTensor, but a folded DEQUANTIZE output resolves to its constant view.
  Status TensorOf(abi::TfLiteContext* context, int tensor, abi::TfLiteTensor** out) const;
  Status Init(abi::TfLiteContext* context, const abi::TfLiteDelegateParams* params);
  Status Prepare(abi::TfLiteContext* context, abi::TfLiteNode* node);
  // Before the first invoke: the device builds the kernels the ops asked for, every op's constant weights are made
  // (gpu/weight_prep.h), and the set-up phase "first inference" starts (it ends after the first invoke). With
  // release_weight_pages, a model tensor's host pages are given back as soon as the last weight made from it is on
  // the device, so the host never holds much more than the weights in flight (the fp32 UNet file is 3.4 GB).
  Status FirstInvokeSetup(abi::TfLiteContext* context);
  // The constant inputs of a step (folded DEQUANTIZEs as their float views).
  std::vector<const abi::TfLiteTensor*> ConstantInputs(abi::TfLiteContext* context, const Step& step) const;
  // After the first invoke: gives back the pages of every step's constant inputs (what Prepare uploaded as read,
  // weights made lazily at an op's first Enqueue); a later read (CPU nodes sharing a tensor) faults them back in.
  void ReleaseWeightPages(abi::TfLiteContext* context);
  // Gives back one constant tensor's pages (weight_pages_ decides whether they can go; counted once; any thread).
  void GivePages(const abi::TfLiteTensor* t);
  void GivePagesLocked(const abi::TfLiteTensor* t);  // host_mu_ held
  Status Invoke(abi::TfLiteContext* context);
  Status Ref(int tensor, TensorRef* out) const;
  // The tensor whose device memory `tensor` lives in (itself unless it is an aliased view).
  int Root(int tensor) const;
  // Byte offset of `tensor` inside Root(tensor)'s memory.
  size_t RootOffset(int tensor) const;
  // ViewNode of a step's node, its folded DEQUANTIZE inputs as their constant views (the op factories' NodeDesc).
  Status ViewStepNode(abi::TfLiteContext* context, const Step& step, NodeView* view) const;
  // Sines and cosines of products (header comment): runs first, before any pass reads the graph's readers.
  void FuseTrigOfProducts(abi::TfLiteContext* context, const std::set<int>& outs);
  // Column splits, residual ADDs and gated GELUs (header comment), from the graph structure at init: `outs` are the
  // partition's output tensors, `readers` the steps that read each tensor on the device.
  void SplitGemmColumns(const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers);
  void FuseResidualAdds(const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers);
  // FuseResidualAdds' strided case: when tensor `r` is a SLICE of the last axis of a [rows, Ctot] tensor (through
  // RESHAPE views, each tensor of the chain read only by the next step, the last one by `add`), the SLICE's step
  // index, input tensor, byte offset of its first column, Ctot and the views' step indices; else slice_step -1.
  struct StridedSource {
    int slice_step = -1, tensor = -1;
    size_t offset = 0;
    int64_t row_elems = 0;
    std::vector<int> views;
  };
  StridedSource StridedResidualSource(int r, int add, const std::set<int>& outs,
                                      const std::unordered_map<int, std::vector<int>>& readers,
                                      const std::unordered_map<int, int>& producer) const;
  void FuseGatedGelus(const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers);
  void FuseInputNorms(const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers);
  // The GroupNorm statistics epilogue (header comment): an SdGroupNorm over a channels-last tensor that an
  // SdConv2DWinograd writes (directly or through RESHAPE views) takes its chunk partials from that conv's output
  // transform and launches no statistics pass. Runs after FuseResidualAdds / FuseInputNorms (the conv's output is
  // then the residual ADD's, and a GroupNorm's table mode is known).
  void FuseNormStatistics();
  // A LayerNorm (SdGroupNorm's [rows, 1, C] view) read only by a FULLY_CONNECTED, directly or through a RESHAPE: the
  // FC reads the LayerNorm's input
  // and normalises it inside its GEMM (GpuOp::FuseLayerNorm); the LayerNorm launches nothing. Runs last: it changes
  // the FC's first input, so `readers` no longer describes the graph after it.
  void FuseLayerNorms(abi::TfLiteContext* context, const std::set<int>& outs,
                      const std::unordered_map<int, std::vector<int>>& readers);
  // Output tensor -> index of the step producing it (the fold passes rebuild it: a fold moves an output).
  std::unordered_map<int, int> ProducerIndex() const;
  // The index of the step producing tensor t when t is not a partition output and exactly one step reads it on the
  // device, else -1 (`producer`: ProducerIndex()).
  static int SoleProducer(int t, const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers,
                          const std::unordered_map<int, int>& producer);
  // SoleProducer, looking through one RESHAPE view whose output tensor t is (it too read only by the next step);
  // *view: that view's step index, else -1.
  int SoleProducerPastView(int t, const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers,
                           const std::unordered_map<int, int>& producer, int* view) const;
  // A tensor converted to the other storage for the steps of that storage that read it (header comment): the tensor
  // (a root or a view of one), the storage it is converted to, its elements and its arena request (this prepare).
  struct Conversion {
    int tensor = -1;
    bool to_half = false;
    int64_t elements = 0;
    int first = -1, last = -1;  // the first and last step reading the copy
    int request = -1;
  };
  // Chooses each step's storage (gpu/storage_islands.h) from the nodes of the partition: `nodes` in order.
  Status ChooseStorage(abi::TfLiteContext* context, const std::vector<int>& nodes, std::vector<bool>* half,
                       int64_t* level_pixels) const;
  // Plans the conversions of this prepare (after the views are resolved and every tensor's storage is known).
  Status PlanConversions(abi::TfLiteContext* context);
  // Enqueues one conversion (its copy from the root tensor).
  Status LaunchConversion(const Conversion& c, Timings* timings) const;
  static constexpr size_t kConvertWg = 64;
  // Ref for a step's read of `tensor`: its converted copy where the step's storage differs from the tensor's, the
  // float32 copy of a constant for a float32 parameter (`float32_read`: one of the op's float32_inputs) or a
  // float32-storage step under half storage; `root_bytes`: bytes past the tensor's start, in its own storage (a
  // strided residual's first column).
  Status ReadRef(const Step& step, int tensor, size_t root_bytes, bool float32_read, TensorRef* out) const;
  // Whether the root tensor `t` is stored as half (float tensors of the partition; false for every other).
  bool StoredHalf(int root) const;
  // The tensors a step's launches read: its op's device inputs, its residual and its norm input.
  static std::vector<int> DeviceReads(const Step& step);
  static std::set<int> Float32Reads(const Step& step);
  // A tensor's bytes and bytes per element as the device stores it (activations_fp16: float32 tensors as half).
  size_t StoredBytes(const abi::TfLiteTensor* t) const;
  size_t StoredElemBytes(const abi::TfLiteTensor* t) const;
  // `elem_bytes`: of the device copy (2: a float32 tensor stored as half, converted on the host).
  Status UploadTensor(const Buffer& buf, const abi::TfLiteTensor* t, size_t elem_bytes, bool blocking) const;
  Status DownloadTensor(const Buffer& buf, abi::TfLiteTensor* t, size_t elem_bytes) const;
  // The byte offset of a slice step's output inside its input when it is one contiguous run, else -1.
  static long long ContiguousSliceOffset(const Step& step);
  Status NewBuffer(abi::TfLiteContext* context, int tensor, std::unique_ptr<Buffer>* out) const;
  Status WriteProfile() const;
  const Device& device() const;

  static void* InitThunk(abi::TfLiteContext* context, const char* buffer, size_t length);
  static void FreeThunk(abi::TfLiteContext* context, void* buffer);
  static abi::TfLiteStatus PrepareThunk(abi::TfLiteContext* context, abi::TfLiteNode* node);
  static abi::TfLiteStatus InvokeThunk(abi::TfLiteContext* context, abi::TfLiteNode* node);

  SdDelegate* delegate_;
  GpuBackend* backend_;
  Status init_status_;
  std::vector<Step> steps_;
  MemoryPlanner planner_;
  std::vector<std::unique_ptr<Buffer>> arenas_;  // one device buffer per planner bank (Device::max_buffer_bytes)
  std::unordered_map<int, int> internal_;                       // root tensor -> planner request
  std::unordered_map<int, std::pair<int, size_t>> alias_root_;  // aliased view output -> (root tensor, byte offset)
  std::unordered_map<int, std::unique_ptr<FoldedConstant>> folded_;  // DEQUANTIZE output tensor -> its constant
  std::unordered_map<const abi::TfLiteTensor*, FoldedConstant*> folded_views_;  // its view -> it
  std::mutex host_mu_;  // folded constants' states and the page bookkeeping: weight producers run on two threads
  std::vector<int> folded_nodes_;                                    // their node indices (profile: no launches)
  // release_weight_pages: the model's mappings, from the DEQUANTIZE folds (or the first invoke's set-up) to the end of
  // the first invoke
  FileMappedPages weight_pages_;
  std::set<const void*> pages_given_;  // the tensors' data whose pages went
  size_t since_release_again_ = 0;     // bytes given back since the last FileMappedPages::ReleaseAgain
  std::unordered_map<int, std::unique_ptr<Buffer>> constants_;  // uploaded once
  // activations_fp16: the float32 copies of constants that ops read through float32 parameters (float32_inputs)
  std::unordered_map<int, std::unique_ptr<Buffer>> constants_f32_;
  std::unordered_map<int, size_t> elem_bytes_;  // root tensor -> bytes per stored element (TensorRef::elem_bytes)
  std::unordered_set<int> float_roots_;         // root tensors of type float32 (their storage follows elem_bytes_)
  std::vector<Conversion> conversions_;          // this prepare's
  std::map<std::pair<int, bool>, int> conversion_of_;  // (tensor, storage converted to) -> index in conversions_
  const Kernel* to_float_ = nullptr;  // dequant_f16 of the float-storage programs
  const Kernel* to_half_ = nullptr;   // pack_half
  int64_t island_pixels_ = 0;         // the coarsest level's H x W (0: no island)
  mutable std::vector<uint16_t> edge_staging_;  // UploadTensor / DownloadTensor's half values
  std::map<int, std::unique_ptr<Buffer>> externals_;            // partition inputs/outputs
  std::vector<int> inputs_to_upload_;
  std::vector<int> outputs_;
  long long invocations_ = 0;
  bool profile_warned_ = false;  // WriteProfile failed once (warned; later failures stay quiet)
  bool prepared_ = false;
};

}  // namespace gpu
}  // namespace sdgpu
