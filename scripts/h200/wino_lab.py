"""Winograd transform kernels on one queue (pyopencl, cl_lab.py): the library's winograd_input_fM_gnsilu /
winograd_output_fM (one work-item per channel and tile) against wino_split.cl's A work-items per channel and tile
(a column each, one local-memory exchange), at SD1.5's Winograd conv shapes, b1 and b2. Every variant is checked
against the library kernel's output (max rel err < 1e-5) before it is timed; device ms, median of --runs, and the
transform's DRAM bytes over that time.

    python3 scripts/h200/wino_lab.py --out $OUT/wino.json     # H200
    python3 scripts/h200/wino_lab.py --quick                  # small shapes (PoCL here)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cl_lab import Lab, lib_source, rel_err  # noqa: E402

SPLIT_SOURCE = Path(__file__).resolve().parent / "wino_split.cl"
# (batch, H = W, channels, m): the SD1.5 UNet's Winograd convs as the h200 plan tiles them (BENCHMARKS)
SHAPES = [(n, h, c, m) for n in (1, 2) for h, c, m in ((64, 320, 6), (32, 640, 4), (16, 1280, 4), (8, 1280, 2))]
QUICK_SHAPES = [(1, 12, 40, 6), (2, 9, 24, 4), (1, 8, 70, 2)]
CW = {2: 64, 4: 32, 6: 32}  # wino_split.cl's channels per work-group


def run(lab: Lab, shapes: list, runs: int) -> list[dict]:
    prog = lab.program(lib_source() + "\n" + SPLIT_SOURCE.read_text())
    rng = np.random.default_rng(3)
    i32 = np.int32
    rows = []
    for n, h, c, m in shapes:
        a = m + 2
        th = -(-h // m)
        t = n * th * th
        x = rng.standard_normal((n, h, h, c)).astype(np.float32)
        table = np.stack([rng.uniform(0.5, 1.5, n * c), rng.standard_normal(n * c)], 1).astype(np.float32)
        mm = rng.standard_normal((a * a, t, c)).astype(np.float32)
        bias, res = rng.standard_normal(c).astype(np.float32), rng.standard_normal((n, h, h, c)).astype(np.float32)
        xd, td, md, bd, rd = (lab.buffer(v) for v in (x, table, mm, bias, res))
        vbytes = a * a * t * c * 4
        outs = {k: lab.buffer(nbytes=vbytes) for k in ("lib_in", "ws_in")}
        outs.update({k: lab.buffer(nbytes=x.nbytes) for k in ("lib_out", "ws_out", "lib_outr", "ws_outr")})
        cpad = -(-c // 64) * 64
        cpad_ws = -(-c // CW[m]) * CW[m]
        name = f"b{n} {h}x{h} {c} F{m}"

        def kernel(kname, *args):
            k = lab.cl.Kernel(prog, kname)
            k.set_args(*args)
            return k

        in_args = lambda v: (v, i32(0), xd, i32(0), i32(h), i32(h), i32(c), i32(th), i32(th), i32(t), i32(1), td,  # noqa: E731
                             i32(0))
        out_args = lambda y, rrows: (y, i32(0), md, i32(0), bd, i32(0), i32(h), i32(h), i32(c), i32(th), i32(th),  # noqa: E731
                                     i32(t), i32(0), rd, i32(0), i32(rrows), i32(c), i32(1))
        cases = [
            ("input gnsilu", "lib_in", f"winograd_input_f{m}_gnsilu", in_args(outs["lib_in"]), "ws_in",
             f"ws_input_f{m}_gnsilu", in_args(outs["ws_in"]), (vbytes // 4,), x.nbytes + vbytes),
            ("output", "lib_out", f"winograd_output_f{m}", out_args(outs["lib_out"], 0), "ws_out",
             f"ws_output_f{m}", out_args(outs["ws_out"], 0), (x.size,), vbytes + x.nbytes),
            ("output + residual", "lib_outr", f"winograd_output_f{m}", out_args(outs["lib_outr"], 1), "ws_outr",
             f"ws_output_f{m}", out_args(outs["ws_outr"], 1), (x.size,), vbytes + 2 * x.nbytes),
        ]
        for what, lib_buf, lib_k, lib_a, ws_buf, ws_k, ws_a, shape, nbytes in cases:
            lk, wk = kernel(lib_k, *lib_a), kernel(ws_k, *ws_a)
            lib_launch = lambda lk=lk: [lab.launch(lk, (cpad, t), (64, 1))]  # noqa: E731
            ws_launch = lambda wk=wk: [lab.launch(wk, (cpad_ws, a, t), (CW[m], a, 1))]  # noqa: E731
            lib_launch()
            ws_launch()
            lab.queue.finish()
            ref = lab.read(outs[lib_buf], shape)
            err = rel_err(lab.read(outs[ws_buf], shape), ref)
            row = dict(shape=name, transform=what, err=err)
            if not err < 1e-5:
                print(f"{name:22s} {what:18s} split kernel WRONG, max rel err {err:.2e}", flush=True)
                row["wrong"] = True
                rows.append(row)
                continue
            row["lib_ms"] = lab.timed(lib_launch, runs)
            row["split_ms"] = lab.timed(ws_launch, runs)
            row["lib_tbs"] = nbytes / row["lib_ms"] * 1e-9
            row["split_tbs"] = nbytes / row["split_ms"] * 1e-9
            print(f"{name:22s} {what:18s} lib {row['lib_ms']:.4f} ms ({row['lib_tbs']:.2f} TB/s)  split "
                  f"{row['split_ms']:.4f} ms ({row['split_tbs']:.2f} TB/s)  err {err:.1e}", flush=True)
            rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="small shapes (PoCL)")
    a = ap.parse_args()
    lab = Lab()
    print(lab.describe(), flush=True)
    rows = run(lab, QUICK_SHAPES if a.quick else SHAPES, 3 if a.quick else a.runs)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(dict(device=lab.describe(), rows=rows), indent=1))
    return 1 if any(r.get("wrong") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
