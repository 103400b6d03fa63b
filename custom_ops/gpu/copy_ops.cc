// Layout ops (kernels in backends/<backend>/kernels/copy.*): TRANSPOSE,
// BROADCAST_TO, SLICE/STRIDED_SLICE, PAD, CONCATENATION and RESHAPE are all one
// strided N-d copy (copy_nd); GATHER/EMBEDDING_LOOKUP and
// RESIZE_NEAREST_NEIGHBOR have their own index maps. (A RESHAPE inside a
// partition usually launches nothing: gpu/partition.h aliases it.)
// Fast paths, each with the generic kernel as fallback (and for backends
// without them): copy plans are collapsed (adjacent dims contiguous in both
// source and destination merge) and copied as 16-byte elements (copy_nd_v4)
// when the innermost run allows; a TRANSPOSE that swaps the last two
// (collapsed) dims goes through a local-memory tile (transpose_tiled);
// RESIZE_NEAREST_NEIGHBOR moves 4 channels at a time when C % 4 == 0.
// Every kernel has an _act twin (gpu/kernels/copy.kern) over activation storage: a float tensor with
// activations_fp16 is stored as half and copied through it; int32 tensors, and everything in float32 mode, copy raw
// 4-byte elements.
#include <algorithm>
#include <string>

#include "gpu/builtin_params.h"
#include "gpu/op_factories.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {
namespace {

// The layout kernel `name` for a tensor of `type`: its _act twin when the partition stores that tensor as half.
std::string LayoutKernel(const Device& dev, abi::TfLiteType type, const std::string& name) {
  if (!dev.act_half() || type != abi::kTfLiteFloat32) return name;
  const size_t v4 = name.rfind("_v4");
  return v4 == std::string::npos ? name + "_act" : name.substr(0, v4) + "_act_v4";
}

// A copy from `src` into (a region of) `dst`, described in output coordinates.
struct CopyPlan {
  Dims out_dims;      // iteration shape
  Dims src_strides;   // per iteration dim
  Dims lo;            // zero padding before (PAD)
  Dims src_dims;      // bounds for PAD (defaults to out_dims)
  Dims dst_strides;   // per iteration dim
  int64_t src_base = 0, dst_base = 0;  // elements
};

// A plan with empty lo/src_dims filled in and adjacent dims merged where both dims are unpadded and
// contiguous in source and destination (size-1 unpadded dims dropped). Never rank 0.
CopyPlan Collapse(CopyPlan p) {
  if (p.out_dims.empty()) {
    p.out_dims = {1};
    p.src_strides = {1};
    p.dst_strides = {1};
  }
  if (p.lo.empty()) p.lo.assign(p.out_dims.size(), 0);
  if (p.src_dims.empty()) p.src_dims = p.out_dims;
  CopyPlan c;
  c.src_base = p.src_base;
  c.dst_base = p.dst_base;
  for (int d = static_cast<int>(p.out_dims.size()) - 1; d >= 0; --d) {
    const bool plain = p.lo[d] == 0 && p.src_dims[d] == p.out_dims[d];
    if (plain && p.out_dims[d] == 1 && p.out_dims.size() > 1) continue;
    if (plain && !c.out_dims.empty() && c.lo.front() == 0 && c.src_dims.front() == c.out_dims.front() &&
        p.src_strides[d] == c.out_dims.front() * c.src_strides.front() &&
        p.dst_strides[d] == c.out_dims.front() * c.dst_strides.front()) {
      c.out_dims.front() *= p.out_dims[d];
      c.src_dims.front() = c.out_dims.front();
      continue;
    }
    c.out_dims.insert(c.out_dims.begin(), p.out_dims[d]);
    c.src_strides.insert(c.src_strides.begin(), p.src_strides[d]);
    c.lo.insert(c.lo.begin(), p.lo[d]);
    c.src_dims.insert(c.src_dims.begin(), p.src_dims[d]);
    c.dst_strides.insert(c.dst_strides.begin(), p.dst_strides[d]);
  }
  if (c.out_dims.empty()) {  // every dim was size 1
    c.out_dims = c.src_dims = {1};
    c.src_strides = c.dst_strides = {1};
    c.lo = {0};
  }
  return c;
}

// The plan in 16-byte units when its innermost run is unpadded, contiguous on both sides and a multiple of
// 4 elements, and every stride and base is a multiple of 4 elements; false otherwise.
bool Vectorise(const CopyPlan& p, CopyPlan* v) {
  const size_t r = p.out_dims.size() - 1;
  if (p.out_dims[r] % 4 != 0 || p.src_strides[r] != 1 || p.dst_strides[r] != 1 || p.lo[r] != 0 ||
      p.src_dims[r] != p.out_dims[r] || p.src_base % 4 != 0 || p.dst_base % 4 != 0) {
    return false;
  }
  *v = p;
  for (size_t d = 0; d < r; ++d) {
    if (p.src_strides[d] % 4 != 0 || p.dst_strides[d] % 4 != 0) return false;
    v->src_strides[d] /= 4;
    v->dst_strides[d] /= 4;
  }
  v->out_dims[r] /= 4;
  v->src_dims[r] /= 4;
  v->src_base /= 4;
  v->dst_base /= 4;
  return true;
}

Status UploadCopyMeta(const Device& dev, const CopyPlan& p, std::unique_ptr<Buffer>* out) {
  std::vector<int32_t> meta(1 + 5 * kMaxRank, 0);
  meta[0] = static_cast<int32_t>(p.out_dims.size());
  for (size_t d = 0; d < p.out_dims.size(); ++d) {
    meta[1 + d] = static_cast<int32_t>(p.out_dims[d]);
    meta[1 + kMaxRank + d] = static_cast<int32_t>(p.src_strides[d]);
    meta[1 + 2 * kMaxRank + d] = static_cast<int32_t>(p.lo[d]);
    meta[1 + 3 * kMaxRank + d] = static_cast<int32_t>(p.src_dims[d]);
    meta[1 + 4 * kMaxRank + d] = static_cast<int32_t>(p.dst_strides[d]);
  }
  return UploadConstant(dev, meta.data(), meta.size() * 4, out);
}

// copy_nd(y, yo, x, xo, meta, mo, int n), one launch per plan (CONCATENATION: one per input).
// meta: [rank, out_dims[MAXR], src_strides[MAXR], lo[MAXR], src_dims[MAXR], dst_strides[MAXR]]
// copy_nd_v4: the same over uint4 (meta, offsets and n in 16-byte units) when Vectorise() allows and both
// tensors' offsets are multiples of 4 elements at launch.
class CopyOp final : public GpuOp {
 public:
  // `type`: the element type of the source(s) and destination (LayoutKernel).
  static Status Create(const Device& dev, abi::TfLiteType type, std::vector<CopyPlan> plans, std::vector<int> inputs,
                       std::unique_ptr<GpuOp>* out) {
    auto u = std::make_unique<CopyOp>();
    SDGPU_RETURN_IF_ERROR(dev.GetKernel(LayoutKernel(dev, type, "copy_nd"), &u->k_));
    if (!dev.GetKernel(LayoutKernel(dev, type, "copy_nd_v4"), &u->k4_).ok()) u->k4_ = nullptr;
    for (CopyPlan& plan : plans) {
      SDGPU_RETURN_IF_ERROR(Need(plan.out_dims.size() <= kMaxRank, "rank above 6"));
      const CopyPlan p = Collapse(plan);
      Part part;
      part.n = static_cast<int>(NumElements(p.out_dims));
      part.src_base = static_cast<int>(p.src_base);
      part.dst_base = static_cast<int>(p.dst_base);
      SDGPU_RETURN_IF_ERROR(UploadCopyMeta(dev, p, &part.meta));
      CopyPlan v;
      if (u->k4_ != nullptr && Vectorise(p, &v)) SDGPU_RETURN_IF_ERROR(UploadCopyMeta(dev, v, &part.meta4));
      u->parts_.push_back(std::move(part));
    }
    u->device_inputs_ = std::move(inputs);
    *out = std::move(u);
    return Status::Ok();
  }
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    for (size_t i = 0; i < parts_.size(); ++i) {
      const Part& p = parts_[i];
      const TensorRef& src = in[device_inputs_[i]];
      const int yo = out.elem_offset() + p.dst_base, xo = src.elem_offset() + p.src_base;
      Args a;
      if (p.meta4 && yo % 4 == 0 && xo % 4 == 0) {
        a.Buf(out.buffer, yo / 4).Buf(src.buffer, xo / 4).Buf(p.meta4.get(), 0).Int(p.n / 4);
        SDGPU_RETURN_IF_ERROR(Launch1D(dev, *k4_, a, p.n / 4, timings));
        continue;
      }
      a.Buf(out.buffer, yo).Buf(src.buffer, xo).Buf(p.meta.get(), 0).Int(p.n);
      SDGPU_RETURN_IF_ERROR(Launch1D(dev, *k_, a, p.n, timings));
    }
    return Status::Ok();
  }

 private:
  struct Part {
    int n = 0, src_base = 0, dst_base = 0;  // elements
    std::unique_ptr<Buffer> meta, meta4;    // meta4: null when the part is not vectorisable
  };
  const Kernel* k_ = nullptr;
  const Kernel* k4_ = nullptr;
  std::vector<Part> parts_;
};

// Work-group of transpose_tiled (TR_T x TR_ROWS in copy.cl). Correctness constants: the kernel's tile
// loops assume exactly this local size.
constexpr size_t kTransposeTile = 32, kTransposeRows = 8;

// transpose_tiled(y, yo, x, xo, int R, int C, int sb, int ld): y[b][c][r] = x[b*sb + r*ld + c].
class TransposeTiledOp final : public GpuOp {
 public:
  TransposeTiledOp(const Kernel* k, int b, int r, int c, int sb, int ld)
      : k_(k), b_(b), r_(r), c_(c), sb_(sb), ld_(ld) {
    device_inputs_ = {0};
  }
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    Args a;
    a.Buf(out).Buf(in[0]).Int(r_).Int(c_).Int(sb_).Int(ld_);
    const Dim3 global = {(static_cast<size_t>(c_) + kTransposeTile - 1) / kTransposeTile * kTransposeTile,
                         (static_cast<size_t>(r_) + kTransposeTile - 1) / kTransposeTile * kTransposeRows,
                         static_cast<size_t>(b_)};
    return dev.Launch(*k_, a, global, {kTransposeTile, kTransposeRows, 1}, timings);
  }

 private:
  const Kernel* k_;
  int b_, r_, c_, sb_, ld_;
};

CopyPlan Contiguous(const Dims& out) {
  CopyPlan p;
  p.out_dims = out;
  p.src_strides = StridesOf(out);
  p.dst_strides = StridesOf(out);
  return p;
}

// gather_rows(y, yo, params, po, idx, io, int axis_dim, int nidx, int inner, int n)
class GatherOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const TensorRef& p = in[params_];
    const TensorRef& i = in[1 - params_];
    Args a;
    a.Buf(out).Buf(p).Buf(i);
    a.Int(axis_dim_).Int(nidx_).Int(inner_).Int(n_);
    return Launch1D(dev, *k_, a, n_, timings);
  }

  const Kernel* k_ = nullptr;
  int params_ = 0, outer_ = 1, axis_dim_ = 1, inner_ = 1, nidx_ = 0, n_ = 0;
};

// resize_nearest(y, yo, x, xo, int ih, int iw, int c, int oh, int ow, int align, int half_px, int n);
// resize_nearest_v4: the same over uint4 channel groups (c and n / 4, offsets in 16-byte units) when C % 4 == 0
// and both offsets are 4-aligned at launch.
class ResizeNearestOp final : public GpuOp {
 public:
  using GpuOp::device_inputs_;  // filled by the factory below
  Status Enqueue(const Device& dev, const std::vector<TensorRef>& in, const TensorRef& out, const TensorRef&,
                 Timings* timings) override {
    const int yo = out.elem_offset(), xo = in[0].elem_offset();
    const bool vec = k4_ != nullptr && yo % 4 == 0 && xo % 4 == 0;
    Args a;
    a.Buf(out.buffer, vec ? yo / 4 : yo).Buf(in[0].buffer, vec ? xo / 4 : xo);
    for (size_t i = 0; i < v_.size(); ++i) a.Int(vec && (i == 2 || i + 1 == v_.size()) ? v_[i] / 4 : v_[i]);
    return Launch1D(dev, vec ? *k4_ : *k_, a, vec ? v_.back() / 4 : v_.back(), timings);
  }

  const Kernel* k_ = nullptr;
  const Kernel* k4_ = nullptr;  // null: C % 4 != 0 or no such kernel
  std::vector<int> v_;          // ih, iw, c, oh, ow, align, half_px, n
};

}  // namespace

Status MakeReshape(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  const int64_t n = NumElements(DimsOf(node.outputs[0]));
  SDGPU_RETURN_IF_ERROR(Need(n == NumElements(DimsOf(node.inputs[0])), "element count mismatch"));
  return CopyOp::Create(dev, node.inputs[0]->type, {Contiguous({n})}, {0}, out);
}

Status MakeTranspose(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  SDGPU_RETURN_IF_ERROR(Need(IsConstant(node.inputs[1]), "permutation must be constant"));
  const std::vector<int32_t> perm = ConstInts(node.inputs[1]);
  const Dims in = DimsOf(node.inputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(perm.size() == in.size(), "permutation rank mismatch"));
  const Dims is = StridesOf(in);
  CopyPlan p = Contiguous(DimsOf(node.outputs[0]));
  for (size_t d = 0; d < perm.size(); ++d) {
    SDGPU_RETURN_IF_ERROR(Need(perm[d] >= 0 && perm[d] < static_cast<int>(in.size()), "bad permutation"));
    p.src_strides[d] = is[perm[d]];
  }
  // [B,] P, Q out of a source whose P axis is contiguous and Q axis is not: a batched 2-D transpose.
  const CopyPlan c = Collapse(p);
  const size_t r = c.out_dims.size();
  const Kernel* k = nullptr;
  if (r >= 2 && r <= 3 && c.src_strides[r - 2] == 1 && c.src_strides[r - 1] != 1 &&
      dev.max_work_group_size() >= kTransposeTile * kTransposeRows &&
      dev.GetKernel(LayoutKernel(dev, node.inputs[0]->type, "transpose_tiled"), &k).ok()) {
    const int64_t batch = r == 3 ? c.out_dims[0] : 1, sb = r == 3 ? c.src_strides[0] : 0;
    *out = std::make_unique<TransposeTiledOp>(k, static_cast<int>(batch), static_cast<int>(c.out_dims[r - 1]),
                                              static_cast<int>(c.out_dims[r - 2]), static_cast<int>(sb),
                                              static_cast<int>(c.src_strides[r - 1]));
    return Status::Ok();
  }
  return CopyOp::Create(dev, node.inputs[0]->type, {p}, {0}, out);
}

Status MakeBroadcastTo(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  const Dims in = DimsOf(node.inputs[0]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(CanBroadcast(in, o), "not broadcastable"));
  CopyPlan p = Contiguous(o);
  p.src_strides = BroadcastStrides(in, o);
  return CopyOp::Create(dev, node.inputs[0]->type, {p}, {0}, out);
}

Status MakeSlice(const Device& dev, const NodeDesc& node, bool strided, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  const Dims in = DimsOf(node.inputs[0]), o = DimsOf(node.outputs[0]);
  for (size_t i = 1; i < node.inputs.size(); ++i) {
    SDGPU_RETURN_IF_ERROR(Need(IsConstant(node.inputs[i]), "begin/size/strides must be constant"));
  }
  const std::vector<int32_t> begin = ConstInts(node.inputs[1]);
  SDGPU_RETURN_IF_ERROR(Need(begin.size() == in.size(), "begin rank mismatch"));
  std::vector<int32_t> step(in.size(), 1);
  if (strided) {
    const auto* prm = static_cast<const StridedSliceParams*>(node.builtin_data);
    SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && prm->ellipsis_mask == 0 && prm->new_axis_mask == 0 &&
                                   prm->shrink_axis_mask == 0 && !prm->offset,
                               "only plain strided slices (no ellipsis/new-axis/shrink masks) are supported"));
    step = ConstInts(node.inputs[3]);
    SDGPU_RETURN_IF_ERROR(Need(step.size() == in.size(), "strides rank mismatch"));
    std::vector<int32_t> b = begin;
    for (size_t d = 0; d < in.size(); ++d) {
      if (prm->begin_mask & (1 << d)) b[d] = step[d] > 0 ? 0 : static_cast<int32_t>(in[d]) - 1;
      else if (b[d] < 0) b[d] += static_cast<int32_t>(in[d]);
      SDGPU_RETURN_IF_ERROR(Need(step[d] > 0, "negative strides are not supported"));
    }
    SDGPU_RETURN_IF_ERROR(Need(o.size() == in.size(), "rank-changing strided slice"));
    const Dims is = StridesOf(in);
    CopyPlan p = Contiguous(o);
    for (size_t d = 0; d < in.size(); ++d) {
      p.src_strides[d] = is[d] * step[d];
      p.src_base += b[d] * is[d];
    }
    return CopyOp::Create(dev, node.inputs[0]->type, {p}, {0}, out);
  }
  SDGPU_RETURN_IF_ERROR(Need(o.size() == in.size(), "rank mismatch"));
  const Dims is = StridesOf(in);
  CopyPlan p = Contiguous(o);
  for (size_t d = 0; d < in.size(); ++d) {
    SDGPU_RETURN_IF_ERROR(Need(begin[d] >= 0 && begin[d] + o[d] <= in[d], "slice out of range"));
    p.src_strides[d] = is[d];
    p.src_base += begin[d] * is[d];
  }
  return CopyOp::Create(dev, node.inputs[0]->type, {p}, {0}, out);
}

Status MakePad(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[0]), "only 4-byte element types are supported"));
  SDGPU_RETURN_IF_ERROR(Need(node.inputs.size() == 2, "PADV2 constant values are not supported"));
  SDGPU_RETURN_IF_ERROR(Need(IsConstant(node.inputs[1]), "paddings must be constant"));
  const std::vector<int32_t> pads = ConstInts(node.inputs[1]);
  const Dims in = DimsOf(node.inputs[0]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(pads.size() == 2 * in.size() && o.size() == in.size(), "paddings shape mismatch"));
  CopyPlan p = Contiguous(o);
  p.src_strides = StridesOf(in);
  p.src_dims = in;
  p.lo.resize(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    SDGPU_RETURN_IF_ERROR(Need(pads[2 * d] >= 0 && pads[2 * d + 1] >= 0, "negative padding"));
    p.lo[d] = pads[2 * d];
  }
  return CopyOp::Create(dev, node.inputs[0]->type, {p}, {0}, out);
}

Status MakeConcat(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto* prm = static_cast<const ConcatenationParams*>(node.builtin_data);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && prm->activation == 0, "fused activation on CONCATENATION"));
  const Dims o = DimsOf(node.outputs[0]);
  const int axis = prm->axis < 0 ? prm->axis + static_cast<int>(o.size()) : prm->axis;
  SDGPU_RETURN_IF_ERROR(Need(axis >= 0 && axis < static_cast<int>(o.size()), "bad axis"));
  const Dims os = StridesOf(o);
  std::vector<CopyPlan> plans;
  std::vector<int> inputs;
  int64_t at = 0;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    SDGPU_RETURN_IF_ERROR(Need(Is4Byte(node.inputs[i]), "only 4-byte element types are supported"));
    const Dims in = DimsOf(node.inputs[i]);
    CopyPlan p = Contiguous(in);
    p.dst_strides = os;
    p.dst_base = at * os[axis];
    at += in[axis];
    plans.push_back(p);
    inputs.push_back(static_cast<int>(i));
  }
  SDGPU_RETURN_IF_ERROR(Need(at == o[axis], "concatenated size mismatch"));
  return CopyOp::Create(dev, node.outputs[0]->type, plans, inputs, out);
}

Status MakeGather(const Device& dev, const NodeDesc& node, int params_input, int axis, std::unique_ptr<GpuOp>* out) {
  const abi::TfLiteTensor* p = node.inputs[params_input];
  const abi::TfLiteTensor* idx = node.inputs[1 - params_input];
  SDGPU_RETURN_IF_ERROR(Need(Is4Byte(p) && idx->type == abi::kTfLiteInt32, "only 4-byte params and int32 indices"));
  const Dims pd = DimsOf(p);
  if (axis < 0) axis += static_cast<int>(pd.size());
  SDGPU_RETURN_IF_ERROR(Need(axis >= 0 && axis < static_cast<int>(pd.size()), "bad axis"));
  auto u = std::make_unique<GatherOp>();
  u->outer_ = 1;
  for (int d = 0; d < axis; ++d) u->outer_ *= static_cast<int>(pd[d]);
  u->axis_dim_ = static_cast<int>(pd[axis]);
  u->inner_ = 1;
  for (size_t d = axis + 1; d < pd.size(); ++d) u->inner_ *= static_cast<int>(pd[d]);
  u->nidx_ = static_cast<int>(NumElements(DimsOf(idx)));
  u->n_ = u->outer_ * u->nidx_ * u->inner_;
  SDGPU_RETURN_IF_ERROR(Need(u->n_ == NumElements(DimsOf(node.outputs[0])), "output size mismatch"));
  u->params_ = params_input;
  u->device_inputs_ = {0, 1};
  SDGPU_RETURN_IF_ERROR(dev.GetKernel(LayoutKernel(dev, p->type, "gather_rows"), &u->k_));
  *out = std::move(u);
  return Status::Ok();
}

Status MakeResizeNearest(const Device& dev, const NodeDesc& node, std::unique_ptr<GpuOp>* out) {
  const auto* prm = static_cast<const ResizeNearestParams*>(node.builtin_data);
  const Dims in = DimsOf(node.inputs[0]), o = DimsOf(node.outputs[0]);
  SDGPU_RETURN_IF_ERROR(Need(prm != nullptr && in.size() == 4 && o.size() == 4 && in[0] == o[0] && in[3] == o[3] &&
                                 Is4Byte(node.inputs[0]),
                             "expects NHWC 4-byte input"));
  auto u = std::make_unique<ResizeNearestOp>();
  u->v_ = {static_cast<int>(in[1]), static_cast<int>(in[2]), static_cast<int>(in[3]), static_cast<int>(o[1]),
           static_cast<int>(o[2]), prm->align_corners ? 1 : 0, prm->half_pixel_centers ? 1 : 0,
           static_cast<int>(NumElements(o))};
  u->device_inputs_ = {0};
  const abi::TfLiteType type = node.inputs[0]->type;
  SDGPU_RETURN_IF_ERROR(dev.GetKernel(LayoutKernel(dev, type, "resize_nearest"), &u->k_));
  if (in[3] % 4 != 0 || !dev.GetKernel(LayoutKernel(dev, type, "resize_nearest_v4"), &u->k4_).ok()) u->k4_ = nullptr;
  *out = std::move(u);
  return Status::Ok();
}

}  // namespace sdgpu::gpu
