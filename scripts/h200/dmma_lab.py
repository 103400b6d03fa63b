"""FP64 tensor-core lab (NVIDIA OpenCL only, inline PTX mma.sync m16n8k8 .f64, sm_90): fp32 data, every product an
exact fp64 product of two fp32 values, fp64 accumulation, one rounding to fp32 at the end, so the results are at least
as accurate as fp32 FMAs (unlike 3xTF32, an emulation that drops terms). Measured next to the library's fp32 kernels
and the 3xTF32 ones on the same data: device ms (median of --runs), TFLOP/s, and the max relative error against a
float64 reference. A feasibility measurement; the delegate does not use these kernels.

    python3 scripts/h200/dmma_lab.py --probe --gemm --attn --out $OUT/dmma.json   # H200 (after source .h200/setup.sh)

--probe: one m16n8k8 f64 product against numpy (the fragment layout) and the issue rate of independent products.
--gemm: mma_gemm_async.cl with SPLIT = 0 (the cp.async ring, double accumulators) at SD1.5's FC shapes.
--attn: dmma_attn.cl at SD1.5's 64x64 (head dim 40) and 32x32 (head dim 80) self-attention, b1 and b2.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attn_lab import reference  # noqa: E402
from cl_lab import GEMM_SOURCES_END, attention_source, lib_source, rel_err, tensor_core_lab  # noqa: E402
from mma_lab import ASYNC_SHAPES, LIB  # noqa: E402

HERE = Path(__file__).resolve().parent
# (BM, BN, WM, WN, SPLIT, STAGES) of mma_gemm_async.cl; SPLIT 0 = FP64 tensor cores, 3 = 3xTF32 (session 22's best)
GEMM_CONFIGS = [(128, 64, 64, 32, 0, 3), (128, 64, 64, 32, 0, 2), (64, 64, 32, 32, 0, 4), (64, 128, 32, 64, 0, 3),
                (128, 128, 64, 32, 0, 2), (128, 64, 32, 32, 0, 3), (128, 128, 64, 32, 3, 2), (64, 64, 32, 32, 3, 4)]
# (MT, NW, BKK, OD, KD) of dmma_attn.cl; call 1 (BENCHMARKS session 23) ran the KD 0 ones but the last three
ATTN_CONFIGS = [(1, 4, 64, 1, 0), (1, 8, 64, 1, 0), (2, 4, 64, 0, 0), (2, 4, 64, 1, 0), (1, 4, 32, 1, 0), (2, 2, 64, 0, 0),
                (1, 2, 64, 1, 0), (2, 4, 32, 1, 0), (2, 4, 64, 1, 1), (1, 8, 64, 1, 1)]
ATTN_SHAPES = [("b1 4096 x 4096 d40", 1, 4096, 8, 40), ("b2 4096 x 4096 d40", 2, 4096, 8, 40),
               ("b1 1024 x 1024 d80", 1, 1024, 8, 80), ("b2 1024 x 1024 d80", 2, 1024, 8, 80)]
# the library's kernels per head dim: (name, BQ, NT)
ATTN_LIB = {40: [("attn_flash_r40", 128, 128), ("attn_flash_m40", 128, 128), ("attn_flash_f40", 128, 128)],
            80: [("attn_flash_r80", 64, 128), ("attn_flash_h80", 64, 256), ("attn_flash_m80", 64, 128),
                 ("attn_flash_f80", 128, 256)]}


def probe(lab, a, rows: list) -> None:
    prog = lab.program((HERE / "dmma_attn.cl").read_text())
    rng = np.random.default_rng(0)
    A = rng.standard_normal((16, 8))
    B = rng.standard_normal((8, 8))
    ad, bd, dd = lab.buffer(A), lab.buffer(B), lab.buffer(nbytes=16 * 8 * 8)
    k = lab.cl.Kernel(prog, "dmma_tile")
    k.set_args(dd, ad, bd)
    lab.launch(k, (32,), (32,))
    got = lab.read(dd, (16, 8), np.float64)
    err = float(np.abs(got - A @ B).max())
    print(f"probe m16n8k8 f64 tile: max |err| {err:.2e}", flush=True)
    rows.append(dict(part="probe", config="tile", err=err))
    iters = 2048
    out = lab.buffer(nbytes=lab.dev.max_compute_units * 1024 * 8)
    kr = lab.cl.Kernel(prog, "dmma_rate")
    for wg, per_sm in ((128, 8), (256, 4)):
        items = lab.dev.max_compute_units * per_sm * wg
        kr.set_args(out, np.int32(iters), np.float32(1e-3))
        ms = lab.timed(lambda kr=kr, items=items, wg=wg: [lab.launch(kr, (items,), (wg,))], 5)
        tflops = (items // 32) * iters * 8 * 2 * 16 * 8 * 8 / (ms * 1e-3) * 1e-12
        print(f"probe dmma rate, {wg}-item groups: {ms:.3f} ms, {tflops:.1f} TFLOP/s", flush=True)
        rows.append(dict(part="probe", config=f"rate wg{wg}", ms=ms, tflops=tflops))


def gemm(lab, a, rows: list) -> None:
    src = (HERE / "mma_gemm_async.cl").read_text()
    lib = lab.program(lib_source(GEMM_SOURCES_END))
    rng = np.random.default_rng(0)
    i32 = np.int32
    progs = {}
    for cfg in GEMM_CONFIGS:
        bm, bn, wm, wn, split, stages = cfg
        try:
            progs[cfg] = lab.program(src, f"-DBM={bm} -DBN={bn} -DWM={wm} -DWN={wn} -DSPLIT={split} -DSTAGES={stages}")
        except Exception as exc:  # noqa: BLE001 - report the build log, go on with the others
            print(f"build failed for {cfg}: {str(exc)[:2000]}", flush=True)
    for name, M, N, K in ASYNC_SHAPES:
        A = rng.standard_normal((M, K)).astype(np.float32)
        B = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
        ref = A[:256].astype(np.float64) @ B.astype(np.float64)
        ad, bd, cd = lab.buffer(A), lab.buffer(B), lab.buffer(nbytes=M * N * 4)
        flops = 2.0 * M * N * K
        variants = []
        for (bm, bn, wm, wn, split, stages), prog in progs.items():
            k = lab.cl.Kernel(prog, "gemm_mma_async")
            k.set_args(cd, ad, bd, i32(M), i32(N), i32(K))
            nt = 32 * (bm // wm) * (bn // wn)
            kind = "dmma" if split == 0 else f"3xtf32" if split == 3 else f"x{split}"
            variants.append((f"{kind} {bm}x{bn} w{wm}x{wn} s{stages}", k, (-(-N // bn) * nt, -(-M // bm)), (nt, 1)))
        for kname, bm, bn, nt in LIB:
            k = lab.cl.Kernel(lib, kname)
            ks = -(-K // 16) * 16
            k.set_args(cd, i32(0), i32(0), i32(0), i32(N), ad, i32(0), i32(0), i32(K), i32(1), bd, i32(0), i32(0),
                       i32(N), i32(1), i32(0), ad, i32(0), i32(0), i32(M), i32(N), i32(K), np.float32(1.0), i32(0),
                       i32(1), i32(ks), ad, i32(0), i32(0), i32(0))
            variants.append((f"lib {kname}", k, (-(-N // bn) * 16, -(-M // bm) * (nt // 16), 1), (16, nt // 16, 1)))
        for label, k, gsz, lsz in variants:
            def launch(k=k, gsz=gsz, lsz=lsz):
                return [lab.launch(k, gsz, lsz)]
            launch()
            lab.queue.finish()
            err = rel_err(lab.read(cd, (M, N))[:256], ref)
            ms = lab.timed(launch, a.runs)
            row = dict(part="gemm", shape=name, config=label, ms=ms, tflops=flops / ms * 1e-9, err=err)
            rows.append(row)
            print(f"{name:18s} {label:32s} {ms:8.4f} ms {row['tflops']:6.1f} TFLOP/s  err {err:.1e}", flush=True)


def attn(lab, a, rows: list) -> None:
    src = (HERE / "dmma_attn.cl").read_text()
    lib = lab.program(attention_source(), "-DSDGPU_NV_PTX=1 -DSDGPU_NV_SM90=1")  # the FP64 kernels too (sm_90)
    rng = np.random.default_rng(1)
    i32 = np.int32
    for name, n, s, heads, d in ATTN_SHAPES:
        q = rng.standard_normal((n * s, heads * d)).astype(np.float32)
        k, v = (rng.standard_normal((n * s, heads * d)).astype(np.float32) for _ in range(2))
        ref = reference(q[:s], k[:s], v[:s], heads, d, 256)
        qd, kd, vd = (lab.buffer(x) for x in (q, k, v))
        od = lab.buffer(nbytes=q.nbytes)
        scale = np.float32(1.0 / np.sqrt(d))
        flops = 4.0 * n * s * s * d * heads
        variants = []
        for kname, bq, nt in ATTN_LIB[d]:
            kr = lab.cl.Kernel(lib, kname)
            kr.set_args(od, i32(0), qd, i32(0), kd, i32(0), vd, i32(0), i32(s), i32(s), i32(heads), i32(d), scale,
                        i32(0))
            variants.append((f"lib {kname}", kr, ((s // bq) * heads * n * nt,), (nt,)))
        for mt, nw, bkk, od_, kv_dbl in ATTN_CONFIGS if a.attn_configs is None else a.attn_configs:
            try:
                prog = lab.program(src, f"-DMT={mt} -DNW={nw} -DBKK={bkk} -DOD={od_} -DKD={kv_dbl} -DD={d}")
            except Exception as exc:  # noqa: BLE001
                print(f"build failed for {(mt, nw, bkk, od_, kv_dbl, d)}: {str(exc)[:2000]}", flush=True)
                continue
            km = lab.cl.Kernel(prog, "attn_dmma")
            km.set_args(od, qd, kd, vd, i32(s), i32(s), i32(heads), scale)
            bq, nt = 16 * mt * nw, 32 * nw
            variants.append((f"dmma MT{mt} NW{nw} BK{bkk} OD{od_}{' KD' if kv_dbl else ''}", km, ((s // bq) * heads * n * nt,), (nt,)))
        for label, kern, gsz, lsz in variants:
            def launch(kern=kern, gsz=gsz, lsz=lsz):
                return [lab.launch(kern, gsz, lsz)]
            lab.cl.enqueue_copy(lab.queue, od, np.zeros(q.shape, np.float32))
            launch()
            lab.queue.finish()
            err = rel_err(lab.read(od, q.shape)[:256], ref)
            ms = lab.timed(launch, a.runs)
            row = dict(part="attn", shape=name, config=label, ms=ms, tflops=flops / ms * 1e-9, err=err)
            rows.append(row)
            print(f"{name:20s} {label:32s} {ms:8.4f} ms {row['tflops']:6.1f} TFLOP/s  err {err:.1e}", flush=True)


def main() -> int:
    def add(ap) -> None:
        ap.add_argument("--probe", action="store_true")
        ap.add_argument("--gemm", action="store_true")
        ap.add_argument("--attn", action="store_true")
        ap.add_argument("--attn-configs", type=lambda s: [tuple(int(x) for x in c.split(":")) for c in s.split(",")],
                        default=None, help="MT:NW:BKK:OD:KD,... instead of ATTN_CONFIGS")

    started = tensor_core_lab("dmma_lab", __doc__, add)
    if started is None:
        return 2
    a, lab = started
    rows: list = []
    try:
        for part, run in (("probe", probe), ("attn", attn), ("gemm", gemm)):
            if getattr(a, part):
                run(lab, a, rows)
    finally:
        if a.out:
            a.out.write_text(json.dumps(dict(device=lab.dev.name, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
