#include "gpu/storage_islands.h"

#include <algorithm>
#include <unordered_map>

#include "ops/tensor_info.h"

namespace sdgpu::gpu {
namespace {

bool IsMap(const Dims& d) { return d.size() == 4 && d[1] * d[2] > 1; }

}  // namespace

Islands FloatIslands(const std::vector<IslandNode>& nodes, bool default_half) {
  Islands out;
  out.float_storage.assign(nodes.size(), false);
  if (!default_half) return out;
  int64_t h = 0, w = 0, finest = 0;  // the level's map size; the finest level's pixels
  for (const IslandNode& n : nodes) {
    if (!n.conv || !IsMap(n.out_dims)) continue;
    const int64_t pixels = n.out_dims[1] * n.out_dims[2];
    finest = std::max(finest, pixels);
    if (out.level_pixels == 0 || pixels < out.level_pixels) {
      out.level_pixels = pixels;
      h = n.out_dims[1];
      w = n.out_dims[2];
    }
  }
  if (out.level_pixels == 0 || finest == out.level_pixels) {  // no pyramid: no level is coarser than another
    out.level_pixels = 0;
    return out;
  }
  auto level_map = [h, w](const Dims& d) { return d.size() == 4 && d[1] == h && d[2] == w; };
  int64_t largest = 0;  // elements of the level's largest map
  for (const IslandNode& n : nodes) {
    if (n.float_output && level_map(n.out_dims)) largest = std::max(largest, NumElements(n.out_dims));
  }
  std::unordered_map<int, bool> island;  // tensor -> written by a float32-storage node
  for (size_t i = 0; i < nodes.size(); ++i) {
    const IslandNode& n = nodes[i];
    bool f = false;
    if (n.view) {
      f = !n.inputs.empty() && n.inputs[0] >= 0 && island[n.inputs[0]];
    } else if (n.float_output) {
      if (level_map(n.out_dims)) {
        f = true;
      } else if (n.out_dims.size() < 4 || NumElements(n.out_dims) <= largest) {
        for (int t : n.inputs) f = f || (t >= 0 && island[t]);
      }
    }
    out.float_storage[i] = f;
    if (n.output >= 0) island[n.output] = f;
  }
  return out;
}

}  // namespace sdgpu::gpu
