"""Tensor-core flash attention lab (mma_attn.cl: 3xTF32 through inline PTX mma.sync; NVIDIA OpenCL only) next to the
library's fp32 row-wise kernel (attn_flash_r40) at SD1.5's 64x64 self-attention (4096 x 4096, 8 heads of 40), b1 and
b2, same data: device ms (median of --runs), TFLOP/s (4 Sq Sk D heads), and the max relative error against a float64
reference of the first 256 query rows (every head). A feasibility measurement; the delegate does not use mma_attn.cl.

    python3 scripts/h200/mma_attn_lab.py --out $OUT/mma_attn.json     # H200 (after source .h200/setup.sh)
    python3 scripts/h200/mma_attn_lab.py --d80 --out $OUT/mma_attn80.json   # head dim 80 vs the fp32 r80 / h80
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attn_lab import reference  # noqa: E402
from cl_lab import attention_source, rel_err, tensor_core_lab  # noqa: E402

# (MT, NW, BKK, SPLIT, ROUND, PRESPLIT): see mma_attn.cl. Session 21 (BENCHMARKS): call 2 ran (2,4,64,3), (1,8,64,3),
# (1,4,64,3), (2,4,32,3), (2,2,64,3), (2,4,64,1) without ROUND / PRESPLIT; call 5 these.
CONFIGS = [(2, 4, 64, 3, 0, 0), (2, 4, 64, 3, 1, 0), (2, 4, 64, 3, 1, 1), (2, 4, 32, 3, 1, 1), (1, 8, 64, 3, 1, 1),
           (2, 4, 64, 1, 0, 0)]
SHAPES = [("b1 4096 x 4096 d40", 1, 4096, 8, 40), ("b2 4096 x 4096 d40", 2, 4096, 8, 40)]
# --d80: the 32x32 level's self-attention (head dim 80), next to the library's fp32 r80 / h80 (BQ, NT as kAttnTilings)
D80_CONFIGS = [(1, 4, 64, 3, 0, 0), (1, 2, 64, 3, 0, 0), (2, 2, 64, 3, 0, 0), (1, 4, 32, 3, 0, 0), (1, 8, 64, 3, 0, 0),
               (1, 4, 64, 1, 0, 0)]
D80_SHAPES = [("b1 1024 x 1024 d80", 1, 1024, 8, 80), ("b2 1024 x 1024 d80", 2, 1024, 8, 80)]
D80_LIB = [("attn_flash_r80", 64, 128), ("attn_flash_h80", 64, 256)]


def main() -> int:
    started = tensor_core_lab("mma_attn_lab", __doc__, lambda ap: ap.add_argument(
        "--d80", action="store_true", help="head dim 80 (the 32x32 level) instead of 40"))
    if started is None:
        return 2
    a, lab = started
    configs, shapes = (D80_CONFIGS, D80_SHAPES) if a.d80 else (CONFIGS, SHAPES)
    lib_kernels = D80_LIB if a.d80 else [("attn_flash_r40", 128, 128), ("attn_flash_m40", 128, 128)]
    src = (Path(__file__).parent / "mma_attn.cl").read_text()
    # the attention file alone builds (and is all r40 needs): not the whole library, 90-120 s on NVIDIA's compiler
    lib = lab.program(attention_source())
    progs = {}
    for cfg in configs:
        mt, nw, bkk, split, rnd, pre = cfg
        try:
            progs[cfg] = lab.program(src, f"-DMT={mt} -DNW={nw} -DBKK={bkk} -DSPLIT={split} -DROUND={rnd} "
                                          f"-DPRESPLIT={pre} -DD={80 if a.d80 else 40}")
        except Exception as exc:  # noqa: BLE001 - report the build log and go on with the other configurations
            print(f"build failed for {cfg}: {exc}", flush=True)
    rng = np.random.default_rng(1)
    i32 = np.int32
    rows = []
    for name, n, s, heads, d in shapes:
        q = rng.standard_normal((n * s, heads * d)).astype(np.float32)
        k, v = (rng.standard_normal((n * s, heads * d)).astype(np.float32) for _ in range(2))
        ref = reference(q[:s], k[:s], v[:s], heads, d, 256)
        qd, kd, vd = (lab.buffer(x) for x in (q, k, v))
        od = lab.buffer(nbytes=q.nbytes)
        scale = np.float32(1.0 / np.sqrt(d))
        flops = 4.0 * n * s * s * d * heads
        variants = []
        for kname, bq, nt in lib_kernels:
            kr = lab.cl.Kernel(lib, kname)
            kr.set_args(od, i32(0), qd, i32(0), kd, i32(0), vd, i32(0), i32(s), i32(s), i32(heads), i32(d), scale,
                        i32(0))
            variants.append((f"lib {kname} ({'3xTF32' if 'm40' in kname else 'fp32'})", kr,
                             ((s // bq) * heads * n * nt,), (nt,)))
        for (mt, nw, bkk, split, rnd, pre), prog in progs.items():
            km = lab.cl.Kernel(prog, "attn_mma")
            km.set_args(od, qd, kd, vd, i32(s), i32(s), i32(heads), scale)
            bq, nt = 16 * mt * nw, 32 * nw
            label = f"mma MT{mt} NW{nw} BK{bkk} x{split}{' round' if rnd else ''}{' presplit' if pre else ''}"
            variants.append((label, km, ((s // bq) * heads * n * nt,), (nt,)))
        for label, kern, gsz, lsz in variants:
            def launch(kern=kern, gsz=gsz, lsz=lsz):
                return [lab.launch(kern, gsz, lsz)]
            lab.queue.finish()
            od_zero = np.zeros(q.shape, np.float32)
            lab.cl.enqueue_copy(lab.queue, od, od_zero)
            launch()
            lab.queue.finish()
            err = rel_err(lab.read(od, q.shape)[:256], ref)
            ms = lab.timed(launch, a.runs)
            row = dict(shape=name, config=label, ms=ms, tflops=flops / ms * 1e-9, err=err)
            rows.append(row)
            print(f"{name:20s} {label:40s} {ms:8.4f} ms {row['tflops']:6.1f} TFLOP/s  err {err:.1e}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(dict(device=lab.dev.name, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
