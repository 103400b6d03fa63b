#include "gpu/partition.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <functional>
#include <set>
#include <variant>

#include "abi/int_array.h"
#include "common/half.h"
#include "common/serial_worker.h"
#include "delegate/partitioner.h"
#include "delegate/sd_delegate.h"
#include "delegate/tflite_graph.h"
#include "gpu/builtin_params.h"
#include "gpu/gpu_backend.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"
#include "gpu/storage_islands.h"
#include "gpu/weight_prep.h"

namespace sdgpu::gpu {

// Invoke hands the enqueued nodes to the GPU (Device::Flush) after the first few and then every so many, as
// TFLite's GPU delegate does on Adreno: a driver that holds commands until a blocking call would keep the GPU idle
// while the host enqueues (an SD UNet step: ~600 launches, milliseconds of host time).
constexpr size_t kFirstFlushSteps = 4;
constexpr size_t kFlushEverySteps = 64;

Status ViewNode(abi::TfLiteContext* context, const Backend& backend, int node_index, NodeView* view) {
  abi::TfLiteNode* node = nullptr;
  abi::TfLiteRegistration* reg = nullptr;
  if (context->GetNodeAndRegistration(context, node_index, &node, &reg) != abi::kTfLiteOk || node == nullptr ||
      reg == nullptr) {
    return Status::Error("GetNodeAndRegistration failed for node " + std::to_string(node_index));
  }
  NodeDesc& d = view->desc;
  d = NodeDesc();
  d.builtin_code = reg->builtin_code;
  d.builtin_data = node->builtin_data;
  if (const auto* gpu = dynamic_cast<const GpuBackend*>(&backend)) {
    d.weights_fp16 = gpu->options().weights_fp16;
    d.act_half = gpu->options().activations_fp16;
    d.gemm_autotune = gpu->options().gemm_autotune;
    d.attention_key_splits = gpu->options().attention_key_splits;
  }
  if (reg->builtin_code == abi::kTfLiteBuiltinCustom) {
    d.name = reg->custom_name != nullptr ? reg->custom_name : "CUSTOM";
    if (FindOpDef(d.name) == nullptr) return Status::Error("custom op '" + d.name + "' is not one of the Sd* ops");
    SDGPU_RETURN_IF_ERROR(CheckNode(context, node, reg, backend, &view->parsed));  // shared parser + shape rule
    d.sd_op = &view->parsed;
  } else {
    d.name = BuiltinName(reg->builtin_code);
  }
  for (int t : abi::IntArrayToVector(node->inputs)) {
    abi::TfLiteTensor* tensor = nullptr;
    if (t >= 0) SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    d.inputs.push_back(tensor);
  }
  for (int t : abi::IntArrayToVector(node->outputs)) {
    abi::TfLiteTensor* tensor = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    d.outputs.push_back(tensor);
  }
  return Status::Ok();
}

abi::TfLiteRegistration GpuPartition::Registration(const char* custom_name) {
  abi::TfLiteRegistration reg{};
  reg.init = &GpuPartition::InitThunk;
  reg.free = &GpuPartition::FreeThunk;
  reg.prepare = &GpuPartition::PrepareThunk;
  reg.invoke = &GpuPartition::InvokeThunk;
  reg.builtin_code = abi::kTfLiteBuiltinDelegate;
  reg.custom_name = custom_name;
  reg.version = 1;
  return reg;
}

const Device& GpuPartition::device() const { return backend_->device(); }

Status GpuPartition::FoldConstantDequantizes(abi::TfLiteContext* context, const abi::TfLiteDelegateParams* params) {
  // release_weight_pages: the stored (fp16 / int8) values are read once, here
  if (backend_->options().release_weight_pages) weight_pages_ = FileMappedPages::Snapshot();
  const std::vector<int> out_list = abi::IntArrayToVector(params->output_tensors);
  const std::set<int> outs(out_list.begin(), out_list.end());
  for (int node_index : abi::IntArrayToVector(params->nodes_to_replace)) {
    abi::TfLiteNode* node = nullptr;
    abi::TfLiteRegistration* reg = nullptr;
    if (context->GetNodeAndRegistration(context, node_index, &node, &reg) != abi::kTfLiteOk || node == nullptr ||
        reg == nullptr || reg->builtin_code != kDequantize || abi::IntArraySize(node->inputs) != 1 ||
        abi::IntArraySize(node->outputs) != 1) {
      continue;
    }
    const int in_index = node->inputs->data[0], out_index = node->outputs->data[0];
    abi::TfLiteTensor* in = nullptr;
    abi::TfLiteTensor* out = nullptr;
    if (in_index < 0 || outs.count(out_index) || !GetTensor(context, in_index, &in).ok() ||
        !GetTensor(context, out_index, &out).ok() || !IsConstant(in) || out->type != abi::kTfLiteFloat32) {
      continue;
    }
    const int64_t n = NumElements(DimsOf(out));
    if (n <= 0 || !DequantizeConstant(in, n, nullptr).ok()) continue;  // MakeDequantize reports why, if it must run
    auto f = std::make_unique<FoldedConstant>();
    f->data = AnonymousBuffer(static_cast<size_t>(n) * sizeof(float));
    if (f->data.data() == nullptr) {
      return Status::Error("out of host memory for the float32 values of DEQUANTIZE node " +
                           std::to_string(node_index) + " (" + std::to_string(n) + " elements)");
    }
    f->source = *in;
    f->n = n;
    f->tensor = *out;  // type float32, dims, name
    f->tensor.data.raw = static_cast<char*>(f->data.data());
    f->tensor.bytes = static_cast<size_t>(n) * sizeof(float);
    f->tensor.allocation_type = abi::kTfLiteMmapRo;
    f->tensor.allocation = nullptr;
    f->tensor.quantization = abi::TfLiteQuantization{};
    f->tensor.params = abi::TfLiteQuantizationParams{};
    if (!backend_->options().release_weight_pages || n < kLazyFoldElements) {
      SDGPU_RETURN_IF_ERROR(FillFolded(f.get()));
    }
    folded_views_[&f->tensor] = f.get();
    folded_.emplace(out_index, std::move(f));
    folded_nodes_.push_back(node_index);
  }
  weight_pages_.ReleaseAgain();  // what reading the next one mapped again (FileMappedPages::ReleaseAgain)
  return Status::Ok();
}

GpuPartition::FoldedConstant* GpuPartition::FoldedOf(const abi::TfLiteTensor* t) const {
  auto it = folded_views_.find(t);
  return it != folded_views_.end() ? it->second : nullptr;
}

Status GpuPartition::FillFolded(FoldedConstant* f) {
  const std::lock_guard<std::mutex> lock(host_mu_);
  if (f->state == FoldedConstant::State::kFilled) return Status::Ok();
  if (f->state == FoldedConstant::State::kFreed) {
    return Status::Error("internal error: the float32 values of " + std::string(f->tensor.name ? f->tensor.name : "?") +
                         " were read after they were freed");
  }
  {
    const SetupTimer timer(device(), Device::Setup::kWeightsHost);
    SDGPU_RETURN_IF_ERROR(DequantizeConstant(&f->source, f->n, static_cast<float*>(f->data.data())));
  }
  f->state = FoldedConstant::State::kFilled;
  device().NoteHostWeightBytes(static_cast<long long>(f->tensor.bytes));
  GivePagesLocked(&f->source);  // the stored values are read once
  return Status::Ok();
}

void GpuPartition::FreeFolded(FoldedConstant* f) {
  const std::lock_guard<std::mutex> lock(host_mu_);
  if (f->state == FoldedConstant::State::kFreed) return;
  if (f->state == FoldedConstant::State::kFilled) device().NoteHostWeightBytes(-static_cast<long long>(f->tensor.bytes));
  f->data.reset();
  f->state = FoldedConstant::State::kFreed;
  f->tensor.data.raw = nullptr;  // a later read is an error (IsConstant fails), not a use after free
}

void GpuPartition::ReleaseFoldedConstants() {
  for (auto& [index, f] : folded_) FreeFolded(f.get());
}

Status GpuPartition::TensorOf(abi::TfLiteContext* context, int tensor, abi::TfLiteTensor** out) const {
  if (auto it = folded_.find(tensor); it != folded_.end()) {
    *out = &it->second->tensor;
    return Status::Ok();
  }
  return GetTensor(context, tensor, out);
}

Status GpuPartition::ChooseStorage(abi::TfLiteContext* context, const std::vector<int>& nodes, std::vector<bool>* half,
                                   int64_t* level_pixels) const {
  const bool default_half = device().default_act_half();
  std::vector<IslandNode> island_nodes(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    abi::TfLiteNode* node = nullptr;
    abi::TfLiteRegistration* reg = nullptr;
    if (context->GetNodeAndRegistration(context, nodes[i], &node, &reg) != abi::kTfLiteOk || node == nullptr ||
        reg == nullptr) {
      return Status::Error("init: GetNodeAndRegistration failed for node " + std::to_string(nodes[i]));
    }
    IslandNode& n = island_nodes[i];
    const int code = reg->builtin_code;
    n.conv = code == kConv2D ||
             (code == kCustom && reg->custom_name != nullptr && std::string(reg->custom_name) == "SdConv2DWinograd");
    n.view = code == kReshape || code == kSqueeze || code == kExpandDims || code == kSlice;
    for (int t : abi::IntArrayToVector(node->inputs)) {
      abi::TfLiteTensor* tensor = nullptr;
      const bool computed = t >= 0 && folded_.count(t) == 0 && GetTensor(context, t, &tensor).ok() &&
                            tensor != nullptr && !IsConstant(tensor) && tensor->type == abi::kTfLiteFloat32;
      n.inputs.push_back(computed ? t : -1);
    }
    if (abi::IntArraySize(node->outputs) == 1) {
      abi::TfLiteTensor* out = nullptr;
      n.output = node->outputs->data[0];
      if (GetTensor(context, n.output, &out).ok() && out != nullptr) {
        n.float_output = out->type == abi::kTfLiteFloat32;
        n.out_dims = DimsOf(out);
      }
    }
  }
  const Islands islands = FloatIslands(island_nodes, default_half);
  half->assign(nodes.size(), default_half);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (islands.float_storage[i]) (*half)[i] = false;
  }
  *level_pixels = islands.level_pixels;
  return Status::Ok();
}

Status GpuPartition::Init(abi::TfLiteContext* context, const abi::TfLiteDelegateParams* params) {
  if (params == nullptr || params->nodes_to_replace == nullptr) return Status::Error("init: missing delegate params");
  SDGPU_RETURN_IF_ERROR(FoldConstantDequantizes(context, params));
  const std::vector<int> node_list = abi::IntArrayToVector(params->nodes_to_replace);
  std::vector<bool> node_half;
  SDGPU_RETURN_IF_ERROR(ChooseStorage(context, node_list, &node_half, &island_pixels_));
  for (size_t ni = 0; ni < node_list.size(); ++ni) {
    const int node_index = node_list[ni];
    abi::TfLiteNode* node = nullptr;
    abi::TfLiteRegistration* reg = nullptr;
    if (context->GetNodeAndRegistration(context, node_index, &node, &reg) != abi::kTfLiteOk || node == nullptr) {
      return Status::Error("init: GetNodeAndRegistration failed for node " + std::to_string(node_index));
    }
    Step s;
    s.node_index = node_index;
    s.inputs = abi::IntArrayToVector(node->inputs);
    if (abi::IntArraySize(node->outputs) != 1) return Status::Error("init: node with several outputs");
    s.output = node->outputs->data[0];
    if (folded_.count(s.output)) continue;  // a folded constant DEQUANTIZE: no step
    NodeView view;
    SDGPU_RETURN_IF_ERROR(ViewStepNode(context, s, &view));
    s.name = view.desc.name;
    s.half = node_half[ni];
    view.desc.act_half = s.half;
    // the op, its kernels and the sizes below in the step's storage
    const Device::StorageScope storage(device(), s.half);
    Status st = CreateGpuOp(device(), view.desc, &s.op);
    if (!st.ok()) return Status::Error("node " + std::to_string(node_index) + " (" + s.name + "): " + st.message());
    s.elem_bytes = StoredElemBytes(view.desc.outputs[0]);
    s.output_bytes = StoredBytes(view.desc.outputs[0]);
    const int code = view.desc.builtin_code;
    s.view = (code == kReshape || code == kSqueeze || code == kExpandDims) && !view.desc.inputs.empty() &&
             view.desc.inputs[0] != nullptr && StoredBytes(view.desc.inputs[0]) == s.output_bytes;
    s.code = code;
    s.out_dims = DimsOf(view.desc.outputs[0]);
    if (code == kSlice && view.desc.inputs.size() == 3 && view.desc.inputs[0] != nullptr &&
        view.desc.inputs[1] != nullptr && IsConstant(view.desc.inputs[1])) {
      const std::vector<int32_t> begin = ConstInts(view.desc.inputs[1]);
      const Dims in = DimsOf(view.desc.inputs[0]);
      if (begin.size() == in.size() && s.out_dims.size() == in.size() && !begin.empty()) {
        s.slice_in = in;
        s.slice_begin.assign(begin.begin(), begin.end());
      }
    }
    if (code == kAdd && view.desc.inputs.size() == 2 && view.desc.inputs[0] != nullptr &&
        view.desc.inputs[1] != nullptr) {
      const auto* prm = static_cast<const ActivationParams*>(view.desc.builtin_data);
      s.add_activation = prm != nullptr ? prm->activation : 0;
      s.add_in_dims = {DimsOf(view.desc.inputs[0]), DimsOf(view.desc.inputs[1])};
    }
    if (view.desc.sd_op != nullptr) {
      if (const auto* gelu = std::get_if<GeluAttrs>(&view.desc.sd_op->attrs); gelu != nullptr && gelu->gated) {
        s.gated_gelu = GeluKernelCode(*gelu);
      }
      if (const auto* gn = std::get_if<GroupNormAttrs>(&view.desc.sd_op->attrs); gn != nullptr) {
        s.group_norm_silu = gn->activation == GroupNormActivation::kSilu ? 1 : 0;
      }
    }
    if (code == kFullyConnected && view.desc.inputs.size() > 1 && view.desc.inputs[1] != nullptr) {
      const Dims w = DimsOf(view.desc.inputs[1]), o = DimsOf(view.desc.outputs[0]);
      s.fc_columns = w.size() == 2 && !o.empty() && o.back() == w[0] ? w[0] : 0;
    }
    steps_.push_back(std::move(s));
  }
  const std::vector<int> out_list = abi::IntArrayToVector(params->output_tensors);
  const std::set<int> outs(out_list.begin(), out_list.end());
  // Not an epilogue fold (fuse_epilogues leaves it on): it keeps the timestep phase out of half storage.
  FuseTrigOfProducts(context, outs);
  std::unordered_map<int, std::vector<int>> readers;  // tensor -> steps reading it on the device
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    for (int k : steps_[i].op->device_inputs()) {
      if (steps_[i].inputs[k] >= 0) readers[steps_[i].inputs[k]].push_back(i);
    }
  }
  // No pass changes what a step reads (a folded step's readers read its producer's output now), so all use this map.
  SplitGemmColumns(outs, readers);
  if (backend_->options().fuse_epilogues) {
    FuseGatedGelus(outs, readers);  // first: a gated FC takes no residual
    FuseResidualAdds(outs, readers);
    FuseInputNorms(outs, readers);
    FuseNormStatistics();
    FuseLayerNorms(context, outs, readers);  // last: it changes what an FC reads
  }
  return Status::Ok();
}

Status GpuPartition::ViewStepNode(abi::TfLiteContext* context, const Step& step, NodeView* view) const {
  SDGPU_RETURN_IF_ERROR(ViewNode(context, *backend_, step.node_index, view));
  for (size_t i = 0; i < step.inputs.size() && i < view->desc.inputs.size(); ++i) {
    if (auto it = folded_.find(step.inputs[i]); it != folded_.end()) view->desc.inputs[i] = &it->second->tensor;
  }
  return Status::Ok();
}

void GpuPartition::FuseTrigOfProducts(abi::TfLiteContext* context, const std::set<int>& outs) {
  const std::unordered_map<int, int> producer = ProducerIndex();
  std::unordered_map<int, int> readers;  // tensor -> how many steps read it on the device
  for (const Step& s : steps_) {
    for (int k : s.op->device_inputs()) {
      if (s.inputs[k] >= 0) ++readers[s.inputs[k]];
    }
  }
  for (Step& trig : steps_) {
    if ((trig.code != kSin && trig.code != kCos) || trig.inputs.empty()) continue;
    auto p = producer.find(trig.inputs[0]);
    if (p == producer.end() || steps_[p->second].code != kMul) continue;
    Step& mul = steps_[p->second];
    NodeView view;
    std::unique_ptr<GpuOp> op;
    // otherwise (no constant operand, a fused activation: MakeMulUnary) the SIN / COS reads the stored product
    if (!ViewStepNode(context, mul, &view).ok()) continue;
    view.desc.act_half = trig.half;
    const Device::StorageScope storage(device(), trig.half);
    if (!MakeMulUnary(device(), view.desc, trig.code == kSin ? 3 : 4, &op).ok()) continue;
    trig.op = std::move(op);
    trig.inputs = mul.inputs;
    // the product's other readers (or the partition's output) keep the MUL's launch
    if (--readers[mul.output] == 0 && outs.count(mul.output) == 0) mul.absorbed = true;
  }
}

namespace {

// How R (right-aligned against the op's output `out`) enters the residual epilogue; rows 0: it cannot.
Residual ResidualOf(const Dims& r, const Dims& out) {
  Residual res;
  if (out.empty() || r.empty() || r.size() > out.size() || r.back() != out.back()) return res;
  const int64_t n = out.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < out.size(); ++d) rows *= out[d];
  Dims ra(out.size() - r.size(), 1);  // R padded with leading 1s
  ra.insert(ra.end(), r.begin(), r.end());
  if (ra == out) {
    res.rows = 1;
    res.row_stride = static_cast<int>(n);
    return res;
  }
  // one row per image: R [B or 1, 1, ..., 1, N] against out [B, ..., N]
  for (size_t d = 1; d + 1 < out.size(); ++d) {
    if (ra[d] != 1) return res;
  }
  if (ra[0] != out[0] && ra[0] != 1) return res;
  res.rows = static_cast<int>(rows / out[0]);
  res.row_stride = ra[0] == 1 ? 0 : static_cast<int>(n);
  return res;
}

}  // namespace

std::unordered_map<int, int> GpuPartition::ProducerIndex() const {
  std::unordered_map<int, int> producer;
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) producer[steps_[i].output] = i;
  return producer;
}

int GpuPartition::SoleProducer(int t, const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers,
                               const std::unordered_map<int, int>& producer) {
  auto rd = readers.find(t);
  auto p = producer.find(t);
  if (t < 0 || outs.count(t) || rd == readers.end() || rd->second.size() != 1 || p == producer.end()) return -1;
  return p->second;
}

void GpuPartition::FuseResidualAdds(const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers) {
  const std::unordered_map<int, int> producer = ProducerIndex();
  for (int j = 0; j < static_cast<int>(steps_.size()); ++j) {
    Step& add = steps_[j];
    if (add.code != kAdd || add.add_activation != 0 || add.add_in_dims.size() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      const int t = add.inputs[k], r = add.inputs[1 - k];
      const int p = SoleProducer(t, outs, readers, producer);
      if (r < 0 || t == r || p < 0 || p >= j) continue;
      Step& op = steps_[p];
      if (op.code != kFullyConnected && op.code != kConv2D && op.code != kCustom) continue;
      if (op.half != add.half) continue;  // the op would write the ADD's output in its own storage
      // the op's output, as the ADD reads it, must BE the ADD's output: same elements, same rows of N
      // (an FC's [M, N] against a [1, M, N] ADD is fine; a broadcast of it is not)
      if (op.residual >= 0 || op.out_dims.empty() || add.out_dims.empty() ||
          NumElements(op.out_dims) != NumElements(add.out_dims) || op.out_dims.back() != add.out_dims.back() ||
          NumElements(add.add_in_dims[k]) != NumElements(add.out_dims)) {
        continue;
      }
      const StridedSource src = StridedResidualSource(r, j, outs, readers, producer);
      const int read = src.slice_step >= 0 ? src.tensor : r;  // what the epilogue reads
      auto rp = producer.find(read);
      if (rp != producer.end() && rp->second >= p) continue;  // R must exist when the op runs
      Residual spec = ResidualOf(add.add_in_dims[1 - k], add.out_dims);
      if (spec.rows > 0 && src.slice_step >= 0) {
        // R's row i is the SLICE's row i: the same last axis, so a reshape between them keeps rows
        if (steps_[src.slice_step].out_dims.back() != add.add_in_dims[1 - k].back() || src.row_elems > INT_MAX) continue;
        if (spec.row_stride != 0) spec.row_stride = static_cast<int>(src.row_elems);
      }
      if (spec.rows <= 0) continue;
      const Device::StorageScope storage(device(), op.half);
      if (!op.op->FuseResidual(device(), spec)) continue;
      op.residual = read;
      op.residual_offset = src.slice_step >= 0 ? src.offset : 0;
      if (src.slice_step >= 0) {  // nothing reads the SLICE's or the views' outputs now
        steps_[src.slice_step].absorbed = true;
        for (int v : src.views) steps_[v].absorbed = true;
      }
      op.output = add.output;  // the op now writes the ADD's output; its own output tensor is never read
      add.absorbed = true;
      break;
    }
  }
}

GpuPartition::StridedSource GpuPartition::StridedResidualSource(
    int r, int add, const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers,
    const std::unordered_map<int, int>& producer) const {
  StridedSource src;
  int t = r, reader = add;
  for (int hops = 0; hops < 8; ++hops) {  // RESHAPE views, then the SLICE
    auto rd = readers.find(t);
    auto p = producer.find(t);
    if (t < 0 || outs.count(t) || rd == readers.end() || rd->second.size() != 1 || rd->second[0] != reader ||
        p == producer.end()) {
      return src;
    }
    const Step& s = steps_[p->second];
    if (s.absorbed || s.inputs.empty()) return src;
    if (s.view) {
      src.views.push_back(p->second);
      reader = p->second;
      t = s.inputs[0];
      continue;
    }
    const size_t rank = s.slice_in.size();
    // a column block of a split GEMM reads a [parts][M][N/parts] output, not the [M, N] rows assumed here
    if (s.code != kSlice || s.column_block || rank < 2 || s.out_dims.size() != rank) return src;
    for (size_t d = 0; d + 1 < rank; ++d) {
      if (s.slice_begin[d] != 0 || s.out_dims[d] != s.slice_in[d]) return src;  // whole rows, a column range
    }
    src.slice_step = p->second;
    src.tensor = s.inputs[0];
    src.offset = static_cast<size_t>(s.slice_begin.back()) * s.elem_bytes;
    src.row_elems = s.slice_in.back();
    return src;
  }
  return src;
}

int GpuPartition::SoleProducerPastView(int t, const std::set<int>& outs,
                                       const std::unordered_map<int, std::vector<int>>& readers,
                                       const std::unordered_map<int, int>& producer, int* view) const {
  *view = -1;
  const int p = SoleProducer(t, outs, readers, producer);
  if (p < 0 || !steps_[p].view || steps_[p].absorbed || steps_[p].inputs.empty()) return p;
  *view = p;
  return SoleProducer(steps_[p].inputs[0], outs, readers, producer);
}

void GpuPartition::FuseGatedGelus(const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers) {
  const std::unordered_map<int, int> producer = ProducerIndex();
  for (Step& gelu : steps_) {
    if (gelu.gated_gelu < 0 || gelu.inputs.empty()) continue;
    int v = -1;  // a RESHAPE between them (cfg batch 2: [2*S, 2F] -> [2, S, 2F]): the same bytes
    const int p = SoleProducerPastView(gelu.inputs[0], outs, readers, producer, &v);
    Step* fc = p < 0 ? nullptr : &steps_[p];
    Step* view = v < 0 ? nullptr : &steps_[v];
    if (fc == nullptr || fc->code != kFullyConnected || fc->residual >= 0 || fc->half != gelu.half) continue;
    const Device::StorageScope storage(device(), fc->half);
    if (!fc->op->FuseGatedGelu(device(), gelu.gated_gelu)) continue;
    fc->output = gelu.output;  // the FC now writes the GELU's [..., N/2] output; its own output is never read
    fc->output_bytes = gelu.output_bytes;
    fc->out_dims = gelu.out_dims;
    fc->fc_columns = 0;
    gelu.absorbed = true;
    if (view != nullptr) view->absorbed = true;  // its input is never written now, its output never read
  }
}

void GpuPartition::FuseInputNorms(const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers) {
  const std::unordered_map<int, int> producer = ProducerIndex();
  for (Step& conv : steps_) {
    // (a residual R == the GroupNorm's output has a second reader, its ADD, so SoleProducer refuses it too)
    if (conv.code != kCustom || conv.inputs.empty() || conv.norm_input >= 0 || conv.residual == conv.inputs[0]) continue;
    const int p = SoleProducer(conv.inputs[0], outs, readers, producer);
    if (p < 0) continue;
    Step& gn = steps_[p];
    if (gn.group_norm_silu < 0 || gn.inputs.empty() || gn.inputs[0] < 0 || gn.table_bytes > 0) continue;
    if (gn.half != conv.half) continue;
    const Device::StorageScope storage(device(), conv.half);
    const size_t table = gn.op->NormTableBytes(device());
    if (table == 0 || !conv.op->FuseInputNorm(device(), gn.group_norm_silu == 1)) continue;
    gn.op->EmitNormTable();
    gn.table_bytes = table;  // its output tensor now holds the table (the conv's first input, unchanged)
    conv.norm_input = gn.inputs[0];
  }
}

void GpuPartition::FuseNormStatistics() {
  std::unordered_map<int, int> producer;  // launching steps only: a folded ADD's output is its producer's now
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    if (!steps_[i].absorbed) producer[steps_[i].output] = i;
  }
  std::set<int> claimed;  // a conv writes the partials of one GroupNorm
  for (int j = 0; j < static_cast<int>(steps_.size()); ++j) {
    Step& gn = steps_[j];
    if (gn.group_norm_silu < 0 || gn.absorbed || gn.inputs.empty() || gn.inputs[0] < 0) continue;
    int64_t n = 0, positions = 0, channels = 0;
    int groups = 0;
    float eps = 0.0f;  // a LayerNorm view may still fold into its FC (FuseLayerNorms)
    if (gn.op->LayerNormEps(&eps) || !gn.op->GroupStatsGeometry(&n, &positions, &channels, &groups)) continue;
    auto it = producer.find(gn.inputs[0]);
    for (int hops = 0; hops < 8 && it != producer.end() && steps_[it->second].view; ++hops) {
      const Step& v = steps_[it->second];  // a RESHAPE: the same bytes
      it = v.inputs.empty() ? producer.end() : producer.find(v.inputs[0]);
    }
    if (it == producer.end() || it->second >= j || claimed.count(it->second)) continue;
    if (steps_[it->second].half != gn.half) continue;
    const Device::StorageScope storage(device(), gn.half);
    const int chunks = steps_[it->second].op->EmitGroupStats(device(), n, positions, channels, groups);
    if (chunks <= 0) continue;
    gn.op->TakeGroupStats(chunks);
    gn.stats_producer = it->second;
    gn.stats_bytes = static_cast<size_t>(3 * n * groups * chunks) * sizeof(float);
    claimed.insert(it->second);
  }
}

void GpuPartition::FuseLayerNorms(abi::TfLiteContext* context, const std::set<int>& outs,
                                  const std::unordered_map<int, std::vector<int>>& readers) {
  const std::unordered_map<int, int> producer = ProducerIndex();
  auto host_floats = [&](int t, int64_t n) -> const float* {
    abi::TfLiteTensor* tensor = nullptr;
    if (t < 0 || !TensorOf(context, t, &tensor).ok() || tensor == nullptr || !IsConstant(tensor) ||
        tensor->type != abi::kTfLiteFloat32 || tensor->data.raw == nullptr ||
        tensor->bytes != static_cast<size_t>(n) * sizeof(float)) {
      return nullptr;
    }
    return reinterpret_cast<const float*>(tensor->data.raw);
  };
  for (Step& fc : steps_) {
    if (fc.code != kFullyConnected || fc.inputs.empty() || fc.absorbed) continue;
    int view = -1;  // a RESHAPE between them (SD: the LayerNorm's [rows, 1, C] view -> [1, rows, C])
    const int p = SoleProducerPastView(fc.inputs[0], outs, readers, producer, &view);
    if (p < 0) continue;
    Step& ln = steps_[p];
    float eps = 0.0f;
    if (ln.absorbed || ln.inputs.size() < 3 || ln.inputs[0] < 0 || !ln.op->LayerNormEps(&eps)) continue;
    const int64_t k = ln.out_dims.empty() ? 0 : ln.out_dims.back();
    const float* gamma = host_floats(ln.inputs[1], k);
    const float* beta = host_floats(ln.inputs[2], k);
    if (gamma == nullptr || beta == nullptr || k > INT_MAX || fc.half != ln.half) continue;
    const Device::StorageScope storage(device(), fc.half);
    if (!fc.op->FuseLayerNorm(device(), eps, gamma, beta, static_cast<int>(k))) continue;
    ln.absorbed = true;  // nothing reads its output (or the view's) now
    if (view >= 0) steps_[view].absorbed = true;
    fc.inputs[0] = ln.inputs[0];  // the FC normalises x's rows as it reads them (same bytes as the view)
  }
}

void GpuPartition::SplitGemmColumns(const std::set<int>& outs, const std::unordered_map<int, std::vector<int>>& readers) {
  for (Step& fc : steps_) {
    if (fc.fc_columns <= 0 || outs.count(fc.output)) continue;
    auto it = readers.find(fc.output);
    if (it == readers.end() || it->second.size() < 2) continue;
    const int64_t n = fc.fc_columns;
    const Step& first = steps_[it->second[0]];
    const int64_t width = first.slice_begin.empty() ? 0 : first.out_dims.back();
    if (width <= 0 || n % width != 0 || static_cast<int64_t>(it->second.size()) != n / width) continue;
    std::vector<int> part_of(it->second.size(), -1);
    std::vector<bool> seen(static_cast<size_t>(n / width), false);
    bool ok = true;
    for (size_t r = 0; r < it->second.size() && ok; ++r) {
      const Step& sl = steps_[it->second[r]];
      const size_t rank = sl.slice_in.size();
      ok = rank > 0 && sl.inputs[0] == fc.output && outs.count(sl.output) == 0 && sl.slice_in[rank - 1] == n &&
           sl.out_dims[rank - 1] == width && sl.slice_begin[rank - 1] % width == 0;
      for (size_t d = 0; ok && d + 1 < rank; ++d) ok = sl.slice_begin[d] == 0 && sl.out_dims[d] == sl.slice_in[d];
      if (!ok) break;
      const int64_t part = sl.slice_begin[rank - 1] / width;
      ok = part >= 0 && part < n / width && !seen[static_cast<size_t>(part)];
      if (ok) {
        seen[static_cast<size_t>(part)] = true;
        part_of[r] = static_cast<int>(part);
      }
    }
    if (!ok) continue;
    const Device::StorageScope storage(device(), fc.half);
    if (!fc.op->SplitColumns(device(), static_cast<int>(n / width))) continue;
    for (size_t r = 0; r < it->second.size(); ++r) {
      Step& sl = steps_[it->second[r]];
      sl.column_block = true;
      sl.alias_offset = static_cast<size_t>(part_of[r]) * sl.output_bytes;
    }
  }
}

long long GpuPartition::ContiguousSliceOffset(const Step& step) {
  const size_t rank = step.slice_in.size();
  if (rank == 0) return -1;
  size_t a = 0;  // the first axis the output does not collapse to 1 (the last one if all do)
  while (a + 1 < rank && step.out_dims[a] == 1) ++a;
  for (size_t d = a + 1; d < rank; ++d) {
    if (step.out_dims[d] != step.slice_in[d]) return -1;  // a partial inner axis: rows with gaps
  }
  const Dims strides = StridesOf(step.slice_in);
  long long elems = 0;
  for (size_t d = 0; d < rank; ++d) elems += static_cast<long long>(step.slice_begin[d]) * strides[d];
  return elems * static_cast<long long>(step.elem_bytes);
}

Status GpuPartition::NewBuffer(abi::TfLiteContext* context, int tensor, std::unique_ptr<Buffer>* out) const {
  abi::TfLiteTensor* t = nullptr;
  SDGPU_RETURN_IF_ERROR(GetTensor(context, tensor, &t));
  return device().CreateBuffer(StoredBytes(t), out);
}

Status GpuPartition::Prepare(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  SDGPU_RETURN_IF_ERROR(init_status_);
  prepared_ = false;
  const Device& dev = device();
  outputs_ = abi::IntArrayToVector(node->outputs);
  const std::set<int> part_outputs(outputs_.begin(), outputs_.end());

  // Zero-copy views (header comment): chains resolve to their first non-view tensor.
  alias_root_.clear();
  int num_aliased = 0;
  for (Step& step : steps_) {
    long long offset = -1;  // bytes into the input when the step is a view
    if (step.column_block) {
      offset = static_cast<long long>(step.alias_offset);  // never a partition output (SplitGemmColumns)
    } else if (part_outputs.count(step.output) == 0 && !step.inputs.empty() && step.inputs[0] >= 0) {
      offset = step.view ? 0 : ContiguousSliceOffset(step);
    }
    step.aliased = offset >= 0;
    if (!step.aliased) continue;
    step.alias_offset = static_cast<size_t>(offset);
    alias_root_[step.output] = {Root(step.inputs[0]), RootOffset(step.inputs[0]) + step.alias_offset};
    ++num_aliased;
  }

  // last launch reading each tensor (views and absorbed ADDs read nothing; a residual is read by its op)
  std::unordered_map<int, int> producer, last_use;
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    if (steps_[i].absorbed) continue;
    producer[steps_[i].output] = i;
    if (steps_[i].aliased) continue;
    for (int t : DeviceReads(steps_[i])) last_use[t] = i;
  }
  auto last_use_of = [&](int tensor, int fallback) {
    auto it = last_use.find(tensor);
    return it != last_use.end() ? it->second : fallback;
  };

  planner_ = MemoryPlanner();
  internal_.clear();
  externals_.clear();
  inputs_to_upload_.clear();
  size_t max_scratch = 0;
  float_roots_.clear();
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    Step& step = steps_[i];
    if (step.absorbed) continue;  // its producer writes its output (FuseResidualAdds, FuseGatedGelus)
    const Device::StorageScope storage(dev, step.half);
    abi::TfLiteTensor* out = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, step.output, &out));
    if (StoredBytes(out) != step.output_bytes) {
      return Status::Error("node " + std::to_string(step.node_index) + ": tensor shapes changed after delegation (the " +
                           dev.backend_name() + " backend needs static shapes)");
    }
    if (step.aliased) {
      // The view's consumers keep the root's bytes alive (a constant or input/output buffer lives anyway).
      auto root = internal_.find(Root(step.output));
      if (root != internal_.end()) planner_.Alias(root->second, i, last_use_of(step.output, i));
      step.scratch_request = -1;
    } else {
      elem_bytes_[step.output] = step.elem_bytes;
      if (out->type == abi::kTfLiteFloat32) float_roots_.insert(step.output);
      if (part_outputs.count(step.output) == 0) {
        const size_t bytes = step.table_bytes > 0 ? step.table_bytes : step.output_bytes;  // a norm table: smaller
        internal_[step.output] = planner_.Add(bytes, i, last_use_of(step.output, i));
      }
      step.scratch_request = planner_.Add(step.op->scratch_bytes(), i, i);
      max_scratch = std::max(max_scratch, step.op->scratch_bytes());
      if (step.stats_producer >= 0) {  // the statistics epilogue's partials: from their writer to this GroupNorm
        step.stats_request = planner_.Add(step.stats_bytes, step.stats_producer, i);
        steps_[step.stats_producer].stats_request = step.stats_request;
      }
    }
    const std::set<int> float32_reads = Float32Reads(step);
    for (int t : DeviceReads(step)) {
      if (t < 0 || producer.count(t)) continue;
      abi::TfLiteTensor* tensor = nullptr;
      SDGPU_RETURN_IF_ERROR(TensorOf(context, t, &tensor));
      // with half activation storage, a float input read through a float32 parameter keeps its float32 copy, and so
      // does a constant that a float32-storage step reads (the partition's inputs are converted on the device)
      const bool default_half = tensor->type == abi::kTfLiteFloat32 && dev.default_act_half();
      const bool as_float32 = default_half && (float32_reads.count(t) > 0 || (!step.half && IsConstant(tensor)));
      // a constant in activation storage: a step of the other storage reading it through a view reads a converted
      // copy (PlanConversions), as it would a computed tensor's
      if (!as_float32 && IsConstant(tensor) && tensor->type == abi::kTfLiteFloat32) float_roots_.insert(t);
      if (as_float32 ? constants_f32_.count(t) > 0 : constants_.count(t) + externals_.count(t) > 0) continue;
      if (as_float32 && !IsConstant(tensor)) {
        return Status::Error("node " + std::to_string(step.node_index) + " (" + step.name +
                             "): reads a computed tensor as float32 under activations_fp16");
      }
      std::unique_ptr<Buffer> buf;
      SDGPU_RETURN_IF_ERROR(dev.CreateBuffer(as_float32 ? tensor->bytes : StoredBytes(tensor), &buf));
      if (IsConstant(tensor)) {  // weights: uploaded once, kept for the interpreter's lifetime
        if (FoldedConstant* f = FoldedOf(tensor)) SDGPU_RETURN_IF_ERROR(FillFolded(f));
        const SetupTimer timer(dev, Device::Setup::kWeightsUpload);
        SDGPU_RETURN_IF_ERROR(UploadTensor(*buf, tensor, as_float32 ? 4 : StoredElemBytes(tensor), true));
        dev.NoteWeightBytes(buf->bytes());
        if (!as_float32) elem_bytes_[t] = StoredElemBytes(tensor);
        (as_float32 ? constants_f32_ : constants_).emplace(t, std::move(buf));
      } else {  // a partition input: stored as its first reader stores it
        elem_bytes_[t] = StoredElemBytes(tensor);
        if (tensor->type == abi::kTfLiteFloat32) float_roots_.insert(t);
        externals_.emplace(t, std::move(buf));
        inputs_to_upload_.push_back(t);
      }
    }
  }
  for (int t : outputs_) {
    if (externals_.count(t)) continue;
    auto p = producer.find(t);  // stored as the step writing it stores it
    const Device::StorageScope storage(dev, p != producer.end() ? steps_[p->second].half : dev.default_act_half());
    std::unique_ptr<Buffer> buf;
    SDGPU_RETURN_IF_ERROR(NewBuffer(context, t, &buf));
    abi::TfLiteTensor* tensor = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    elem_bytes_[t] = StoredElemBytes(tensor);
    if (tensor->type == abi::kTfLiteFloat32) float_roots_.insert(t);
    externals_.emplace(t, std::move(buf));
  }
  SDGPU_RETURN_IF_ERROR(PlanConversions(context));
  SDGPU_RETURN_IF_ERROR(planner_.Plan(dev.max_buffer_bytes()));
  const size_t banks = std::max<size_t>(1, planner_.num_banks());  // (zero-byte requests refer to bank 0)
  arenas_.resize(banks);
  for (size_t b = 0; b < banks; ++b) {
    const size_t bytes = b < planner_.num_banks() ? planner_.bank_bytes(b) : 0;
    if (!arenas_[b] || arenas_[b]->bytes() < bytes) {
      arenas_[b].reset();
      SDGPU_RETURN_IF_ERROR(dev.CreateArena(bytes, &arenas_[b]));
    }
  }
  delegate_->stats().RecordPrepare(max_scratch, planner_.arena_bytes(), banks);
  const auto island_steps = dev.default_act_half() ? std::count_if(steps_.begin(), steps_.end(),
                                                                   [](const Step& st) { return !st.half; })
                                                   : 0;
  delegate_->logger().Info(std::string(dev.backend_name()) + ": partition of " + std::to_string(steps_.size()) +
                           " node(s): arena " + std::to_string(planner_.arena_bytes()) + " bytes" +
                           (banks > 1 ? " in " + std::to_string(banks) + " buffers" : std::string()) + " for " +
                           std::to_string(internal_.size()) + " internal tensor(s), " +
                           std::to_string(num_aliased) + " zero-copy view(s), " +
                           std::to_string(constants_.size()) + " constant buffer(s), " +
                           std::to_string(externals_.size()) + " input/output buffer(s)" +
                           (island_steps > 0 ? "; float32 storage for " + std::to_string(island_steps) +
                                                    " node(s) of the coarsest level (" +
                                                    std::to_string(island_pixels_) + " pixels), " +
                                                    std::to_string(conversions_.size()) + " conversion(s)"
                                              : std::string()));
  prepared_ = true;
  return Status::Ok();
}

size_t GpuPartition::StoredElemBytes(const abi::TfLiteTensor* t) const {
  return t != nullptr && t->type == abi::kTfLiteFloat32 ? device().act_bytes() : 4;
}

size_t GpuPartition::StoredBytes(const abi::TfLiteTensor* t) const {
  if (t == nullptr) return 0;
  return t->type == abi::kTfLiteFloat32 ? t->bytes / 4 * StoredElemBytes(t) : t->bytes;
}

// Host-side edge conversions: a partition's inputs, outputs and constants are float32 in TFLite, half on the device
// with activations_fp16 (a latent, an embedding, an image: small next to one UNet step's traffic).
Status GpuPartition::UploadTensor(const Buffer& buf, const abi::TfLiteTensor* t, size_t elem_bytes,
                                  bool blocking) const {
  if (t->type != abi::kTfLiteFloat32 || elem_bytes != 2) {
    return device().Upload(buf, 0, std::min(t->bytes, buf.bytes()), t->data.raw, blocking);
  }
  const size_t n = std::min(t->bytes / 4, buf.bytes() / 2);
  const auto* src = reinterpret_cast<const float*>(t->data.raw);
  edge_staging_.resize(n);
  for (size_t i = 0; i < n; ++i) edge_staging_[i] = HalfFromFloat(src[i]);
  // blocking: the staging vector is reused by the next conversion
  return device().Upload(buf, 0, n * 2, edge_staging_.data(), true);
}

Status GpuPartition::DownloadTensor(const Buffer& buf, abi::TfLiteTensor* t, size_t elem_bytes) const {
  if (t->type != abi::kTfLiteFloat32 || elem_bytes != 2) {
    return device().Download(buf, 0, std::min(t->bytes, buf.bytes()), t->data.raw);
  }
  const size_t n = std::min(t->bytes / 4, buf.bytes() / 2);
  edge_staging_.resize(n);
  SDGPU_RETURN_IF_ERROR(device().Download(buf, 0, n * 2, edge_staging_.data()));
  auto* dst = reinterpret_cast<float*>(t->data.raw);
  for (size_t i = 0; i < n; ++i) dst[i] = FloatFromHalf(edge_staging_[i]);
  return Status::Ok();
}

bool GpuPartition::StoredHalf(int root) const {
  auto eb = elem_bytes_.find(root);
  return float_roots_.count(root) != 0 && eb != elem_bytes_.end() && eb->second == 2;
}

Status GpuPartition::PlanConversions(abi::TfLiteContext* context) {
  conversions_.clear();
  conversion_of_.clear();
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    Step& step = steps_[i];
    step.converts.clear();
    if (step.aliased || step.absorbed) continue;
    const std::set<int> float32_reads = Float32Reads(step);
    for (int t : DeviceReads(step)) {
      if (t < 0 || float32_reads.count(t) || constants_.count(t) || constants_f32_.count(t)) continue;
      const int root = Root(t);
      if (float_roots_.count(root) == 0 || StoredHalf(root) == step.half) continue;
      // The tensor read is converted, not its root: a view is a contiguous range of its root, and the root may be
      // much larger (the merged cross-attention k / v projections of every layer, of which a layer reads one column
      // block). (A GroupNorm's norm table never gets here: FuseInputNorms keeps its conv in the GroupNorm's storage.)
      auto [it, added] = conversion_of_.emplace(std::make_pair(t, step.half), static_cast<int>(conversions_.size()));
      if (added) {
        abi::TfLiteTensor* tensor = nullptr;
        SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
        Conversion c;
        c.tensor = t;
        c.to_half = step.half;
        c.elements = static_cast<int64_t>(tensor->bytes / sizeof(float));
        c.first = i;
        conversions_.push_back(c);
        step.converts.push_back(it->second);
      }
      conversions_[static_cast<size_t>(it->second)].last = i;
    }
  }
  for (Conversion& c : conversions_) {
    if (c.elements > INT_MAX) return Status::Error("a tensor converted between storages has more than 2^31 elements");
    // half: whole pairs (pack_half pads an odd count)
    const size_t bytes = static_cast<size_t>(c.to_half ? (c.elements + 1) / 2 : c.elements) * 4;
    c.request = planner_.Add(bytes, c.first, c.last);
  }
  if (!conversions_.empty() && (to_float_ == nullptr || to_half_ == nullptr)) {
    const Device& dev = device();
    if (dev.max_work_group_size() < kConvertWg) {
      return Status::Error("float storage islands need work-groups of " + std::to_string(kConvertWg));
    }
    {
      const Device::StorageScope storage(dev, false);  // dequant_f16 stores into float storage there
      SDGPU_RETURN_IF_ERROR(dev.GetKernel("dequant_f16", &to_float_));
    }
    SDGPU_RETURN_IF_ERROR(dev.GetKernel("pack_half", &to_half_));
  }
  return Status::Ok();
}

Status GpuPartition::LaunchConversion(const Conversion& c, Timings* timings) const {
  const Device& dev = device();
  TensorRef src;
  SDGPU_RETURN_IF_ERROR(Ref(c.tensor, &src));
  const Buffer* dst = arenas_[planner_.bank(c.request)].get();
  const size_t dst_offset = planner_.offset(c.request);
  const int n = static_cast<int>(c.elements);
  Args a;
  if (c.to_half) {  // pack_half(y, yo in pairs, x, xo, n)
    a.Buf(dst, static_cast<int>(dst_offset / 4), 4).Buf(src).Int(n);
    return dev.Launch(*to_half_, a, {static_cast<size_t>((n + 1) / 2), 1, 1}, {kConvertWg, 1, 1}, timings);
  }
  // dequant_f16(y, yo, x, xo, n): into float storage
  a.Buf(dst, static_cast<int>(dst_offset / 4), 4).Buf(src.buffer, src.elem_offset(), 2).Int(n);
  return dev.Launch(*to_float_, a, {static_cast<size_t>(n), 1, 1}, {kConvertWg, 1, 1}, timings);
}

Status GpuPartition::ReadRef(const Step& step, int tensor, size_t root_bytes, bool float32_read,
                             TensorRef* out) const {
  // A constant's float32 copy (half activation storage): the buffer a float32 parameter or a float32-storage step
  // reads (for a float32 parameter it may be the constant's only buffer).
  if (float32_read || (!step.half && device().default_act_half())) {
    if (auto c = constants_f32_.find(tensor); c != constants_f32_.end()) {
      *out = TensorRef{c->second.get(), root_bytes, 4};
      return Status::Ok();
    }
  }
  if (auto it = conversion_of_.find({tensor, step.half}); it != conversion_of_.end()) {
    const Conversion& c = conversions_[static_cast<size_t>(it->second)];
    const size_t from = c.to_half ? 4 : 2, to = c.to_half ? 2 : 4;
    *out = TensorRef{arenas_[planner_.bank(c.request)].get(), planner_.offset(c.request) + root_bytes / from * to, to};
    return Status::Ok();
  }
  SDGPU_RETURN_IF_ERROR(Ref(tensor, out));
  out->offset += root_bytes;
  return Status::Ok();
}

std::set<int> GpuPartition::Float32Reads(const Step& step) {
  std::set<int> reads;
  for (int k : step.op->float32_inputs()) {
    if (k >= 0 && k < static_cast<int>(step.inputs.size()) && step.inputs[k] >= 0) reads.insert(step.inputs[k]);
  }
  return reads;
}

std::vector<int> GpuPartition::DeviceReads(const Step& step) {
  std::vector<int> reads;
  for (int k : step.op->device_inputs()) reads.push_back(step.inputs[k]);
  if (step.residual >= 0) reads.push_back(step.residual);
  if (step.norm_input >= 0) reads.push_back(step.norm_input);
  return reads;
}

int GpuPartition::Root(int tensor) const {
  auto it = alias_root_.find(tensor);
  return it != alias_root_.end() ? it->second.first : tensor;
}

size_t GpuPartition::RootOffset(int tensor) const {
  auto it = alias_root_.find(tensor);
  return it != alias_root_.end() ? it->second.second : 0;
}

Status GpuPartition::Ref(int tensor, TensorRef* out) const {
  const size_t offset = RootOffset(tensor);
  tensor = Root(tensor);
  auto eb = elem_bytes_.find(tensor);
  const size_t elem_bytes = eb != elem_bytes_.end() ? eb->second : 4;
  auto it = internal_.find(tensor);
  if (it != internal_.end()) {
    *out = TensorRef{arenas_[planner_.bank(it->second)].get(), planner_.offset(it->second) + offset, elem_bytes};
    return Status::Ok();
  }
  auto c = constants_.find(tensor);
  if (c != constants_.end()) {
    *out = TensorRef{c->second.get(), offset, elem_bytes};
    return Status::Ok();
  }
  auto e = externals_.find(tensor);
  if (e != externals_.end()) {
    *out = TensorRef{e->second.get(), offset, elem_bytes};
    return Status::Ok();
  }
  return Status::Error("internal error: tensor " + std::to_string(tensor) + " has no device buffer");
}

std::vector<const abi::TfLiteTensor*> GpuPartition::ConstantInputs(abi::TfLiteContext* context,
                                                                    const Step& step) const {
  std::vector<const abi::TfLiteTensor*> out;
  for (int t : step.inputs) {
    abi::TfLiteTensor* tensor = nullptr;
    if (t >= 0 && TensorOf(context, t, &tensor).ok() && IsConstant(tensor)) out.push_back(tensor);
  }
  return out;
}

Status GpuPartition::FirstInvokeSetup(abi::TfLiteContext* context) {
  const Device& dev = device();
  SDGPU_RETURN_IF_ERROR(dev.PrepareKernels());
  std::vector<PackedWeights*> weights;
  std::unordered_map<const PackedWeights*, int> step_of;  // weight -> the step whose op made it
  int launches = 0;
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    Step& step = steps_[i];
    if (step.aliased || step.absorbed) continue;
    const size_t before = weights.size();
    step.op->CollectWeights(&weights);
    for (size_t k = before; k < weights.size(); ++k) step_of[weights[k]] = i;
    ++launches;
  }
  // release_weight_pages: a tensor's host memory goes when no weight still to be made reads it (its file pages, or
  // a folded DEQUANTIZE's float32 values, which are made only then: FoldedConstant). A step that reads a constant
  // without a weight made here (Prepare's uploads, lazy weights at the first Enqueue) keeps it to the end. A device
  // producer's upload may still read its source after Ensure returns (a non-blocking write: PoCL copies later), so
  // those go in batches of 64 MiB (an eighth of a smaller model), one batch behind: when a batch is complete a fence
  // is set after it, and the batch before goes once its fence has passed -- the device is never drained, and the host
  // holds about two batches of them. The file pages go back on a thread of their own (madvise over SD1.5's UNet file
  // took ~70 ms of the uploading thread), drained once every weight is made.
  SerialWorker releases;
  std::unordered_map<const abi::TfLiteTensor*, int> pending;
  std::set<const PackedWeights*> on_device;
  std::vector<const abi::TfLiteTensor*> uploading, in_flight;
  std::unique_ptr<Fence> in_flight_fence;
  size_t uploading_bytes = 0, device_batch = 0;
  // (at this scope: `made` calls it during PrepareWeights, after the block below). A folded constant's float32 copy
  // is freed at once (a free, and the host's peak of them is what release_weight_pages bounds); file pages later.
  auto release = [this, &releases](const abi::TfLiteTensor* t) {
    if (FoldedConstant* f = FoldedOf(t)) {
      FreeFolded(f);
    } else {
      releases.Post([this, t] { GivePages(t); });
    }
  };
  std::function<Status(const PackedWeights*)> before;
  std::function<void(const PackedWeights*)> made;
  if (backend_->options().release_weight_pages) {
    if (weight_pages_.empty()) weight_pages_ = FileMappedPages::Snapshot();
    std::set<int> with_weights;
    for (const PackedWeights* w : weights) {
      if (w == nullptr || w->ready()) continue;
      with_weights.insert(step_of.at(w));
      if (w->has_device_producer()) on_device.insert(w);
      for (const abi::TfLiteTensor* t : ConstantInputs(context, steps_[step_of.at(w)])) ++pending[t];
    }
    for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
      if (with_weights.count(i)) continue;
      for (const abi::TfLiteTensor* t : ConstantInputs(context, steps_[i])) ++pending[t];  // never reaches 0 here
    }
    size_t total = 0;
    for (const auto& [t, n] : pending) total += t->bytes;
    device_batch = std::min(size_t{64} << 20, std::max<size_t>(total / 8, 1));
    before = [&](const PackedWeights* w) -> Status {  // on the weight producers' thread
      for (const abi::TfLiteTensor* t : ConstantInputs(context, steps_[step_of.at(w)])) {
        if (FoldedConstant* f = FoldedOf(t)) SDGPU_RETURN_IF_ERROR(FillFolded(f));
      }
      return Status::Ok();
    };
    made = [&](const PackedWeights* w) {
      for (const abi::TfLiteTensor* t : ConstantInputs(context, steps_[step_of.at(w)])) {
        auto p = pending.find(t);
        if (p == pending.end() || --p->second != 0) continue;
        if (!on_device.count(w)) {
          release(t);
        } else {
          uploading.push_back(t);
          uploading_bytes += t->bytes;
        }
      }
      std::unique_ptr<Fence> fence;
      if (uploading_bytes >= device_batch && dev.Mark(&fence).ok()) {
        if (in_flight_fence && in_flight_fence->Wait().ok()) {
          for (const abi::TfLiteTensor* t : in_flight) release(t);
        }  // (else kept: the end of the first invoke gives every page back)
        in_flight = std::move(uploading);
        in_flight_fence = std::move(fence);
        uploading.clear();
        uploading_bytes = 0;
      }
    };
  }
  const Status prepared = PrepareWeights(dev, weights, before, made);
  releases.Drain();  // the pages are given back before the first inference launches anything
  SDGPU_RETURN_IF_ERROR(prepared);
  for (auto& [index, f] : folded_) {  // what the first Enqueue may still read (lazy weights)
    if (f->state == FoldedConstant::State::kEmpty) SDGPU_RETURN_IF_ERROR(FillFolded(f.get()));
  }
  dev.progress().Begin("first inference", launches);
  return Status::Ok();
}

void GpuPartition::GivePages(const abi::TfLiteTensor* t) {
  const std::lock_guard<std::mutex> lock(host_mu_);
  GivePagesLocked(t);
}

void GpuPartition::GivePagesLocked(const abi::TfLiteTensor* t) {
  if (weight_pages_.empty() || t == nullptr || t->data.raw == nullptr) return;
  if (!pages_given_.insert(t->data.raw).second) return;
  const size_t bytes = weight_pages_.Release(t->data.raw, t->bytes);
  device().NoteHostPagesReleased(bytes);
  // every 256 MiB, what reading later weights mapped again (FileMappedPages::ReleaseAgain)
  constexpr size_t kAgainEvery = size_t{256} << 20;
  since_release_again_ += bytes;
  if (since_release_again_ >= kAgainEvery) {
    weight_pages_.ReleaseAgain();
    since_release_again_ = 0;
  }
}

void GpuPartition::ReleaseWeightPages(abi::TfLiteContext* context) {
  if (weight_pages_.empty()) return;
  for (const Step& step : steps_) {
    for (const abi::TfLiteTensor* t : ConstantInputs(context, step)) GivePages(t);
  }
  // Also those given back during the set-up: a non-blocking upload of the first invoke may have faulted some back
  // in (the blocking output reads before this have waited for all of them), reading neighbours others.
  weight_pages_.ReleaseAgain();
  weight_pages_ = FileMappedPages();
  pages_given_.clear();
  const size_t total = device().host_pages_released();
  delegate_->logger().Info(std::string(device().backend_name()) + ": gave back " + std::to_string(total >> 20) +
                           " MiB of the model's weight pages (release_weight_pages)");
}

Status GpuPartition::Invoke(abi::TfLiteContext* context) {
  if (!prepared_) return Status::Error("invoke before a successful prepare");
  const Device& dev = device();
  const bool first = invocations_ == 0;
  if (first) SDGPU_RETURN_IF_ERROR(FirstInvokeSetup(context));
  const auto t0 = std::chrono::steady_clock::now();
  for (int t : inputs_to_upload_) {
    abi::TfLiteTensor* tensor = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    if (tensor->data.raw == nullptr && tensor->bytes > 0) return Status::Error("input tensor without data");
    SDGPU_RETURN_IF_ERROR(UploadTensor(*externals_.at(t), tensor, elem_bytes_.at(t), false));
  }
  std::vector<Timings> timings(dev.profiling() ? steps_.size() : 0);
  size_t enqueued = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    Step& step = steps_[i];
    // zero-copy view: its output already is its input's memory; absorbed ADD: its producer wrote its output
    if (step.aliased || step.absorbed) continue;
    const Device::StorageScope storage(dev, step.half);
    for (int c : step.converts) {  // the copies of tensors of the other storage this step is the first to read
      SDGPU_RETURN_IF_ERROR(LaunchConversion(conversions_[static_cast<size_t>(c)],
                                             dev.profiling() ? &timings[i] : nullptr));
    }
    std::vector<TensorRef> in(step.inputs.size());
    const std::vector<int>& f32 = step.op->float32_inputs();
    for (int k : step.op->device_inputs()) {
      const bool float32_read = std::find(f32.begin(), f32.end(), k) != f32.end();
      SDGPU_RETURN_IF_ERROR(ReadRef(step, step.inputs[k], 0, float32_read, &in[k]));
    }
    if (step.residual >= 0) {
      TensorRef r;
      SDGPU_RETURN_IF_ERROR(ReadRef(step, step.residual, step.residual_offset, false, &r));
      step.op->set_residual_input(r);
    }
    if (step.norm_input >= 0) {
      TensorRef x;
      SDGPU_RETURN_IF_ERROR(ReadRef(step, step.norm_input, 0, false, &x));
      step.op->set_norm_input(x);
    }
    if (step.stats_request >= 0) {
      const int r = step.stats_request;
      step.op->set_stats_buffer({arenas_[planner_.bank(r)].get(), planner_.offset(r)});
    }
    TensorRef out;
    SDGPU_RETURN_IF_ERROR(Ref(step.output, &out));
    const TensorRef scratch{arenas_[planner_.bank(step.scratch_request)].get(), planner_.offset(step.scratch_request)};
    Status s = step.op->Enqueue(dev, in, out, scratch, dev.profiling() ? &timings[i] : nullptr);
    if (!s.ok()) return Status::Error("node " + std::to_string(step.node_index) + " (" + step.name + "): " + s.message());
    if (first) dev.progress().Advance();
    // The GPU starts on the first nodes while the host enqueues the rest, and never waits long for the next batch.
    ++enqueued;
    if (enqueued == kFirstFlushSteps || enqueued % kFlushEverySteps == 0) SDGPU_RETURN_IF_ERROR(dev.Flush());
  }
  delegate_->stats().RecordDispatch(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  if (first) dev.progress().SetDetail("waiting for the device");
  for (int t : outputs_) {
    abi::TfLiteTensor* tensor = nullptr;
    SDGPU_RETURN_IF_ERROR(GetTensor(context, t, &tensor));
    if (tensor->data.raw == nullptr && tensor->bytes > 0) return Status::Error("output tensor without data");
    SDGPU_RETURN_IF_ERROR(DownloadTensor(*externals_.at(t), tensor, elem_bytes_.at(t)));
  }
  if (first) {  // every op has produced its device weights: their host sources are no longer read
    dev.ReleaseStaging();  // (Device::StagingFloats)
    ReleaseFoldedConstants();
    ReleaseWeightPages(context);
    dev.progress().End();
  }
  ++invocations_;
  if (dev.profiling()) {
    SDGPU_RETURN_IF_ERROR(dev.Finish());
    for (size_t i = 0; i < steps_.size(); ++i) {
      for (const std::unique_ptr<Timer>& timer : timings[i]) {
        double ms = 0.0;
        SDGPU_RETURN_IF_ERROR(timer->ElapsedMs(&ms));
        Step& step = steps_[i];
        step.total_ms += ms;
        auto k = std::find_if(step.kernel_ms.begin(), step.kernel_ms.end(),
                              [&](const auto& e) { return e.name == timer->kernel(); });
        if (k == step.kernel_ms.end()) k = step.kernel_ms.insert(k, Step::KernelTime{timer->kernel()});
        k->ms += ms;
        ++k->launches;
      }
    }
    // profiling is a diagnostic: a profile that cannot be written is one warning, never a failed inference
    if (Status p = WriteProfile(); !p.ok() && !profile_warned_) {
      delegate_->logger().Warning(p.message());
      profile_warned_ = true;
    }
  }
  delegate_->stats().RecordInvoke();
  return Status::Ok();
}

Status GpuPartition::WriteProfile() const {
  const std::string& path = backend_->options().profile_path;
  if (path.empty()) return Status::Ok();
  // Device time of each node (all of its launches) and of each kernel it launched, and each kernel's launches, per
  // invocation (averaged over invocations).
  std::string j = "{\"device\":\"" + device().name() + "\",\"compute_units\":" +
                  std::to_string(device().compute_units()) + ",\"local_memory_bytes\":" +
                  std::to_string(device().local_memory_bytes()) + ",\"method\":\"" + device().timing_method() +
                  "\",\"invocations\":" + std::to_string(invocations_) + ",\"nodes\":[";
  const double runs = static_cast<double>(std::max(1LL, invocations_));
  auto ms_text = [runs](double total) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.6f", total / runs);
    return std::string(buf);
  };
  // folded constant DEQUANTIZEs: nodes of the partition that launch nothing, ever
  for (size_t i = 0; i < folded_nodes_.size(); ++i) {
    j += (i ? "," : "");
    j += "{\"node\":" + std::to_string(folded_nodes_[i]) + ",\"op\":\"DEQUANTIZE\",\"ms\":0,\"folded\":true,\"kernels\":[]}";
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    j += (i || !folded_nodes_.empty() ? "," : "");
    j += "{\"node\":" + std::to_string(step.node_index) + ",\"op\":\"" + step.name + "\",\"storage\":\"" +
         (step.half ? "half" : "float") + "\",\"ms\":" + ms_text(step.total_ms) + ",\"kernels\":[";
    for (size_t k = 0; k < step.kernel_ms.size(); ++k) {
      j += (k ? "," : "");
      const Step::KernelTime& t = step.kernel_ms[k];
      j += "{\"name\":\"" + t.name + "\",\"ms\":" + ms_text(t.ms) + ",\"launches\":" +
           std::to_string(t.launches / std::max(1LL, invocations_)) + "}";
    }
    j += "]}";
  }
  j += "]}\n";
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return Status::Error(std::string(device().backend_name()) + ": cannot write the profile to " + path);
  std::fwrite(j.data(), 1, j.size(), f);
  std::fclose(f);
  return Status::Ok();
}

// ---- C ABI thunks: no exception may escape ---------------------------------

void* GpuPartition::InitThunk(abi::TfLiteContext* context, const char* buffer, size_t) {
  try {
    const auto* params = reinterpret_cast<const abi::TfLiteDelegateParams*>(buffer);
    SdDelegate* d = params != nullptr ? SdDelegate::FromTflite(params->delegate) : nullptr;
    if (d == nullptr) return nullptr;
    auto* backend = dynamic_cast<GpuBackend*>(&d->backend());
    if (backend == nullptr) return nullptr;
    auto* k = new GpuPartition(d, backend);
    k->init_status_ = k->Init(context, params);
    if (!k->init_status_.ok()) d->logger().Error(k->init_status_.message());
    return k;
  } catch (...) {
    return nullptr;
  }
}

void GpuPartition::FreeThunk(abi::TfLiteContext*, void* buffer) {
  try {
    delete static_cast<GpuPartition*>(buffer);
  } catch (...) {
  }
}

abi::TfLiteStatus GpuPartition::PrepareThunk(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  auto* k = static_cast<GpuPartition*>(node->user_data);
  if (k == nullptr) {
    ReportToContext(context, "gpu partition was not initialised");
    return abi::kTfLiteError;
  }
  Status s;
  try {
    s = k->Prepare(context, node);
  } catch (const std::exception& e) {
    s = Status::Error(std::string("prepare: exception: ") + e.what());
  } catch (...) {
    s = Status::Error("prepare: unknown exception");
  }
  if (s.ok()) return abi::kTfLiteOk;
  k->delegate_->logger().Error(s.message());
  ReportToContext(context, s.message());
  return abi::kTfLiteError;
}

abi::TfLiteStatus GpuPartition::InvokeThunk(abi::TfLiteContext* context, abi::TfLiteNode* node) {
  auto* k = static_cast<GpuPartition*>(node->user_data);
  if (k == nullptr) return abi::kTfLiteError;
  Status s;
  try {
    s = k->Invoke(context);
  } catch (const std::exception& e) {
    s = Status::Error(std::string("invoke: exception: ") + e.what());
  } catch (...) {
    s = Status::Error("invoke: unknown exception");
  }
  if (s.ok()) return abi::kTfLiteOk;
  k->delegate_->logger().Error(s.message());
  ReportToContext(context, s.message());
  return abi::kTfLiteError;
}

}  // namespace sdgpu::gpu
