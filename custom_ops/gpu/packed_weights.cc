// Constant GEMM / conv weights as the tiled kernels read them (PackedWeights: packed on the host over all cores, or
// produced on the device from the model's bytes through DeviceStaging; DeviceTranspose, the half conversion) --
// declared in gpu/matmul_ops.h.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/half.h"
#include "common/thread_pool.h"
#include "gpu/matmul_ops.h"
#include "gpu/op_util.h"

namespace sdgpu::gpu {

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
  if (buffers_.empty()) buffers_.resize(static_cast<size_t>(std::max(1, dev.staging_buffers())));
  std::unique_ptr<Buffer>& buffer = buffers_[next_];
  next_ = (next_ + 1) % buffers_.size();
  if (!buffer || buffer->bytes() < bytes) {
    buffer.reset();  // a launch still reading it keeps it alive (OpenCL / GL release deferred)
    SDGPU_RETURN_IF_ERROR(dev.CreateBuffer(bytes, &buffer));
  }
  if (want_ring_) {
    want_ring_ = false;
    ring_ = dev.CreateUploadRing();
  }
  if (ring_) {
    SDGPU_RETURN_IF_ERROR(ring_->Upload(*buffer, 0, bytes, src));
    dev.NoteRingUploadBytes(bytes);
  } else {
    SDGPU_RETURN_IF_ERROR(dev.Upload(*buffer, 0, bytes, src, /*blocking=*/false));
  }
  *out = buffer.get();
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

}  // namespace sdgpu::gpu
