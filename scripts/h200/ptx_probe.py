"""Tensor-core probe for NVIDIA OpenCL (ptx_probe.cl): does inline PTX mma.sync (TF32 m16n8k8) build and give
the right numbers through the driver's OpenCL compiler, single TF32 and the 3xTF32 split, and what do mma.sync and
fp32 FMA issue at (TFLOP/s, 2 flops per multiply-add). A feasibility check for a tensor-core GEMM path, nothing
the delegate runs.

    python3 scripts/h200/ptx_probe.py --out $OUT/ptx.json    # H200 (after source .h200/setup.sh)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cl_lab import Lab, rel_err  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--iters", type=int, default=4096)
    a = ap.parse_args()
    lab = Lab()
    print("device:", lab.describe(), flush=True)
    result: dict = {"device": lab.dev.name}
    try:
        prog = lab.program((Path(__file__).parent / "ptx_probe.cl").read_text())
    except Exception as e:  # the build log says what the compiler refused
        print("build failed:", str(e)[:3000], flush=True)
        result["build"] = str(e)[:3000]
        if a.out:
            a.out.write_text(json.dumps(result, indent=1))
        return 1
    result["build"] = "ok"
    rng = np.random.default_rng(0)
    A = rng.standard_normal((16, 8)).astype(np.float32)
    B = rng.standard_normal((8, 8)).astype(np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    d_buf, a_buf, b_buf = lab.buffer(nbytes=16 * 8 * 4), lab.buffer(A), lab.buffer(B)
    for split in (1, 3):
        k = lab.cl.Kernel(prog, "mma_tile")
        k.set_args(d_buf, a_buf, b_buf, np.int32(split))
        lab.launch(k, (32,), (32,))
        got = lab.read(d_buf, (16, 8))
        err = rel_err(got, ref)
        fp32 = rel_err(A @ B, ref)
        print(f"mma_tile split {split}: max rel err {err:.2e} (fp32 numpy {fp32:.2e})", flush=True)
        result[f"tile_err_split{split}"] = err
        result["tile_err_fp32"] = fp32
    cus = lab.dev.max_compute_units
    out = lab.buffer(nbytes=cus * 8 * 256 * 4)
    for name, wg, flops_per_item_iter in (("mma_rate", 256, 8 * 2 * 16 * 8 * 8 / 32), ("ffma_rate", 256, 16 * 2)):
        k = lab.cl.Kernel(prog, name)
        k.set_args(out, np.int32(a.iters), np.float32(1e-3))
        items = cus * 8 * wg

        def launch(k=k, items=items, wg=wg):
            return [lab.launch(k, (items,), (wg,))]

        ms = lab.timed(launch, 5)
        tflops = items * a.iters * flops_per_item_iter / (ms * 1e-3) * 1e-12
        print(f"{name}: {ms:.3f} ms, {tflops:.1f} TFLOP/s", flush=True)
        result[name] = {"ms": ms, "tflops": tflops}
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
