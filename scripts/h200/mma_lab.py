"""3xTF32 tensor-core GEMM lab (mma_gemm.cl, inline PTX mma.sync; NVIDIA OpenCL only) next to the library's tiled
fp32 GEMMs (gemm_tiled.kern) on SD1.5's FULLY_CONNECTED shapes, same data: device ms (median of --runs), TFLOP/s
(2 M N K), and the max relative error against a float64 reference of the first 256 rows. A feasibility
measurement for a tensor-core path; the delegate does not use these kernels.

    python3 scripts/h200/mma_lab.py --out $OUT/mma.json     # H200 (after source .h200/setup.sh)
    python3 scripts/h200/mma_lab.py --async --out $OUT/mma_async.json   # cp.async pipeline (mma_gemm_async.cl)
                                                                        # next to the best mma_gemm.cl config
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cl_lab import GEMM_SOURCES_END, lib_source, rel_err, tensor_core_lab  # noqa: E402

# (name, M, N, K): UNet b1 FCs (64x64 level: 4096 tokens x 320; 32x32: 1024 x 640; 16x16: 256 x 1280)
SHAPES = [("ff out 64x64", 4096, 320, 1280), ("geglu proj 64x64", 4096, 2560, 320), ("qkv 64x64", 4096, 960, 320),
          ("attn out 64x64", 4096, 320, 320), ("ff out 32x32", 1024, 640, 2560), ("geglu proj 16x16", 256, 10240, 1280)]
ASYNC_SHAPES = SHAPES + [("qkv 32x32", 1024, 1920, 640), ("qkv 16x16", 256, 3840, 1280)]
# (BM, BN, WM, WN, SPLIT, BK, PRESPLIT, TRUNC): see mma_gemm.cl
CONFIGS = [(128, 64, 64, 32, 3, 16, 0, 0), (128, 128, 64, 32, 3, 16, 0, 0), (128, 64, 64, 32, 1, 16, 0, 0),
           (128, 64, 64, 32, 3, 16, 0, 1), (64, 64, 32, 32, 3, 16, 0, 1), (128, 128, 64, 32, 3, 16, 0, 1),
           (128, 64, 64, 32, 3, 16, 1, 1), (128, 128, 64, 32, 3, 16, 1, 1), (128, 64, 64, 32, 1, 16, 0, 1),
           (128, 64, 64, 32, 3, 32, 0, 1)]
BEST_SYNC = (128, 64, 64, 32, 3, 16, 0, 1)  # session 14's best mma_gemm.cl config
# (BM, BN, WM, WN, SPLIT, STAGES): see mma_gemm_async.cl (BK 16; local memory STAGES x (BM x 20 + 16 x (BN + 8))
# floats, at most 48 KB)
ASYNC_CONFIGS = [(128, 128, 64, 32, 3, 2), (128, 128, 64, 64, 3, 2), (128, 64, 64, 32, 3, 3), (128, 64, 64, 32, 3, 2),
                 (128, 64, 32, 32, 3, 3), (64, 128, 32, 64, 3, 3), (64, 64, 32, 32, 3, 4), (128, 128, 64, 32, 1, 2)]
LIB = [("gemm_t64x64n128", 64, 64, 128), ("gemm_t128x64", 128, 64, 256), ("gemm_t64x128n128", 64, 128, 128),
       ("gemm_t32x64n128", 32, 64, 128)]


def main() -> int:
    started = tensor_core_lab("mma_lab", __doc__, lambda ap: ap.add_argument(
        "--async", dest="use_async", action="store_true", help="the cp.async kernel's configs (mma_gemm_async.cl)"))
    if started is None:
        return 2
    a, lab = started
    src = (Path(__file__).parent / "mma_gemm.cl").read_text()
    src_async = (Path(__file__).parent / "mma_gemm_async.cl").read_text()
    shapes, configs = (ASYNC_SHAPES, [BEST_SYNC]) if a.use_async else (SHAPES, CONFIGS)
    lib = lab.program(lib_source(GEMM_SOURCES_END))  # the GEMM files only: NVIDIA builds the whole library slowly
    rng = np.random.default_rng(0)
    i32 = np.int32
    rows = []
    for name, M, N, K in shapes:
        A = rng.standard_normal((M, K)).astype(np.float32)
        B = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
        ref = A[:256].astype(np.float64) @ B.astype(np.float64)
        ad, bd, cd = lab.buffer(A), lab.buffer(B), lab.buffer(nbytes=M * N * 4)
        flops = 2.0 * M * N * K
        variants = []
        for bm, bn, wm, wn, split, bk, pre, trunc in configs:
            prog = lab.program(src, f"-DBM={bm} -DBN={bn} -DWM={wm} -DWN={wn} -DSPLIT={split} -DBK={bk} "
                                    f"-DPRESPLIT={pre} -DTRUNC={trunc}")
            k = lab.cl.Kernel(prog, "gemm_mma")
            k.set_args(cd, ad, bd, i32(M), i32(N), i32(K))
            nt = 32 * (bm // wm) * (bn // wn)
            variants.append((f"mma {bm}x{bn} w{wm}x{wn} x{split} k{bk}{' pre' if pre else ''}{' trunc' if trunc else ''}", k, (-(-N // bn) * nt, -(-M // bm)), (nt, 1)))
        for bm, bn, wm, wn, split, stages in ASYNC_CONFIGS if a.use_async else []:
            prog = lab.program(src_async, f"-DBM={bm} -DBN={bn} -DWM={wm} -DWN={wn} -DSPLIT={split} -DSTAGES={stages}")
            k = lab.cl.Kernel(prog, "gemm_mma_async")
            k.set_args(cd, ad, bd, i32(M), i32(N), i32(K))
            nt = 32 * (bm // wm) * (bn // wn)
            variants.append((f"async {bm}x{bn} w{wm}x{wn} x{split} s{stages}", k, (-(-N // bn) * nt, -(-M // bm)),
                             (nt, 1)))
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
            got = lab.read(cd, (M, N))[:256]
            err = rel_err(got, ref)
            ms = lab.timed(launch, a.runs)
            row = dict(shape=name, config=label, ms=ms, tflops=flops / ms * 1e-9, err=err)
            rows.append(row)
            print(f"{name:18s} {label:32s} {ms:8.4f} ms {row['tflops']:6.1f} TFLOP/s  err {err:.1e}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(dict(device=lab.dev.name, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
