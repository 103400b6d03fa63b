"""SdAttention, reductions and zero-copy views of our OpenCL backend on a GPU machine, in one call.

Phases (``--phases``, in order; each bounded by ``--deadline-s`` from the start):

``attn``    single-op models at the SD1.5 attention shapes (UNet b1 levels 64/32/16/8 self + cross, the VAE's
            one 512-wide head): SdAttention flash and partial_softmax with the tiling the op picks ("auto"),
            the any-head-dim kernels forced through the attention_tiling option (dyn) (``--legacy`` adds the fallback
            one-row kernels), and the unfused path our backend runs for plain graphs (BATCH_MATMUL -> SOFTMAX ->
            BATCH_MATMUL over [N*H, S, D]). Device ms from the event profile (warm-up excluded), effective
            TFLOP/s (4*Sq*Sk*D per head: the Q.K and P.V products), and each output's relative L2 distance to
            the first row of its shape (all variants compute the same thing) and to a float64 numpy reference.
            ``--tilings`` / ``--only-shapes`` / ``--variants`` pick the rows (candidate tilings side by side).
``models``  SD1.5 models refilled from ``--models-dir`` skeletons (N(0, 0.02) weights), plain and fused
            (``sdconvert.export.optimize.optimize`` with GraphOptions(fuse=True), prepared in a background
            process while ``attn`` runs): wall ms per invoke, device ms per op type; for the fused variants
            the wall time once more without the event profile and (``--parity``) the output against the CPU
            interpreter (our cpu delegate runs the Sd* nodes there).

Writes OUT/attn_bench.json after every row and prints one line per row.

    python3 -m bench.opencl_attn_bench --lib build/k2/libsdgpu_delegate.so --out /tmp/ab --quick   # PoCL
    source .h200/setup.sh; python3 -m bench.opencl_attn_bench --lib .h200/lib/k2.so --out $OUT     # device
    source .h200/setup.sh; python3 -m bench.opencl_attn_bench --lib .h200/lib/attn.so --out $OUT --phases attn \
        --only-shapes unet64,unet32 --tilings d40,d80    # the block-tiled kernels vs the op's pick
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "native"))

from bench.opencl_session import add_session_args, by_op_type, refill, timed_session  # noqa: E402  (after the sys.path set-up)
WORK = Path("/tmp/opencl-attn-bench")


@dataclass(frozen=True)
class Shape:
    name: str
    n: int
    sq: int
    sk: int
    heads: int
    head_dim: int
    per_step: int  # how many of these one UNet step (or VAE decode) runs

    @property
    def flops(self) -> float:
        return 4.0 * self.n * self.heads * self.sq * self.sk * self.head_dim


SHAPES = [
    Shape("unet64 self", 1, 4096, 4096, 8, 40, 5),
    Shape("unet64 cross", 1, 4096, 77, 8, 40, 5),
    Shape("unet32 self", 1, 1024, 1024, 8, 80, 5),
    Shape("unet32 cross", 1, 1024, 77, 8, 80, 5),
    Shape("unet16 self", 1, 256, 256, 8, 160, 5),
    Shape("unet16 cross", 1, 256, 77, 8, 160, 5),
    Shape("unet8 self", 1, 64, 64, 8, 160, 1),
    Shape("unet8 cross", 1, 64, 77, 8, 160, 1),
    Shape("vae mid", 1, 4096, 4096, 1, 512, 1),
]
QUICK_SHAPES = [
    Shape("q40 self", 1, 200, 200, 2, 40, 1),
    Shape("q80 cross", 1, 70, 77, 2, 80, 1),
    Shape("q160 self", 1, 45, 45, 2, 160, 1),
    Shape("q512", 1, 40, 40, 1, 512, 1),
]


def tiling_fits(tiling: str, head_dim: int) -> bool:
    """Whether an attention_tiling value is meant for a head dim: a fixed-D tiling names it ("d40", "r40"); any
    other name ("dyn", "legacy") runs every head dim. (The op ignores a forced tiling of another head dim and runs
    its own pick, a row that would only repeat "auto".)"""
    digits = re.search(r"\d+", tiling)
    return digits is None or int(digits.group()) == head_dim


def rows_for(s: Shape, legacy: bool, tilings: list[str] | None = None,
             variants: tuple[str, ...] = ("flash", "partial_softmax", "unfused")) -> list[tuple[str, str | None]]:
    """(variant, attention_tiling) rows of one shape: the op's own tiling, then the forced ones (default: the
    any-head-dim kernels "dyn", with ``legacy`` also the fallback kernels), then "unfused" = the
    BATCH_MATMUL/SOFTMAX graph. (Tilings tried on an H200 and dropped are listed above the instantiation lines in
    ops/attention/gpu.kern.)"""
    if tilings is None:
        tilings = ["dyn"] + (["legacy"] if legacy and s.head_dim <= 256 else [])
    forced = [t for t in tilings if tiling_fits(t, s.head_dim) and not (t == "legacy" and s.head_dim > 256)]
    rows = [(v, t) for t in [None, *forced] for v in ("flash", "partial_softmax") if v in variants]
    return rows + ([("unfused", None)] if "unfused" in variants else [])


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def save(args: argparse.Namespace, results: dict[str, Any]) -> None:
    tmp = args.out / "attn_bench.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, default=str))
    os.replace(tmp, args.out / "attn_bench.json")


# --- models -------------------------------------------------------------------------------------------------------

def fused_model_variant(s: Shape, variant: str) -> bytes:
    from sdconvert.ops import attention as A
    from tflite_models import attention_model

    attrs = A.AttentionAttrs(heads=s.heads, head_dim=s.head_dim, scale=s.head_dim**-0.5, causal=False,
                             variant=variant)
    return attention_model(s.n, s.sq, s.sk, s.heads, s.head_dim, A.SPEC.encode(attrs))


def unfused_model(s: Shape) -> bytes:
    """q/k/v [N*H, S, D] -> BATCH_MATMUL(q, k, adj_y) -> SOFTMAX(beta = scale) -> BATCH_MATMUL(p, v)."""
    from ai_edge_litert import schema_py_generated as S
    from tflite_builtin import BuiltinGraph

    b = s.n * s.heads
    g = BuiltinGraph()
    q = g.input("q", [b, s.sq, s.head_dim])
    k = g.input("k", [b, s.sk, s.head_dim])
    v = g.input("v", [b, s.sk, s.head_dim])

    def bmm(x: int, y: int, shape: list[int], adj_y: bool, name: str) -> int:
        o = S.BatchMatMulOptionsT()
        o.adjX, o.adjY = False, adj_y
        return g.op(S.BuiltinOperator.BATCH_MATMUL, [x, y], g.tensor(name, shape),
                    S.BuiltinOptions.BatchMatMulOptions, o)

    scores = bmm(q, k, [b, s.sq, s.sk], True, "scores")
    p = g.softmax(scores, [b, s.sq, s.sk], s.head_dim**-0.5, "p")
    g.output(bmm(p, v, [b, s.sq, s.head_dim], False, "o"))
    return g.build()


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, s: Shape) -> np.ndarray:
    """softmax(scale * Q K^T) V in float64, one (batch, head) at a time (the S x S scores of one head only)."""
    out = np.empty(q.shape, np.float64)
    for n in range(s.n):
        for h in range(s.heads):
            cols = slice(h * s.head_dim, (h + 1) * s.head_dim)
            sc = (q[n, :, cols].astype(np.float64) @ k[n, :, cols].astype(np.float64).T) * s.head_dim**-0.5
            p = np.exp(sc - sc.max(axis=1, keepdims=True))
            out[n, :, cols] = (p / p.sum(axis=1, keepdims=True)) @ v[n, :, cols].astype(np.float64)
    return out


def to_heads(x: np.ndarray, s: Shape) -> np.ndarray:
    """[N, S, H*D] -> [N*H, S, D] (the unfused graph's layout)."""
    n, seq, _ = x.shape
    heads = x.reshape(n, seq, s.heads, s.head_dim).transpose(0, 2, 1, 3)
    return np.ascontiguousarray(heads.reshape(-1, seq, s.head_dim))


def selected_shapes(args: argparse.Namespace) -> list[Shape]:
    shapes = QUICK_SHAPES if args.quick else SHAPES
    if args.only_shapes:
        shapes = [s for s in shapes if any(p in s.name for p in args.only_shapes)]
    return shapes


# --- timing -------------------------------------------------------------------------------------------------------

# --- phases -------------------------------------------------------------------------------------------------------

def phase_attn(args: argparse.Namespace, results: dict[str, Any], deadline: float) -> None:
    rows = results.setdefault("attn", [])
    rng = np.random.default_rng(0)
    for s in selected_shapes(args):
        q, k, v = (rng.standard_normal((s.n, seq, s.heads * s.head_dim)).astype(np.float32)
                   for seq in (s.sq, s.sk, s.sk))
        first: np.ndarray | None = None
        want = reference(q, k, v, s)
        for variant, tiling in rows_for(s, args.legacy, args.tilings, args.variants):
            if time.time() > deadline:
                log("attn: deadline reached")
                return
            if variant == "unfused":
                model, inputs = unfused_model(s), {"q": to_heads(q, s), "k": to_heads(k, s), "v": to_heads(v, s)}
            else:
                model, inputs = fused_model_variant(s, variant), {"q": q, "k": k, "v": v}
            tag = f"{variant}/{tiling or 'auto'}"
            try:
                r = timed_session(args.lib, model, inputs, args.out / "attn_profile.json", 2, args.attn_runs,
                                  {"attention_tiling": tiling} if tiling else None)
            except Exception as e:  # noqa: BLE001 - record and go on
                rows.append(dict(shape=s.name, row=tag, error=str(e)[:300]))
                log(f"{s.name:<14} {tag:<24} ERROR {e}")
                continue
            out = r["output"]
            if variant == "unfused":  # [N*H, Sq, D] -> [N, Sq, H*D]
                out = out.reshape(s.n, s.heads, s.sq, s.head_dim).transpose(0, 2, 1, 3).reshape(s.n, s.sq, -1)
            if first is None:
                first = out
            rel = float(np.linalg.norm(out - first) / max(np.linalg.norm(first), 1e-30))
            rel_ref = float(np.linalg.norm(out - want) / np.linalg.norm(want))
            ms = sum(n["ms"] for n in r["nodes"])
            row = dict(shape=s.name, dims=[s.n, s.sq, s.sk, s.heads, s.head_dim], per_step=s.per_step, row=tag,
                       device_ms=ms, by_op=by_op_type(r["nodes"]), tflops=s.flops / (ms * 1e-3) / 1e12 if ms else 0.0,
                       wall_ms=float(np.median(r["wall_ms"])), rel_to_first=rel, rel_to_ref=rel_ref)
            rows.append(row)
            log(f"{s.name:<14} {tag:<24} {ms:8.3f} ms {row['tflops']:6.2f} TFLOP/s wall {row['wall_ms']:7.2f} ms "
                f"rel {rel:.1e} ref {rel_ref:.1e}")
            save(args, results)
    # per-step totals of the best fused row and of the unfused row per shape
    best: dict[str, float] = defaultdict(float)
    for s in selected_shapes(args):
        cand = [r for r in rows if r.get("shape") == s.name and "device_ms" in r]
        for label, pick in (("fused_auto_flash", lambda r: r["row"] == "flash/auto"),
                            ("fused_auto_partial", lambda r: r["row"] == "partial_softmax/auto"),
                            ("fused_best", lambda r: r["row"] != "unfused/auto"),
                            ("unfused", lambda r: r["row"] == "unfused/auto")):
            ms = [r["device_ms"] for r in cand if pick(r)]
            if ms:
                best[label] += min(ms) * s.per_step
    results["attn_per_step_ms"] = dict(best)
    log("attention per UNet step + VAE (device ms): " + ", ".join(f"{k} {v:.2f}" for k, v in best.items()))
    save(args, results)


def phase_prepare(args: argparse.Namespace) -> None:
    """(Background process) refill each model, then derive its fused variant, into WORK (plain ones first)."""
    from sdconvert.export.optimize import GraphOptions, optimize

    WORK.mkdir(parents=True, exist_ok=True)
    names = [m for m in args.models.split(",") if m]
    for name in names:
        plain = WORK / f"{name}.tflite"
        if not plain.exists():
            t0 = time.time()
            refill(args.models_dir / f"{name}.sparse.gz", plain)
            log(f"prepare {name}: refilled in {time.time() - t0:.1f} s")
    for name in names:
        plain, fused = WORK / f"{name}.tflite", WORK / f"{name}_fused.tflite"
        if fused.exists():
            continue
        t0 = time.time()
        tmp = WORK / f"{name}_fused.part.tflite"
        try:
            report = optimize(plain, GraphOptions(fuse=True), lambda m: None, dst=tmp)
        except Exception as e:  # noqa: BLE001 - the other models may still work
            log(f"prepare {name}: fuse FAILED: {e}")
            continue
        os.replace(tmp, fused)
        log(f"prepare {name}: fused in {time.time() - t0:.1f} s {(report.get('fusion') or {}).get('counts')}")


def run_model(args: argparse.Namespace, name: str, tag: str, path: Path, deadline: float) -> dict[str, Any]:
    from ai_edge_litert.interpreter import Interpreter, load_delegate

    key = f"{name}_{tag}"
    r = timed_session(args.lib, str(path), None, args.out / f"{key}_profile.json", 2, args.runs, threads=16)
    ops = by_op_type(r["nodes"])
    total = sum(v["ms"] for v in ops.values())
    row = dict(device=r["device"], device_ms=total, wall_ms=r["wall_ms"], wall_median_ms=float(np.median(r["wall_ms"])),
               load_s=r["load_s"], first_s=r["first_s"], by_op=ops)
    log(f"{key}: device {total:.1f} ms, wall median {row['wall_median_ms']:.1f} ms "
        f"(load {r['load_s']:.1f} s, first {r['first_s']:.1f} s)")
    for op, v in list(ops.items())[:12]:
        log(f"    {op:<26} {v['nodes']:4d} nodes {v['ms']:9.3f} ms")
    if tag == "fused" and time.time() < deadline - 30:  # wall time without the event profile's overhead
        delegate = load_delegate(args.lib, {"backend": "opencl"})
        plain = Interpreter(model_path=str(path), experimental_delegates=[delegate],
                            num_threads=16).get_signature_runner()
        plain(**r["inputs"])
        walls = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            plain(**r["inputs"])
            walls.append((time.perf_counter() - t0) * 1e3)
        row["wall_noprof_ms"] = walls
        log(f"    without profiling: wall median {np.median(walls):.1f} ms")
    if tag == "fused" and args.parity and time.time() < deadline - 45:
        cpu = load_delegate(args.lib, {"backend": "cpu", "num_threads": "16"})
        ref = Interpreter(model_path=str(path), experimental_delegates=[cpu], num_threads=16).get_signature_runner()
        t0 = time.perf_counter()
        want = next(iter(ref(**r["inputs"]).values()))
        row["cpu_s"] = time.perf_counter() - t0
        got = r["output"]
        row["rel_l2"] = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        row["rel_max"] = float(np.abs(got - want).max() / np.abs(want).max())
        log(f"    parity vs CPU interpreter (+ cpu delegate): rel L2 {row['rel_l2']:.2e}, "
            f"max {row['rel_max']:.2e} (cpu {row['cpu_s']:.1f} s)")
    return row


def phase_models(args: argparse.Namespace, results: dict[str, Any], deadline: float,
                 prep: subprocess.Popen | None) -> None:
    """Runs each (model, variant) as soon as the background worker has written it; fused variants first."""
    out = results.setdefault("models", {})
    names = [m for m in args.models.split(",") if m]
    todo = [(n, "fused") for n in names] + [(n, "plain") for n in names]
    while todo and time.time() < deadline:
        path_of = {(n, t): WORK / (f"{n}_fused.tflite" if t == "fused" else f"{n}.tflite") for n, t in todo}
        ready = [(n, t) for n, t in todo if path_of[(n, t)].exists()]
        if not ready:
            if prep is None or prep.poll() is not None:
                break  # nothing more will appear
            time.sleep(1.0)
            continue
        name, tag = min(ready, key=lambda nt: (nt[1] != "fused", names.index(nt[0])))
        todo.remove((name, tag))
        try:
            out[f"{name}_{tag}"] = run_model(args, name, tag, path_of[(name, tag)], deadline)
        except Exception as e:  # noqa: BLE001 - record and go on
            out[f"{name}_{tag}"] = dict(error=str(e)[:500])
            log(f"{name}_{tag}: ERROR {e}")
        save(args, results)
    for name, tag in todo:
        log(f"models: {name} {tag} not run (deadline, or the worker did not produce it)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_session_args(ap, "attn-bench-out")
    ap.add_argument("--phases", default="attn,models", help="attn,models (prepare: the background worker)")
    ap.add_argument("--runs", type=int, default=5, help="timed invokes per model")
    ap.add_argument("--attn-runs", type=int, default=10, help="timed invokes per attention row")
    ap.add_argument("--parity", action="store_true", help="fused models: output vs the CPU interpreter")
    ap.add_argument("--legacy", action="store_true", help="also time the fallback (one query row) kernels")
    ap.add_argument("--tilings", type=lambda v: [t for t in v.split(",") if t], default=None,
                    help="attention_tiling values to time besides the op's own pick (default: dyn[,legacy]); "
                         "a fixed-D name (d40, r40) only for shapes of that head dim")
    ap.add_argument("--only-shapes", type=lambda v: [t for t in v.split(",") if t], default=None,
                    help="comma list of substrings of the shape names to keep (e.g. 'unet64,unet32 self')")
    ap.add_argument("--variants", type=lambda v: tuple(t for t in v.split(",") if t),
                    default=("flash", "partial_softmax", "unfused"), help="attn rows: flash,partial_softmax,unfused")
    ap.add_argument("--deadline-s", type=float, default=280.0)
    ap.add_argument("--attn-share", type=float, default=0.35, help="part of the deadline for the attn phase")
    ap.add_argument("--quick", action="store_true", help="small attention shapes, no models (PoCL)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    phases = args.phases.split(",")
    if phases == ["prepare"]:
        phase_prepare(args)
        return 0
    start = time.time()
    results: dict[str, Any] = {"argv": sys.argv, "lib": args.lib}
    prep = None
    if "models" in phases and not args.quick:
        with open(args.out / "prepare.log", "w") as plog:
            prep = subprocess.Popen([sys.executable, __file__, "--phases", "prepare", "--models", args.models,
                                     "--models-dir", str(args.models_dir), "--lib", args.lib, "--out", str(args.out)],
                                    stdout=plog, stderr=subprocess.STDOUT)
    if "attn" in phases:
        share = args.attn_share if "models" in phases and not args.quick else 1.0
        phase_attn(args, results, start + args.deadline_s * share)
    if "models" in phases and not args.quick:
        phase_models(args, results, start + args.deadline_s, prep)
    if prep is not None and prep.poll() is None:
        prep.kill()
    results["seconds"] = round(time.time() - start, 1)
    save(args, results)
    log(f"done in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
