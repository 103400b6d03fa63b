"""cuBLAS / cuDNN fp32 (TF32 off) at the shapes of scripts/opencl_gemm_bench.py: the headroom of our OpenCL kernels.

Times ``torch.matmul`` of an [M, K] by a [K, N] float32 matrix (the FULLY_CONNECTED cases; 1x1 convs are the same
GEMM with M = H*W) and ``conv2d`` of the 3x3 cases (channels-last, padding 1, cuDNN's own algorithm choice, which
may be Winograd or FFT) with CUDA events, median of --runs after warm-up; prints one line per case plus a JSON file.
Run it in the same device call as ``opencl_gemm_bench.py --phases micro`` on the same cases, so the two columns
compare (BENCHMARKS.md).

    python3 scripts/h200/cublas_gemm_ref.py --cases "ff in,ff out,proj" --out $OUT/cublas.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def gemm_dims(case) -> tuple[int, int, int] | None:
    """(M, N, K) of a FULLY_CONNECTED or 1x1-conv case of opencl_gemm_bench, else None."""
    if case.kind == "fc":
        return case.dims
    if case.kind == "conv1":
        h, w, ci, co = case.dims
        return h * w, co, ci
    return None


def main(argv: list[str] | None = None) -> int:
    import torch

    from opencl_gemm_bench import CASES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="", help="comma-separated substrings of case names (default: all GEMMs)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.benchmark = True
    keys = [k for k in args.cases.split(",") if k]
    rows = []
    for case in CASES:
        if keys and not any(k in case.name for k in keys):
            continue
        dims = gemm_dims(case)
        if dims is not None:
            m, n, k = dims
            a = torch.randn(m, k, device="cuda") * 0.05
            b = torch.randn(k, n, device="cuda") * 0.05
            fn, what = (lambda: torch.matmul(a, b)), f"{m} x {n} x {k} cuBLAS"
        elif case.kind == "conv":
            h, w, ci, co = case.dims
            x = (torch.randn(1, ci, h, w, device="cuda") * 0.05).to(memory_format=torch.channels_last)
            wt = (torch.randn(co, ci, 3, 3, device="cuda") * 0.05).to(memory_format=torch.channels_last)
            fn, what = (lambda: torch.nn.functional.conv2d(x, wt, padding=1)), f"{h}x{w} {ci}->{co} 3x3 cuDNN"
        else:
            continue
        for _ in range(3):
            fn()
        times = []
        for _ in range(args.runs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        ms = sorted(times)[len(times) // 2]
        tflops = case.flops / (ms * 1e-3) / 1e12  # direct-convolution FLOPs for convs, as opencl_gemm_bench
        rows.append(dict(case=case.name, kind=case.kind, dims=case.dims, ms=ms, tflops=tflops))
        print(f"{case.name:<22} {what:<32} fp32 {ms:8.3f} ms {tflops:7.2f} TFLOP/s", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows),
                                       indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
