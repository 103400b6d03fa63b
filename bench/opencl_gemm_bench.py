"""GEMM / conv / Winograd kernels of our OpenCL backend at SD1.5 shapes, plus whole-model steps.

Two phases, each bounded by --deadline-s (the device allows ~5 minutes per call):

``models``  each model of --models (SD1.5 skeletons in --models-dir, weights refilled N(0, 0.02)): device
            time per op type from the delegate's event profile, wall time per invoke, and for the UNet the
            parity vs the LiteRT CPU interpreter; again with weights_fp16=1 when --fp16.
``micro``   single-op models (FULLY_CONNECTED, CONV_2D, BATCH_MATMUL, SdConv2DWinograd) at the shapes that
            dominate the SD1.5 UNet / VAE decoder, with the cost model's plan ("auto"), gemm_autotune's pick
            ("tuned") and each tile config forced through the gemm_tiles delegate option: device ms (event profile, warm-up
            excluded) and TFLOP/s (direct-convolution FLOPs for Winograd too, so the numbers compare).

Writes OUT/gemm_bench.json and prints one line per row. On this machine (PoCL) use --quick.

    python3 -m bench.opencl_gemm_bench --lib build/k1/libsdgpu_delegate.so --out /tmp/bench --quick
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "native"))

from bench.opencl_session import add_session_args, by_op_type, refill, timed_session  # noqa: E402  (after the sys.path set-up)

CONFIGS = ("auto", "64x64", "128x64", "128x128")


@dataclass(frozen=True)
class Case:
    kind: str        # fc | conv (3x3) | conv1 (1x1) | bmm | wino
    name: str
    dims: tuple      # fc: (M, N, K); conv/conv1/wino: (H, W, Ci, Co) (tile for wino in `tile`); bmm: (B, M, N, K)
    tile: int = 0

    @property
    def flops(self) -> float:
        if self.kind == "fc":
            m, n, k = self.dims
            return 2.0 * m * n * k
        if self.kind == "bmm":
            b, m, n, k = self.dims
            return 2.0 * b * m * n * k
        h, w, ci, co = self.dims
        return 2.0 * h * w * co * (1 if self.kind == "conv1" else 9) * ci


# Shapes that carry the SD1.5 UNet (b1, 64x64 latent) and VAE decoder (512x512) FLOPs.
CASES = [
    Case("conv", "unet L0 3x3 320", (64, 64, 320, 320)),
    Case("conv", "unet L1 3x3 640", (32, 32, 640, 640)),
    Case("conv", "unet L2 3x3 1280", (16, 16, 1280, 1280)),
    Case("conv", "unet L3 3x3 1280", (8, 8, 1280, 1280)),
    Case("fc", "unet L0 ff in", (4096, 2560, 320)),
    Case("fc", "unet L0 proj", (4096, 320, 320)),
    Case("fc", "unet L0 ff out", (4096, 320, 1280)),
    Case("fc", "unet L0 qkv", (4096, 960, 320)),             # q, k, v projections as one GEMM
    Case("fc", "unet L1 proj", (1024, 640, 640)),
    Case("fc", "unet L1 ff out", (1024, 640, 2560)),
    Case("fc", "unet L2 proj", (256, 1280, 1280)),
    Case("fc", "unet L1 qkv", (1024, 1920, 640)),
    Case("fc", "unet L2 qkv", (256, 3840, 1280)),
    Case("fc", "unet L0 cross k", (77, 320, 768)),            # cross-attention K (or V) of the text states
    Case("fc", "unet L0 cross kv", (77, 640, 768)),           # K and V as one GEMM
    Case("fc", "unet L2 cross k", (77, 1280, 768)),
    Case("fc", "unet L2 cross kv", (77, 2560, 768)),
    Case("conv1", "unet L0 1x1 320", (64, 64, 320, 320)),     # proj_in / proj_out
    Case("conv1", "unet L1 1x1 640", (32, 32, 640, 640)),
    Case("fc", "unet L2 ff in", (256, 10240, 1280)),
    Case("bmm", "unet L0 q.kT", (8, 4096, 4096, 40)),
    Case("bmm", "unet L0 p.v", (8, 4096, 40, 4096)),
    Case("conv", "vae 128 3x3 512", (128, 128, 512, 512)),
    Case("conv", "vae 256 3x3 256", (256, 256, 256, 256)),
    Case("conv", "vae 512 3x3 128", (512, 512, 128, 128)),
    Case("wino", "unet L0 F4", (64, 64, 320, 320), 4),
    Case("wino", "unet L0 F6", (64, 64, 320, 320), 6),
    Case("wino", "unet L0 F2", (64, 64, 320, 320), 2),
    Case("wino", "unet L1 F4", (32, 32, 640, 640), 4),
    Case("wino", "unet L2 F4", (16, 16, 1280, 1280), 4),
    Case("wino", "unet L2 F2", (16, 16, 1280, 1280), 2),
    Case("wino", "unet L3 F2", (8, 8, 1280, 1280), 2),
    Case("wino", "unet L2up F4", (16, 16, 2560, 1280), 4),     # up-block conv1 (skip concatenated)
    Case("wino", "unet L2up F2", (16, 16, 2560, 1280), 2),
    Case("conv", "unet L2up 3x3", (16, 16, 2560, 1280)),
    Case("wino", "unet L3up F2", (8, 8, 2560, 1280), 2),
    Case("conv", "unet L3up 3x3", (8, 8, 2560, 1280)),
    Case("fc", "unet time emb", (1, 1280, 1280)),
    Case("wino", "vae 128 F4", (128, 128, 512, 512), 4),
    Case("wino", "vae 512 F4", (512, 512, 128, 128), 4),
]
QUICK_CASES = [
    Case("conv", "small 3x3", (16, 16, 32, 48)),
    Case("fc", "small fc", (256, 96, 80)),
    Case("bmm", "small bmm", (2, 64, 72, 40)),
    Case("wino", "small F4", (16, 16, 32, 48), 4),
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build(case: Case, rng: np.random.Generator) -> tuple[bytes, dict[str, np.ndarray]]:
    from sdconvert.ops.conv2d_winograd import SPEC, Conv2DWinogradAttrs
    from tflite_gemm_models import batch_matmul_model, conv2d_model, fully_connected_model, winograd_model

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    if case.kind == "fc":
        m, n, k = case.dims
        return fully_connected_model((1, m, k), rand(n, k), rand(n)), {"x": rand(1, m, k)}
    if case.kind == "bmm":
        b, m, n, k = case.dims
        return batch_matmul_model((b, m, k), (b, k, n), (b, m, n), False, False), {"a": rand(b, m, k), "b": rand(b, k, n)}
    h, w, ci, co = case.dims
    x = {"x": rand(1, h, w, ci)}
    if case.kind in ("conv", "conv1"):
        k = 3 if case.kind == "conv" else 1
        return conv2d_model((1, h, w, ci), rand(co, k, k, ci), rand(co)), x
    attrs = SPEC.encode(Conv2DWinogradAttrs(tile=case.tile, padding="SAME", activation="none"))
    return winograd_model((1, h, w, ci), rand(co, 3, 3, ci), rand(co), attrs), x


def phase_micro(args: argparse.Namespace, results: dict[str, Any], deadline: float) -> None:
    rng = np.random.default_rng(0)
    cases = QUICK_CASES if args.quick else CASES
    if args.micro_cases:
        cases = [c for c in cases if any(k in c.name for k in args.micro_cases.split(","))]
    rows = results.setdefault("micro", [])
    configs = args.micro_configs.split(",")
    for case in cases:
        if time.time() > deadline:
            log("micro: deadline reached")
            return
        model, inputs = build(case, rng)
        runs = configs + (["auto+fp16w"] if args.fp16 and case.kind != "bmm" else [])
        for config in runs:
            tiles = config.split("+")[0]
            extra = {"gemm_autotune": "1" if tiles == "tuned" else "0"}
            if tiles not in ("auto", "tuned"):
                extra["gemm_tiles"] = tiles
            if config.endswith("+fp16w"):
                extra["weights_fp16"] = "1"
            try:
                r = timed_session(args.lib, model, inputs, args.out / "micro_profile.json", 2, args.micro_runs,
                                  extra)
            except Exception as e:  # noqa: BLE001 - record and go on
                rows.append(dict(case=case.name, kind=case.kind, config=config, error=str(e)[:300]))
                log(f"{case.name} {config}: ERROR {e}")
                continue
            ms = sum(n["ms"] for n in r["nodes"])
            kernels: dict[str, float] = {}
            for n in r["nodes"]:
                for k, v in n["kernels"].items():
                    kernels[k] = kernels.get(k, 0.0) + v
            row = dict(case=case.name, kind=case.kind, dims=case.dims, tile=case.tile, config=config, device_ms=ms,
                       tflops=case.flops / (ms * 1e-3) / 1e12, wall_ms=float(np.median(r["wall_ms"])), kernels=kernels)
            rows.append(row)
            split = ", ".join(f"{k} {v:.3f}" for k, v in kernels.items()) if len(kernels) > 1 else ""
            log(f"{case.name:<22} {config:<11} {ms:8.3f} ms {row['tflops']:7.2f} TFLOP/s  (wall {row['wall_ms']:.2f} ms)"
                + (f"  [{split}]" if split else ""))
        json.dump(results, open(args.out / "gemm_bench.json", "w"), indent=1, default=str)


def variant_path(args: argparse.Namespace, name: str, plain: Path, variant: str, deadline: float) -> Path | None:
    """plain, fused, fused+wino<N|auto>, each optionally +nomerge (``--no-merge-fc``): derived with ``sdconvert
    optimize`` (device profile h200) on first use."""
    if variant == "plain":
        return plain
    path = Path(f"/tmp/{name}_{variant.replace('+', '_')}.tflite")
    if path.exists():
        return path
    if time.time() > deadline - 90:
        log(f"{name} {variant}: no time left to derive it")
        return None
    from sdconvert.export.optimize import GraphOptions, optimize

    parts = variant.split("+")
    fuse = parts[0] == "fused"
    wino = next((p[4:] for p in parts if p.startswith("wino")), "off")  # 2 | 4 | 6 | auto
    t0 = time.time()
    optimize(plain, GraphOptions(fuse=fuse, winograd=wino, device_profile="h200", merge_fc="nomerge" not in parts),
             say=lambda _: None, dst=path)
    log(f"{name} {variant}: derived in {time.time() - t0:.1f} s")
    return path


def phase_models(args: argparse.Namespace, results: dict[str, Any], deadline: float) -> None:
    from ai_edge_litert.interpreter import Interpreter

    out = results.setdefault("models", {})
    for name in [m for m in args.models.split(",") if m]:
        if time.time() > deadline:
            log("models: deadline reached")
            return
        plain = Path(f"/tmp/{name}.tflite")
        if not plain.exists():
            t0 = time.time()
            refill(args.models_dir / f"{name}.sparse.gz", plain)
            log(f"{name}: refilled in {time.time() - t0:.1f} s")
        reference = None  # CPU interpreter output of the plain model (same seeded inputs for every variant)
        variants = args.variants.split(",") if name.startswith("unet") else ["plain"]
        for variant in variants:
            # +noepi: the same model file with the delegate option fuse_epilogues=0 (residual ADDs launched apart)
            noepi = variant.endswith("+noepi")
            path = variant_path(args, name, plain, variant.removesuffix("+noepi"), deadline)
            if path is None:
                continue
            base = {"fuse_epilogues": "0"} if noepi else {}
            tags = [("fp32", base)] + ([("fp16w", {**base, "weights_fp16": "1"})] if args.fp16 else [])
            for tag, extra in tags:
                if time.time() > deadline:
                    return
                r = timed_session(args.lib, str(path), None, args.out / f"{name}_{variant.replace('+', '_')}_{tag}_profile.json", 2,
                                  args.runs, extra)
                by_op = by_op_type(r["nodes"])
                total = sum(v["ms"] for v in by_op.values())
                row = dict(device=r["device"], device_ms=total, wall_ms=r["wall_ms"], first_s=r["first_s"], by_op=by_op)
                log(f"{name} {variant} {tag}: device {total:.1f} ms, wall median {np.median(r['wall_ms']):.1f} ms, "
                    f"first {r['first_s']:.1f} s")
                for op, v in list(row["by_op"].items())[:12]:
                    log(f"    {op:<24} {v['nodes']:4d} nodes {v['ms']:8.2f} ms")
                if name.startswith("unet") and args.parity and time.time() < deadline - 40:
                    if reference is None:
                        runner = Interpreter(model_path=str(plain), num_threads=16).get_signature_runner()
                        reference = next(iter(runner(**r["inputs"]).values()))
                    got = r["output"]
                    row["rel_l2"] = float(np.linalg.norm(got - reference) / np.linalg.norm(reference))
                    row["rel_max"] = float(np.abs(got - reference).max() / np.abs(reference).max())
                    log(f"    parity vs CPU (plain model): rel L2 {row['rel_l2']:.2e}, max {row['rel_max']:.2e}")
                out[f"{name} {variant} {tag}"] = row
                json.dump(results, open(args.out / "gemm_bench.json", "w"), indent=1, default=str)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_session_args(ap, "gemm-bench-out")
    ap.add_argument("--phases", default="models,micro")
    ap.add_argument("--variants", default="plain",
                    help="UNet variants: plain,fused,fused+wino4,fused+winoauto; +nomerge (no FC merge in the "
                         "conversion) and/or a final +noepi (delegate option fuse_epilogues=0) on any of them")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--micro-runs", type=int, default=10)
    ap.add_argument("--micro-cases", default="", help="comma-separated substrings of case names (default: all)")
    ap.add_argument("--micro-configs", default=",".join(CONFIGS),
                    help="auto (the cost model's plan), tuned (gemm_autotune's pick) and/or BMxBN[nTHREADS][/splits]")
    ap.add_argument("--fp16", action="store_true", help="models again with weights_fp16=1")
    ap.add_argument("--parity", action="store_true", help="UNet output vs the LiteRT CPU interpreter")
    ap.add_argument("--deadline-s", type=float, default=270.0)
    ap.add_argument("--model-share", type=float, default=0.6, help="part of the deadline for the models phase")
    ap.add_argument("--quick", action="store_true", help="tiny shapes, no models (PoCL)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    results: dict[str, Any] = {"argv": sys.argv, "lib": args.lib}
    phases = args.phases.split(",")
    if args.quick:
        phases = [p for p in phases if p != "models"]
    for phase in phases:
        share = args.model_share if phase == "models" and "micro" in phases else 1.0
        deadline = start + args.deadline_s * share if phase == "models" else start + args.deadline_s
        {"models": phase_models, "micro": phase_micro}[phase](args, results, deadline)
    json.dump(results, open(args.out / "gemm_bench.json", "w"), indent=1, default=str)
    log(f"done in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
