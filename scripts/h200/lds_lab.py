"""Local-memory vs FMA throughput microbenchmark (pyopencl, cl_lab.py): how many FMAs a work-item must do per
float4 it reads from local memory (or L1) before the FP32 pipes, not the load path, bound a kernel.

Every variant runs the same loop: read one float4 (`--kinds`: a local-memory broadcast, every work-item of a warp
the same address; a local read with a distinct address per work-item; an L1-resident global broadcast; a local
float broadcast; or nothing, a register) and feed it to F FMAs on F independent accumulators. The printed rates
are FMAs per second over the whole device and loads (warp-wide instructions) per SM per clock at the device's
reported clock, so a flat line in F means the load path is the bound. This decides the shape of the flash
attention and skinny GEMM kernels (RM rows per work-item give RM * 4 FMAs per broadcast K/V float4).

    python3 scripts/h200/lds_lab.py --out $OUT/lds.json   # H200
    python3 scripts/h200/lds_lab.py --quick               # PoCL here (checks the kernels build and run)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cl_lab import Lab  # noqa: E402

SOURCE = r"""
// KIND 0: local float4 broadcast; 1: local float4, distinct per work-item; 2: global float4 broadcast (L1);
// 3: local float broadcast (splatted); 4: no load (a register that changes every step).
#if KIND == 0
#define LOAD(i) buf[(i) & 511]
#elif KIND == 1
#define LOAD(i) buf[(lid + (i)) & 511]
#elif KIND == 2
#define LOAD(i) g[(i) & 511]
#elif KIND == 3
#define LOAD(i) ((float4)(((__local const float*)buf)[(i) & 2047]))
#else
#define LOAD(i) (reg + (float)(i))
#endif
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void mb(__global float* out, __global const float4* g,
                                                                  int iters) {
  __local float4 buf[512];
  const int lid = get_local_id(0);
  buf[lid] = g[lid];
  buf[lid + 256] = g[lid + 256];
  barrier(CLK_LOCAL_MEM_FENCE);
  float acc[F], c[F / 4];
  const float4 reg = g[lid];
#pragma unroll
  for (int j = 0; j < F; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int j = 0; j < F / 4; ++j) c[j] = 1e-3f * (float)(lid + j);
  int idx = 0;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const float4 a = LOAD(idx + u);
#pragma unroll
      for (int j = 0; j < F / 4; ++j) {
        acc[4 * j + 0] = mad(a.x, c[j], acc[4 * j + 0]);
        acc[4 * j + 1] = mad(a.y, c[j], acc[4 * j + 1]);
        acc[4 * j + 2] = mad(a.z, c[j], acc[4 * j + 2]);
        acc[4 * j + 3] = mad(a.w, c[j], acc[4 * j + 3]);
      }
    }
    idx = (idx + 8 + it) & 511;
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < F; ++j) s += acc[j];
  out[get_global_id(0)] = s;
}
"""

KINDS = {"lds4_bcast": 0, "lds4_distinct": 1, "l1_4_bcast": 2, "lds1_bcast": 3, "none": 4}


def run(lab: Lab, kinds: list[str], fmas: list[int], iters: int, wgs_per_cu: int, runs: int) -> list[dict]:
    cu = lab.dev.max_compute_units
    clock_hz = lab.dev.max_clock_frequency * 1e6
    n = cu * wgs_per_cu * 256
    g = lab.buffer(np.linspace(0.0, 1.0, 2048, dtype=np.float32))
    out = lab.buffer(nbytes=n * 4)
    rows = []
    for kind in kinds:
        for f in fmas:
            prg = lab.program(SOURCE, f"-DKIND={KINDS[kind]} -DF={f}")
            kern = prg.mb
            kern.set_args(out, g, np.int32(iters))
            ms = lab.timed(lambda: [lab.launch(kern, (n,), (256,))], runs)
            loads = n / 32 * iters * 8  # warp-wide load instructions
            fma = n * iters * 8 * f
            row = {"kind": kind, "fma_per_load": f, "ms": ms, "tfma_s": fma / ms * 1e-9,
                   "loads_per_sm_clk": loads / (ms * 1e-3) / cu / clock_hz,
                   "fma_warp_instr_per_sm_clk": fma / 32 / (ms * 1e-3) / cu / clock_hz}
            rows.append(row)
            print(f"{kind:14s} F={f:3d}  {ms:8.3f} ms  {row['tfma_s']:6.2f} TFMA/s  "
                  f"loads/SM/clk {row['loads_per_sm_clk']:.3f}  FMA instr/SM/clk {row['fma_warp_instr_per_sm_clk']:.2f}",
                  flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (PoCL)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    lab = Lab()
    print(lab.describe(), f"clock {lab.dev.max_clock_frequency} MHz", flush=True)
    if a.quick:
        rows = run(lab, list(KINDS), [4, 8], iters=4, wgs_per_cu=1, runs=1)
    else:
        rows = run(lab, list(KINDS), [4, 8, 16, 32], iters=1024, wgs_per_cu=8, runs=5)
    if a.out:
        a.out.write_text(json.dumps({"device": lab.describe(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
