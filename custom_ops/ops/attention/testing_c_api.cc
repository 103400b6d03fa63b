// A C entry point over the SdAttention planner's tiling table, for tests (tests/native/test_attention_tilings.py
// compiles it with gpu/attention_tiling.cc and backends/opencl/nvidia/attention_tilings.cc into a throwaway library
// and calls it via ctypes): the candidates' order as every backend sees it, and as NVIDIA's OpenCL does with its
// vendor tilings merged in. Not part of the delegate.
#include <cstring>
#include <string>
#include <vector>

#include "backends/opencl/nvidia/attention_tilings.h"
#include "gpu/attention_tiling.h"

extern "C" {

// The table in the planner's order (`nvidia`: with NVIDIA's vendor tilings), one tiling per line: "suffix head_dim
// max_head_dim bq nt min_keys bk auto_split max_groups_per_cu tc flash_bytes stats_bytes pv_bytes". Returns the text's
// length, or -1 when it does not fit `cap` bytes (with its terminating NUL).
int sdattn_tiling_table(int nvidia, char* out, int cap) {
  const std::vector<sdgpu::gpu::AttnTiling> vendor =
      nvidia != 0 ? sdgpu::ocl::nvidia::AttentionTilings() : std::vector<sdgpu::gpu::AttnTiling>{};
  std::string text;
  for (const sdgpu::gpu::AttnTiling* t : sdgpu::gpu::AttnTilingTable(vendor)) {
    for (const std::string& field :
         {std::string(t->suffix), std::to_string(t->head_dim), std::to_string(t->max_head_dim), std::to_string(t->bq),
          std::to_string(t->nt), std::to_string(t->min_keys), std::to_string(t->bk), std::to_string(t->auto_split),
          std::to_string(t->max_groups_per_cu), std::to_string(t->tc), std::to_string(t->local.flash),
          std::to_string(t->local.stats), std::to_string(t->local.pv)}) {
      text += field + " ";
    }
    text.back() = '\n';
  }
  if (static_cast<int>(text.size()) + 1 > cap) return -1;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return static_cast<int>(text.size());
}

}  // extern "C"
