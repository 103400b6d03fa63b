// Float storage islands: which steps of a partition keep float32 activation storage when the delegate stores
// activations as half (activations_fp16).
//
// Why: half keeps 11 significant bits, and an image model's error grows with every tensor stored between its input
// and its output. The early, coarse part of a pyramid model weighs most, because everything after it amplifies its
// rounding: in a float64 simulation of the tiny VAE decoder with every stored tensor rounded to half, the error was
// 2.3-4.9e-3 (max error / max value, 32 latents and weight seeds); with the latent-resolution level (the mid block and
// the first up block, ~5% of the decoder's elements) kept float32, 1.4-2.7e-3. Its bytes are few: in SD1.5's decoder
// the level is 64 x 64 x 512 against 512 x 512 x 128, and the arena's peak is at the finer levels.
//
// The rule, from shapes only:
//   * the coarsest level is the smallest H x W among the outputs of the partition's convolutions (CONV_2D,
//     SdConv2DWinograd); a partition whose convolutions all write one size, or that has none (a text encoder), is
//     no pyramid and has no island;
//   * a step whose output is a 4-D map [N, H, W, C] of that level's H and W keeps float32 storage (H and W, not
//     their product: a plain graph's GroupNorm reshapes a finer map to [N, G, C / G, H * W], which may match it);
//   * so does a step that reads a float32 tensor of the island, unless it writes a tensor of rank 4 or more with
//     more elements than the level's largest map: the level ends where the model grows a map (the upsampler, or a
//     plain graph's broadcast form of it). The attention, GroupNorm, residual and elementwise steps of the level stay
//     in, whatever their rank and however a plain graph reshapes or broadcasts them, and so do the rows a projection
//     widens (the merged q / k / v, the feed-forward's inner width);
//   * a view (RESHAPE, SQUEEZE, EXPAND_DIMS, SLICE: zero-copy in the partition) keeps its input's storage, so a view
//     and its root never disagree on element size.
// A step that reads a tensor of the other storage reads a converted copy (GpuPartition: one conversion per tensor
// and storage, at its first such reader).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/tensor_info.h"

namespace sdgpu::gpu {

struct IslandNode {
  bool conv = false;  // a convolution (see the rule)
  bool view = false;  // may be a zero-copy view of its first input
  // The float tensors it reads that another node of the partition writes or that are partition inputs (not
  // constants), first input first; -1 for an input that is neither.
  std::vector<int> inputs;
  int output = -1;
  bool float_output = false;
  Dims out_dims;
};

struct Islands {
  std::vector<bool> float_storage;  // per node
  int64_t level_pixels = 0;         // H x W of the coarsest level (0: no pyramid, no island)
};

// `nodes` in execution order; `default_half`: the partition's storage (islands only exist under half storage).
Islands FloatIslands(const std::vector<IslandNode>& nodes, bool default_half);

}  // namespace sdgpu::gpu
