// Making a partition's constant weights (every op's PackedWeights) in one pass before its first invoke, instead of
// each op making its own at its first Enqueue:
//   1. the weights with a device producer first (Winograd's U from the filter as stored, the packing transposes):
//      only uploads and kernel launches are enqueued, so the device works through them while the host goes on;
//   2. then the host-made ones (LayerNorm / gated-GELU folds, half weights) as a two-stage pipeline: one thread
//      produces weight i+1 (each producer spreads over the host's cores) while this thread uploads weight i, in
//      op order (a LayerNorm fold's bias and column sums come from the sums its weights' producer left); that
//      thread starts with step 1, so the first host-made weights are ready when the device-made ones are up.
// GL contexts are current on one thread: every device call stays on the calling thread. Progress: the set-up phase
// "preparing weights" (gpu/setup_progress.h); stats weights_on_device / weights_on_host.
// `before` (optional) is called before a weight is produced, on the thread producing it (the host pipeline's
// producer, else the calling thread): the partition makes the host values it reads (folded DEQUANTIZEs). `made`
// (optional) is called on the calling thread after each weight is on the device: the partition frees the host
// memory of the model tensors no weight still to come reads (common/host_pages.h).
#pragma once

#include <functional>
#include <vector>

#include "common/status.h"
#include "gpu/device.h"
#include "gpu/matmul_ops.h"

namespace sdgpu::gpu {

Status PrepareWeights(const Device& dev, const std::vector<PackedWeights*>& weights,
                      const std::function<Status(const PackedWeights*)>& before = nullptr,
                      const std::function<void(const PackedWeights*)>& made = nullptr);

}  // namespace sdgpu::gpu
