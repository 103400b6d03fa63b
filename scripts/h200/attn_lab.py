"""Attention kernel build variants on one queue (pyopencl, cl_lab.py): the library's row-wise flash kernels at
SD1.5's long self-attention shapes, as the delegate builds them, with exp2 -> native_exp2, and with extra
row-wise instantiations appended (ATR_INSTANTIATE: suffix, D, RM, RW, NS, KS, DB, LZ, QL; ops/attention/opencl.cl
documents them). Device ms per launch (median of --runs) and TFLOP/s (4 * Sq * Sk * D * heads); every variant
is checked against a float64 numpy reference on the first 256 query rows before it is timed.

    python3 scripts/h200/attn_lab.py --out $OUT/attn.json    # H200
    python3 scripts/h200/attn_lab.py --quick                 # small shapes (PoCL here)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cl_lab import Lab, lib_source, rel_err  # noqa: E402

# (name, S (= Sq = Sk), heads, head dim, the library's tiling, its BQ, its NT)
SHAPES = [("64x64 self 4096 d40", 4096, 8, 40, "r40", 128, 128), ("32x32 self 1024 d80", 1024, 8, 80, "r80", 64, 128)]
QUICK_SHAPES = [("quick d40", 256, 2, 40, "r40", 128, 128), ("quick d80", 128, 2, 80, "r80", 64, 128)]
EXTRA = {
    "r40": ["x1, 40, 2, 64, 2, 4, 1, 0.0f, 0", "x2, 40, 2, 32, 4, 8, 1, 8.0f, 0", "x3, 40, 2, 64, 2, 8, 1, 8.0f, 0"],
    "r80": ["y1, 80, 2, 32, 4, 8, 1, 8.0f, 1", "y2, 80, 2, 32, 4, 4, 1, 0.0f, 1"],
}


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, d: int, rows: int) -> np.ndarray:
    out = np.empty((rows, heads * d))
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        s = q[:rows, cols].astype(np.float64) @ k[:, cols].T.astype(np.float64) / np.sqrt(d)
        p = np.exp(s - s.max(1, keepdims=True))
        out[:, cols] = (p / p.sum(1, keepdims=True)) @ v[:, cols]
    return out


def run(lab: Lab, shapes: list, runs: int) -> list[dict]:
    src = lib_source()
    extra = "\n".join(f"ATR_INSTANTIATE({line})" for lines in EXTRA.values() for line in lines)
    builds = {"lib": (src, ""), "native_exp2": (src, "-Dexp2=native_exp2"),
              "extra": (src.replace("#undef ATR_INSTANTIATE", extra + "\n#undef ATR_INSTANTIATE"), "")}
    rng = np.random.default_rng(1)
    rows = []
    i32 = np.int32
    for name, s, heads, d, tiling, bq, nt in shapes:
        q, k, v = (rng.standard_normal((s, heads * d)).astype(np.float32) for _ in range(3))
        nref = min(s, 256)
        ref = reference(q, k, v, heads, d, nref)
        bufs = [lab.buffer(x) for x in (q, k, v)]
        o_d = lab.buffer(nbytes=q.nbytes)
        variants = [("lib", tiling, bq, nt), ("native_exp2", tiling, bq, nt)]
        for line in EXTRA[tiling]:
            p = [x.strip() for x in line.split(",")]  # suffix, D, RM, RW, NS, ...: BQ = RW*RM, NT = RW*NS
            variants.append(("extra", p[0], int(p[3]) * int(p[2]), int(p[3]) * int(p[4])))
        for build, suffix, vbq, vnt in variants:
            kern = lab.cl.Kernel(lab.program(*builds[build]), f"attn_flash_{suffix}")
            kern.set_args(o_d, i32(0), bufs[0], i32(0), bufs[1], i32(0), bufs[2], i32(0), i32(s), i32(s), i32(heads),
                          i32(d), np.float32(1.0 / np.sqrt(d)), i32(0))
            grid = (-(-s // vbq) * heads * vnt,)

            def launch(kern=kern, grid=grid, vnt=vnt):
                return [lab.launch(kern, grid, (vnt,))]

            launch()
            lab.queue.finish()
            err = rel_err(lab.read(o_d, q.shape)[:nref], ref)
            label = f"{build} attn_flash_{suffix}"
            if not err < 1e-4:
                print(f"{name:24s} {label:32s} wrong result, max rel err {err:.2e}", flush=True)
                continue
            ms = lab.timed(launch, runs)
            tflops = 4.0 * s * s * d * heads / ms * 1e-9
            rows.append(dict(shape=name, config=label, ms=ms, tflops=tflops, err=err))
            print(f"{name:24s} {label:32s} {ms:8.4f} ms {tflops:6.1f} TFLOP/s  err {err:.1e}", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    lab = Lab()
    print(f"device: {lab.describe()}", flush=True)
    rows = run(lab, QUICK_SHAPES if args.quick else SHAPES, args.runs)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(device=lab.dev.name, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
