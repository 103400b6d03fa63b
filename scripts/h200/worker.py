"""One benchmark row in its own process (bench.py runs it under a timeout, so a crash loses only this row).

``worker.py tflite --model PATH --backend opencl --name unet_b1 --row ours-opencl-fused --work WORK --out ROW.json``
    times the model with sdlite's ``bench_target`` (the code behind ``sdlite bench``): wall time of ``invoke``,
    the delegate's device profile and memory figures on GPU backends, outputs kept for parity.
``worker.py prepare --name unet_b1 --skeleton .h200/models/unet_b1.tflite.gz --work WORK --out P.json``
    refills the weights (seeded) and derives the fused / fused+Winograd variants with sdconvert's optimize.
``worker.py torch --config sd15 --source unet --shapes JSON --device cuda --out ROWS.json``
    diffusers PyTorch baseline: fp32 with TF32 off, then fp16; CUDA-event timing after warm-up, median.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from kit import Work, log, write_json


def _top_ops(profile: Any, n: int = 5) -> list[dict[str, Any]]:
    total = profile.total_us or 1.0
    ranked = sorted(profile.ops, key=lambda o: -o.avg_us)[:n]
    return [{"node": o.index, "op": o.op_name, "avg_ms": o.avg_us / 1e3, "pct": 100.0 * o.avg_us / total,
             "name": o.name} for o in ranked]


def _by_type(profile: Any) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for o in profile.ops:
        e = out.setdefault(o.op_name, {"count": 0, "ms": 0.0})
        e["count"] += 1
        e["ms"] += o.avg_us / 1e3
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["ms"]))


def _by_kernel(profile: Any) -> dict[str, dict[str, float]]:
    """Device ms per kernel name (multi-launch nodes split: Winograd transforms vs GEMM, attention passes)."""
    out: dict[str, dict[str, float]] = {}
    for o in profile.ops:
        for name, us in o.kernels:
            e = out.setdefault(name, {"nodes": 0, "ms": 0.0})
            e["nodes"] += 1
            e["ms"] += us / 1e3
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["ms"]))


def run_tflite(args: argparse.Namespace) -> dict[str, Any]:
    from sdlite.backends import BackendOptions
    from sdlite.bench.report import model_report
    from sdlite.bench.run import BenchTarget, bench_target

    work = Work(args.work)
    options = BackendOptions(name=args.backend, num_threads=args.threads)
    target = BenchTarget(label=f"{args.name}/{args.model.name}", path=args.model, options=options, group=args.name)
    profile = args.profile in ("inline", "separate")
    log(f"{args.row}: {args.model} on {args.backend} ({args.warmup} warm-up + {args.runs} timed runs"
        f"{', device profile ' + args.profile if profile else ''})")
    # Device profiles only: timing ~2,000 SD1.5 nodes one by one (sdlite's fallback) would eat the budget.
    from sdlite import native

    with native.extra_options(**native.parse_options_text(args.delegate_options)):  # a "+tc" variant's options
        result = bench_target(target, args.runs, args.warmup, op_profiling=profile and args.profile == "inline",
                              keep_outputs=True, isolated_fallback=False)
        if args.profile == "separate":  # clean timings above; profile from a second, shorter session
            profiled = bench_target(target, max(2, args.runs // 3), 1, op_profiling=True, isolated_fallback=False)
            result.profile, result.profile_error = profiled.profile, profiled.profile_error
    row = result.to_dict()
    row.pop("op_profile", None)
    outputs = work.outputs(args.name, args.row)
    outputs.parent.mkdir(parents=True, exist_ok=True)
    np.savez(outputs, **(result.outputs or {}))
    row["outputs_file"] = str(outputs)
    report = work.report(args.name, args.row)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(model_report(result, top=10) + "\n")
    row["report_file"] = str(report)
    if result.profile is not None:
        p = result.profile
        row["profile"] = {"kind": p.kind, "device": p.device, "method": p.method, "runs_averaged": p.runs_averaged,
                          "mode": args.profile, "total_ms": p.total_us / 1e3, "nodes_timed": len(p.ops),
                          "nodes_not_timed": len(p.skipped), "top": _top_ops(p), "by_type": _by_type(p),
                          "by_kernel": _by_kernel(p)}
        write_json(work.profile(args.name, args.row), {
            **row["profile"], "ops": [dataclasses.asdict(o) for o in p.ops],
            "skipped": {str(k): v for k, v in p.skipped.items()}})
    s = result.stats
    d = result.device
    dispatch = f"; host dispatch {d.dispatch_us / 1e3:.2f} ms" if d is not None and d.dispatch_us >= 0 else ""
    log(f"{args.row}: median {s.median / 1e3:.2f} ms, avg {s.avg / 1e3:.2f} ms, min {s.min / 1e3:.2f} ms "
        f"(load {result.load_s:.1f} s, first run {result.first_run_us / 1e3:.1f} ms); {result.placement}{dispatch}")
    return row


def _optimize(src: Path, dst: Path, opts: Any) -> dict[str, Any]:
    """``sdconvert.export.optimize.optimize`` from ``src`` to ``dst`` (copy + in place on older versions)."""
    import inspect
    import shutil

    from sdconvert.export.optimize import optimize

    say = lambda msg: log(f"  {msg}")  # noqa: E731
    tmp = dst.with_name(dst.name + ".part")
    if "dst" in inspect.signature(optimize).parameters:
        out = optimize(src, opts, say, dst=tmp)
    else:
        shutil.copyfile(src, tmp)
        out = optimize(tmp, opts, say)
    tmp.replace(dst)
    return out


def run_prepare(args: argparse.Namespace) -> dict[str, Any]:
    """Refill the plain model from its skeleton, then derive the variants (each step skipped when up to date)."""
    from kit import Variant, read_json
    from weights import REFILL_METHOD, refill

    from sdconvert.export.optimize import GraphOptions

    work = Work(args.work)
    gz = args.skeleton
    st = gz.stat()
    stamp = {"skeleton": gz.name, "bytes": st.st_size, "mtime": st.st_mtime, "seed": args.seed,
             "refill": REFILL_METHOD}
    done: dict[str, Any] = {}
    plain = work.model(args.name, Variant("plain"))
    meta = read_json(Path(str(plain) + ".json"), {})
    if not plain.is_file() or meta.get("stamp") != stamp:
        t0 = time.monotonic()
        n = refill(gz, plain, seed=args.seed)
        meta = {"stamp": stamp, "variant": "plain", "seconds": round(time.monotonic() - t0, 1), "bytes": n}
        write_json(Path(str(plain) + ".json"), meta)
        log(f"prepare {args.name}: refilled {plain} ({n / 2**20:.0f} MiB, {meta['seconds']} s)")
    done["plain"] = meta
    wanted = list(dict.fromkeys(Variant(Variant(v).model_name) for v in args.variants.split(",") if v))  # files
    if any(v.winograd != "off" for v in wanted) and Variant("fused") not in wanted:
        wanted.insert(0, Variant("fused"))  # Winograd variants are made from the fused model
    for v in sorted({v for v in wanted if v.fused}, key=lambda v: v.winograd != "off"):
        dst = work.model(args.name, v)
        made_from = {**stamp, "winograd_profile": args.winograd_profile} if v.name != "litert" else stamp
        meta = read_json(Path(str(dst) + ".json"), {})
        if dst.is_file() and meta.get("stamp") == made_from:
            done[v.name] = meta
            continue
        t0 = time.monotonic()
        if v.name == "litert":
            out = _optimize(plain, dst, GraphOptions(fuse=True, target="litert"))
        elif v.winograd == "off":
            out = _optimize(plain, dst, GraphOptions(fuse=True, device_profile=args.winograd_profile))
        else:
            out = _optimize(work.model(args.name, Variant("fused")), dst,
                            GraphOptions(winograd=v.winograd, device_profile=args.winograd_profile))
        meta = {"stamp": made_from, "variant": v.name, "seconds": round(time.monotonic() - t0, 1)}
        if "fusion" in out:
            meta["fusion"] = {k: out["fusion"][k] for k in ("ops_before", "ops_after", "counts") if k in out["fusion"]}
        if "winograd" in out:
            meta["winograd"] = {"mode": out["winograd"].get("mode"), "profile": out["winograd"].get("profile"),
                                "summary": out["winograd"].get("summary")}
        write_json(Path(str(dst) + ".json"), meta)
        log(f"prepare {args.name}: {v.name} in {meta['seconds']} s")
        done[v.name] = meta
    return {"variants": done}


def _torch_env(device: str) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": device}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cudnn"] = torch.backends.cudnn.version()
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["threads"] = torch.get_num_threads()
    return env


def _time_torch(fn, device: str, runs: int, warmup: int) -> list[float]:
    """Milliseconds of ``runs`` calls after ``warmup``; CUDA events on GPU, perf_counter on CPU."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        for _ in range(runs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(float(start.elapsed_time(end)))
    else:
        for _ in range(runs):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def run_torch(args: argparse.Namespace) -> dict[str, Any]:
    """Rows ``torch-fp32`` / ``torch-fp16`` for every kit model of one source module (unet or vae_decoder)."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel

    from sdconvert.export.configs import get_config
    from sdconvert.export.wrappers import UNet, VaeDecoder

    # fp32 means fp32: no TF32 in matmuls or convolutions (PyTorch's default allows it for cuDNN convs).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    cfg = get_config(args.config)
    shapes: dict[str, dict[str, list[int]]] = json.loads(args.shapes)
    device = args.device
    t0 = time.monotonic()
    torch.manual_seed(args.seed)
    with torch.device(device):  # initialise the random weights on the device itself (fast for 860M params)
        module = (UNet(UNet2DConditionModel(**cfg.unet)) if args.source == "unet"
                  else VaeDecoder(AutoencoderKL(**cfg.vae)))
    module.eval()
    log(f"torch {args.source}: built {args.config} on {device} in {time.monotonic() - t0:.1f} s")
    settings = {"matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,  # read back, not assumed
                "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "cudnn_benchmark": args.cudnn_benchmark, "attention": "diffusers default (SDPA)",
                "timing": "CUDA events" if device.startswith("cuda") else "perf_counter"}
    rows: dict[str, Any] = {}
    for dtype_name in args.dtypes.split(","):
        dtype = {"fp32": torch.float32, "fp16": torch.float16}[dtype_name]
        try:
            module.to(dtype)
        except Exception as exc:  # noqa: BLE001 - record and go on
            for name in shapes:
                rows[f"{name}|torch-{dtype_name}"] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            continue
        for name, spec in shapes.items():
            key = f"{name}|torch-{dtype_name}"
            gen = torch.Generator(device="cpu").manual_seed(args.seed)
            feeds = {k: (torch.full(v, 981.0) if k == "timestep" else torch.randn(v, generator=gen))
                     .to(device=device, dtype=dtype) for k, v in spec.items()}
            try:
                with torch.inference_mode():
                    times = _time_torch(lambda: module(**feeds), device, args.runs, args.warmup)
            except Exception as exc:  # noqa: BLE001 - e.g. fp16 kernels missing on CPU
                rows[key] = {"status": "error", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
                log(f"{key}: {rows[key]['error']}")
                continue
            rows[key] = {"status": "ok", "dtype": dtype_name, "shapes": spec, "settings": settings,
                         "median_ms": float(np.median(times)), "mean_ms": float(np.mean(times)),
                         "min_ms": float(np.min(times)), "max_ms": float(np.max(times)), "runs": len(times),
                         "warmup": args.warmup, "times_ms": times}
            log(f"{key}: median {rows[key]['median_ms']:.2f} ms over {len(times)} runs")
    if device.startswith("cuda"):
        rows["_peak_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return {"rows": rows, "env": _torch_env(device)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="kind", required=True)
    t = sub.add_parser("tflite")
    t.add_argument("--model", type=Path, required=True)
    t.add_argument("--backend", required=True)
    t.add_argument("--name", required=True)
    t.add_argument("--row", required=True)
    t.add_argument("--work", type=Path, required=True)
    t.add_argument("--runs", type=int, default=10)
    t.add_argument("--warmup", type=int, default=2)
    t.add_argument("--threads", type=int, default=None)
    t.add_argument("--profile", choices=("inline", "separate", "off"), default="inline")
    t.add_argument("--delegate-options", default="", help="key:value;... for our delegate (a '+tc' variant)")
    t.add_argument("--out", type=Path, required=True)
    r = sub.add_parser("prepare")
    r.add_argument("--name", required=True)
    r.add_argument("--skeleton", type=Path, required=True)
    r.add_argument("--variants", default="plain,fused,fused+wino4")
    r.add_argument("--winograd-profile", default="h200")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--work", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("torch")
    p.add_argument("--config", required=True)
    p.add_argument("--source", choices=("unet", "vae_decoder"), required=True)
    p.add_argument("--shapes", required=True, help='{"unet_b1": {"sample": [1,4,64,64], ...}, ...}')
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtypes", default="fp32,fp16")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    result = {"tflite": run_tflite, "torch": run_torch, "prepare": run_prepare}[args.kind](args)
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
