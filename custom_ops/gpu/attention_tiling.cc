#include "gpu/attention_tiling.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace sdgpu::gpu {
namespace {

// The tiled attention kernels attn_{flash,stats,pv}_<suffix> of ops/attention/gpu.kern ("Tiled kernels" and
// "Row-wise tiled kernels"), every backend (gpu/attention_tiling.h: the fields; bq, nt and the local memory mirror the
// ATT_INSTANTIATE / ATR_INSTANTIATE lines). Candidates in order (a fixed-D one before "dyn"); the first that fits a
// head dim, key count and grid, whose kernel the backend has and whose work-group and local memory the device takes,
// is used. A backend's vendor tilings (Device::vendor_attention_tilings: NVIDIA's tensor-core "f40" / "m40" / "m80" /
// "f80" and warp-shuffle "h160x") join in front of the tiling they name.
constexpr AttnTiling kAttnTilings[] = {
    // self-attention at 64x64 (ATR_INSTANTIATE: BQ = RW*RM, NT = RW*NS*DS)
    {"r40", 40, 40, 128, 128, 256, 16, false, 0, kTcNone, AttnRowLocalBytes(40, 2, 64, 2, 8, 1, 0, 1), nullptr},
    // self-attention at 32x32 when one wave holds it (b1)
    {"h80", 80, 80, 64, 256, 256, 16, false, 1, kTcNone, AttnRowLocalBytes(80, 2, 32, 4, 4, 1, 0, 2), nullptr},
    // self-attention at 32x32
    {"r80", 80, 80, 64, 128, 256, 16, true, 0, kTcNone, AttnRowLocalBytes(80, 2, 32, 4, 4, 1, 1, 1), nullptr},
    // r40 / r80 for devices at GL ES 3.1's minimums (16 KiB, 128 invocations), which do not take those
    {"r40s", 40, 40, 64, 64, 256, 16, false, 0, kTcNone, AttnRowLocalBytes(40, 2, 32, 2, 8, 1, 0, 1), nullptr},
    {"r80s", 80, 80, 32, 64, 256, 16, true, 0, kTcNone, AttnRowLocalBytes(80, 1, 32, 2, 8, 0, 0, 1), nullptr},
    // ATT_INSTANTIATE: BQ, NT = (BQ / RM) * NC
    {"d40", 40, 40, 64, 128, 0, 0, false, 0, kTcNone, AttnBlockLocalBytes(64, 32, 8, 40, 32, 40), nullptr},
    {"d80", 80, 80, 32, 128, 0, 0, false, 0, kTcNone, AttnBlockLocalBytes(32, 32, 8, 80, 32, 80), nullptr},
    // 16x16 self-attention, one wave (b1)
    {"h160", 160, 160, 16, 256, 256, 16, false, 1, kTcNone, AttnRowLocalBytes(160, 1, 16, 8, 4, 0, 0, 2), nullptr},
    // the same with 32-query blocks (b2)
    {"h160w", 160, 160, 32, 256, 256, 16, false, 1, kTcNone, AttnRowLocalBytes(160, 1, 32, 4, 4, 1, 0, 2), nullptr},
    // 16x16 and 8x8 levels, self and cross (faster than d160 at every Sk)
    {"r160", 160, 160, 16, 128, 0, 16, false, 0, kTcNone, AttnRowLocalBytes(160, 1, 16, 8, 2, 0, 1, 1), nullptr},
    {"d160", 160, 160, 32, 128, kForcedOnly, 0, false, 0, kTcNone, AttnBlockLocalBytes(32, 16, 8, 160, 16, 160),
     nullptr},
    {"d512", 512, 512, 32, 256, 0, 0, false, 0, kTcNone, AttnBlockLocalBytes(32, 64, 32, 32, 8, 512), nullptr},
    // any head dim up to ATT_DYN_MAXD
    {"dyn", 0, 512, 32, 256, 0, 0, false, 0, kTcNone, AttnBlockLocalBytes(32, 32, 16, 32, 8, 512), nullptr},
    // the same on devices with 16 KiB of local memory or 128 work-items (GL ES 3.1's minimums)
    {"dyn128", 0, 512, 16, 128, 0, 0, false, 0, kTcNone, AttnBlockLocalBytes(16, 16, 16, 32, 4, 512), nullptr},
};

}  // namespace

std::vector<const AttnTiling*> AttnTilingTable(const std::vector<AttnTiling>& vendor) {
  std::vector<const AttnTiling*> out;
  for (const AttnTiling& t : kAttnTilings) {
    for (const AttnTiling& v : vendor) {
      if (v.before != nullptr && std::strcmp(v.before, t.suffix) == 0) out.push_back(&v);
    }
    out.push_back(&t);
  }
  for (const AttnTiling& v : vendor) {
    const bool placed = v.before != nullptr && std::any_of(std::begin(kAttnTilings), std::end(kAttnTilings),
                                                           [&](const AttnTiling& t) {
                                                             return std::strcmp(v.before, t.suffix) == 0;
                                                           });
    if (!placed) out.push_back(&v);
  }
  return out;
}

}  // namespace sdgpu::gpu
