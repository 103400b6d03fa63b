#include "gpu/storage_islands.h"

#include <algorithm>
#include <unordered_map>

namespace sdgpu::gpu {
namespace {

bool IsMap(const std::vector<int64_t>& d) { return d.size() == 4 && d[1] * d[2] > 1; }

int64_t Elements(const std::vector<int64_t>& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

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
  int64_t largest = 0;  // elements of the level's largest map
  for (const IslandNode& n : nodes) {
    if (n.float_output && n.out_dims.size() == 4 && n.out_dims[1] == h && n.out_dims[2] == w) {
      largest = std::max(largest, Elements(n.out_dims));
    }
  }
  std::unordered_map<int, bool> island;  // tensor -> written by a float32-storage node
  for (size_t i = 0; i < nodes.size(); ++i) {
    const IslandNode& n = nodes[i];
    bool f = false;
    if (n.view) {
      f = !n.inputs.empty() && n.inputs[0] >= 0 && island[n.inputs[0]];
    } else if (n.float_output) {
      if (n.out_dims.size() == 4 && n.out_dims[1] == h && n.out_dims[2] == w) {
        f = true;
      } else if (n.out_dims.size() < 4 || Elements(n.out_dims) <= largest) {
        for (int t : n.inputs) f = f || (t >= 0 && island[t]);
      }
    }
    out.float_storage[i] = f;
    if (n.output >= 0) island[n.output] = f;
  }
  return out;
}

}  // namespace sdgpu::gpu
