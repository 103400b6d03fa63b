"""One benchmark row in its own process (bench.py runs it under a timeout, so a crash loses only this row).

``worker.py tflite --model PATH --backend opencl --name unet_b1 --row ours-opencl-fused --work WORK --out ROW.json``
    times the model with sdlite's ``bench_target`` (the code behind ``sdlite bench``): wall time of ``invoke``,
    the delegate's device profile and memory figures on GPU backends, outputs kept for parity.
``worker.py prepare --name unet_b1 --skeleton .h200/models/unet_b1.tflite.gz --work WORK --out P.json``
    refills the weights (seeded) and derives the fused / fused+Winograd variants with sdconvert's optimize.
``worker.py torch --config sd15 --source unet --shapes JSON --device cuda --out ROWS.json``
    diffusers PyTorch baseline: fp32 with TF32 off, then fp16; CUDA-event timing after warm-up, median.
``worker.py prepare-e2e --kit .h200/models --work WORK --variants plain,fused+winoauto --out P.json``
    the end-to-end folders WORK/e2e/VARIANT (sdlite generate inputs): the kit's text encoder refilled (and fused for
    the fused variants), the UNet (unet_b2) and VAE decoder of that variant from the prepare stage, the conversion's
    manifest, tokenizer and scheduler.
``worker.py pipeline --config sd15 --assets WORK/e2e/assets --device cuda --out ROWS.json``
    diffusers' StableDiffusionPipeline of the same config (random weights): a whole 20-step CFG image, fp32 with TF32
    off, then fp16; wall time per image (CUDA synchronised), median after a warm-up image.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.kit import Work, log, write_json


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
    from bench.kit import Variant, read_json
    from bench.weights import REFILL_METHOD, refill

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

    from sdconvert.configs import get_config
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


def _e2e_manifest(assets: Path, dst: Path) -> None:
    """The conversion's manifest for a folder whose model files are named as sdconvert names them: file checksums
    dropped (the weights are refilled), each model's file name the standard one."""
    doc = json.loads((assets / "manifest.json").read_text())
    for name, spec in doc.get("models", {}).items():
        spec.pop("sha256", None)
        spec["file"] = f"{name}.tflite"
    dst.write_text(json.dumps(doc, indent=1) + "\n")


def run_prepare_e2e(args: argparse.Namespace) -> dict[str, Any]:
    """WORK/e2e/VARIANT folders (see the module docstring); each step skipped when up to date."""
    import tarfile

    from bench.kit import Kit, Variant, read_json
    from bench.weights import REFILL_METHOD, refill

    from sdconvert.export.optimize import GraphOptions

    kit = Kit.load(args.kit)
    e2e = kit.doc.get("e2e")
    if not e2e:
        raise SystemExit("the kit has no end-to-end folder (prepare.sh with a --b2 conversion that has a text encoder)")
    work = Work(args.work)
    root = work.root / "e2e"
    assets = root / "assets"
    tar = kit.root / e2e["assets"]
    stamp = {"assets": tar.stat().st_size, "mtime": tar.stat().st_mtime}
    if read_json(assets / ".stamp.json") != stamp:
        shutil.rmtree(assets, ignore_errors=True)
        assets.mkdir(parents=True)
        with tarfile.open(tar) as t:
            t.extractall(assets, filter="data")
        write_json(assets / ".stamp.json", stamp)
    te_plain = root / "text_encoder-plain.tflite"
    gz = kit.root / e2e["text_encoder"]
    te_stamp = {"skeleton": gz.name, "bytes": gz.stat().st_size, "mtime": gz.stat().st_mtime, "seed": args.seed,
                "refill": REFILL_METHOD}
    if read_json(Path(str(te_plain) + ".json")) != te_stamp or not te_plain.is_file():
        refill(gz, te_plain, seed=args.seed)
        write_json(Path(str(te_plain) + ".json"), te_stamp)
    done: dict[str, Any] = {}
    for name in [v for v in args.variants.split(",") if v]:
        v = Variant(name)
        te = te_plain
        if v.fused:  # the text encoder's fusions (attention, GELU, LayerNorm); Winograd has nothing to do there
            te = root / "text_encoder-fused.tflite"
            if read_json(Path(str(te) + ".json")) != te_stamp or not te.is_file():
                _optimize(te_plain, te, GraphOptions(fuse=True, device_profile=args.winograd_profile))
                write_json(Path(str(te) + ".json"), te_stamp)
        folder = root / v.model_name
        folder.mkdir(parents=True, exist_ok=True)
        files = {"text_encoder": te, "unet": work.model(e2e["unet"], v), "vae_decoder": work.model(e2e["vae_decoder"], v)}
        missing = [str(f) for f in files.values() if not f.is_file()]
        if missing:
            done[name] = {"status": "error", "error": f"missing {missing} (run the prepare stage for "
                                                      f"{e2e['unet']},{e2e['vae_decoder']} with variant {v.model_name})"}
            continue
        for model, src in files.items():
            link = folder / f"{model}.tflite"
            link.unlink(missing_ok=True)
            link.symlink_to(src)
        for sub in ("tokenizer", "scheduler"):
            link = folder / sub
            if link.is_symlink() or link.exists():
                link.unlink() if link.is_symlink() else shutil.rmtree(link)
            link.symlink_to(assets / sub)
        _e2e_manifest(assets, folder / "manifest.json")
        done[name] = {"status": "ok", "folder": str(folder)}
        log(f"prepare-e2e: {folder}")
    return {"variants": done}


def run_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    """Rows ``diffusers-fp32`` / ``diffusers-fp16``: StableDiffusionPipeline, 20 steps, CFG, PNDM, whole images."""
    import torch
    from diffusers import PNDMScheduler, StableDiffusionPipeline
    from transformers import CLIPTokenizer

    from sdconvert.configs import build_random_modules, get_config

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    cfg = get_config(args.config)
    t0 = time.monotonic()
    with torch.device(args.device):
        modules = build_random_modules(cfg, seed=args.seed)
    assets = Path(args.assets)
    manifest = json.loads((assets / "manifest.json").read_text())
    # model_max_length: built from the vocab files alone it is "unbounded" (1e30), which the pipeline pads to
    tok = CLIPTokenizer(str(assets / manifest["tokenizer"]["vocab"]), str(assets / manifest["tokenizer"]["merges"]),
                        model_max_length=77)
    pipe = StableDiffusionPipeline(vae=modules["vae"], text_encoder=modules["text_encoder"], tokenizer=tok,
                                   unet=modules["unet"], scheduler=PNDMScheduler.from_config(cfg.scheduler),
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    log(f"pipeline: built {args.config} on {args.device} in {time.monotonic() - t0:.1f} s")
    height, width = manifest.get("height", 512), manifest.get("width", 512)

    def image() -> float:
        gen = torch.Generator(device=args.device).manual_seed(args.seed)
        t = time.perf_counter()
        with torch.inference_mode():
            pipe(args.prompt, num_inference_steps=args.steps, guidance_scale=7.5, height=height, width=width,
                 generator=gen, output_type="np")
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t

    rows: dict[str, Any] = {}
    for dtype_name in args.dtypes.split(","):
        try:
            pipe.to(dtype={"fp32": torch.float32, "fp16": torch.float16}[dtype_name])
            first = image()
            times = [image() for _ in range(args.runs)]
        except Exception as exc:  # noqa: BLE001 - record and go on (fp16 on CPU, out of memory)
            rows[f"diffusers-{dtype_name}"] = {"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            continue
        rows[f"diffusers-{dtype_name}"] = {
            "status": "ok", "dtype": dtype_name, "first_image_s": first, "image_s": float(np.median(times)),
            "images_s": times, "steps": args.steps, "height": height, "width": width,
            "settings": {"tf32": False, "attention": "diffusers default (SDPA)", "scheduler": "PNDM",
                         "guidance_scale": 7.5, "timing": "wall, torch.cuda.synchronize per image"}}
        log(f"pipeline {dtype_name}: first image {first:.2f} s, then median {np.median(times):.3f} s")
    return {"rows": rows, "env": _torch_env(args.device)}


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
    e = sub.add_parser("prepare-e2e")
    e.add_argument("--kit", type=Path, required=True, help="the kit's models folder (.h200/models)")
    e.add_argument("--work", type=Path, required=True)
    e.add_argument("--variants", default="plain,fused+winoauto")
    e.add_argument("--winograd-profile", default="h200")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", type=Path, required=True)
    q = sub.add_parser("pipeline")
    q.add_argument("--config", required=True)
    q.add_argument("--assets", type=Path, required=True, help="WORK/e2e/assets (manifest, tokenizer)")
    q.add_argument("--device", default="cuda")
    q.add_argument("--dtypes", default="fp32,fp16")
    q.add_argument("--prompt", default="a photo of an astronaut riding a horse on mars")
    q.add_argument("--steps", type=int, default=20)
    q.add_argument("--runs", type=int, default=3)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    result = {"tflite": run_tflite, "torch": run_torch, "prepare": run_prepare, "prepare-e2e": run_prepare_e2e,
              "pipeline": run_pipeline}[args.kind](args)
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
