"""GL vs OpenCL backend of our delegate on one machine, in one command: SD1.5 UNet (b1) step and VAE decode
times, parity of each backend against the CPU interpreter, and the five slowest op types of each backend
(device profiles: OpenCL events / GL timer queries).

On the device (repo root; models refilled from ``.h200/models/*.sparse.gz``, seeded like ``.h200/probe.py``)::

    source .h200/setup.sh; python3 scripts/gl_h200_check.py --lib .h200/lib/gl.so --out $OUT

Locally, on any .tflite files (e.g. the tiny export; PoCL + llvmpipe)::

    python3 scripts/gl_h200_check.py --lib build/gl/libsdgpu_delegate.so --out /tmp/glchk \
        --model /tmp/sd-tiny/unet.tflite --model /tmp/sd-tiny/vae_decoder.tflite

Every (model, backend) runs in its own process under a timeout, so a driver crash costs one row; the parent
writes ``OUT/gl_h200.json`` and ``OUT/gl_h200.md`` after every row. Timings are wall-clock per invoke (the
delegate's invoke ends with a blocking read) with profiling on, medians over ``--runs``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def refill(src: Path, dst: Path) -> None:
    """Rebuild a model from its sparse pack: stored bytes + seeded N(0, 0.02) weights in the listed regions."""
    meta = json.loads(Path(str(src) + ".json").read_text())
    packed = gzip.open(src).read()
    rng = np.random.default_rng(0)
    out = bytearray(meta["size"])
    pos = q = 0
    for start, n, dt in meta["regions"]:
        k = start - pos
        out[pos:start] = packed[q:q + k]
        q += k
        out[start:start + n] = (rng.standard_normal(n // int(dt[1])) * 0.02).astype("<" + dt).tobytes()
        pos = start + n
    out[pos:] = packed[q:]
    dst.write_bytes(out)


def model_inputs(runner) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    inputs = {}
    for name, d in runner.get_input_details().items():
        if "timestep" in name:
            inputs[name] = np.full(d["shape"], 500.0, np.float32)
        elif d["dtype"] == np.int32:
            inputs[name] = rng.integers(0, 100, d["shape"]).astype(np.int32)
        else:
            inputs[name] = rng.standard_normal(d["shape"]).astype(d["dtype"])
    return inputs


# Variant modifiers, "<backend>:<mod>+<mod>" (e.g. gl:finish+noprof): GL debugging knobs (gl_device.h) and
# profiling off (timer queries / events add per-launch work).
MODIFIERS = {"finish": {"gl_finish_each": "1"}, "minimal": {"gl_barrier": "minimal"},
             "plain": {"gl_plain_buffers": "1"}, "noprof": {}}


def child(args: argparse.Namespace) -> None:
    """One (model, variant): time it, save its last output and the summary."""
    from ai_edge_litert.interpreter import Interpreter, load_delegate

    model, variant, work = Path(args.model_path), args.backend, Path(args.work)
    backend, _, mods = variant.partition(":")
    mods = [m for m in mods.split("+") if m]
    tag = f"{model.stem}_{variant.replace(':', '-').replace('+', '-')}"
    profile = work / f"{tag}_profile.json"
    delegates = []
    if backend != "cpu":
        opts = {"backend": backend, "log_level": "info"}
        for m in mods:
            opts.update(MODIFIERS[m])  # delegate options (the GL debugging knobs)
        if "noprof" not in mods:
            opts["profile_path"] = str(profile)
        delegates = [load_delegate(args.lib, opts)]
    t0 = time.perf_counter()
    interpreter = Interpreter(model_path=str(model), experimental_delegates=delegates or None,
                              num_threads=os.cpu_count() or 1)
    runner = interpreter.get_signature_runner()
    inputs = model_inputs(runner)
    init_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    out = runner(**inputs)
    first_ms = (time.perf_counter() - t0) * 1e3
    first_profile = json.loads(profile.read_text()) if profile.is_file() else None
    times = [first_ms] if backend == "cpu" else []  # the CPU interpreter is only the parity reference
    for _ in range(args.runs if backend != "cpu" else 0):
        t0 = time.perf_counter()
        out = runner(**inputs)
        times.append((time.perf_counter() - t0) * 1e3)
    np.save(work / f"{tag}.npy", next(iter(out.values())))
    row: dict[str, Any] = {"model": model.stem, "backend": variant, "init_ms": init_ms, "first_ms": first_ms,
                           "runs_ms": times, "median_ms": statistics.median(times)}
    if profile.is_file() and first_profile is not None:
        p = json.loads(profile.read_text())
        # The profile averages over every invocation so far; take the first (programs compiled, weights
        # packed, drivers warming up) out: steady = (n * avg_n - first) / (n - 1).
        n = p["invocations"]
        for node, first in zip(p["nodes"], first_profile["nodes"]):
            node["ms"] = (n * node["ms"] - first["ms"]) / max(1, n - 1)
        by_op: dict[str, list[float]] = {}
        for node in p["nodes"]:
            by_op.setdefault(node["op"], []).append(node["ms"])
        row.update(device=p["device"], method=p.get("method", "?"), device_sum_ms=sum(sum(v) for v in by_op.values()),
                   top_ops=sorted(([op, sum(v), len(v)] for op, v in by_op.items()), key=lambda r: -r[1])[:5],
                   top_nodes=sorted(p["nodes"], key=lambda n: -n["ms"])[:5])
    (work / f"{tag}.json").write_text(json.dumps(row))


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | backend | device | init ms | first ms | median ms (runs) | device sum ms | rel err vs CPU |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['backend']} | failed: {r['error'][:160]} | | | | | |")
            continue
        rel = r.get("rel_err")
        lines.append(f"| {r['model']} | {r['backend']} | {r.get('device', 'cpu')} ({r.get('method', '-')}) | "
                     f"{r['init_ms']:.0f} | {r['first_ms']:.1f} | {r['median_ms']:.1f} ({len(r['runs_ms'])}) | "
                     f"{r.get('device_sum_ms', float('nan')):.1f} | {'-' if rel is None else f'{rel:.2e}'} |")
    for r in rows:
        if r.get("top_ops"):
            ops = ", ".join(f"{op} {ms:.1f} ms ({n})" for op, ms, n in r["top_ops"])
            nodes = ", ".join(f"#{n['node']} {n['op']} {n['ms']:.2f} ms" for n in r["top_nodes"])
            lines.append(f"\n{r['model']} / {r['backend']}: slowest op types: {ops}; slowest nodes: {nodes}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="libsdgpu_delegate.so to test")
    ap.add_argument("--out", required=True, help="folder for gl_h200.json / gl_h200.md")
    ap.add_argument("--models", default="unet_b1,vae_decoder", help="names of .h200/models/<name>.sparse.gz")
    ap.add_argument("--model", action="append", default=[], help="a .tflite to use instead of --models")
    ap.add_argument("--backends", default="opencl,gl",
                    help="variants: backend[:mod+mod], mods: " + ", ".join(MODIFIERS))
    ap.add_argument("--keep-logs", action="store_true", help="copy the gl rows' logs to OUT")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--timeout-s", type=float, default=150.0, help="per (model, backend) process")
    ap.add_argument("--deadline-s", type=float, default=0.0, help="stop starting rows after this long (0 = none)")
    ap.add_argument("--work", default="/tmp/gl_h200_check")
    ap.add_argument("--child", nargs=2, metavar=("MODEL_PATH", "BACKEND"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        args.model_path, args.backend = args.child
        child(args)
        return 0

    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    paths = [Path(m) for m in args.model]
    if not paths:
        for name in args.models.split(","):
            dst = work / f"{name}.tflite"
            t0 = time.perf_counter()
            refill(Path(f".h200/models/{name}.sparse.gz"), dst)
            print(f"refilled {name} in {time.perf_counter() - t0:.1f} s", flush=True)
            paths.append(dst)
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for path in paths:
        for backend in ["cpu", *args.backends.split(",")]:
            tag = f"{path.stem}_{backend.replace(':', '-').replace('+', '-')}"
            timeout = args.timeout_s
            if args.deadline_s > 0:
                timeout = min(timeout, args.deadline_s - (time.perf_counter() - start))
                if timeout < 10:
                    rows.append({"model": path.stem, "backend": backend, "error": "skipped: deadline"})
                    continue
            cmd = [sys.executable, __file__, "--lib", args.lib, "--out", args.out, "--work", args.work, "--runs",
                   str(args.runs), "--child", str(path), backend]
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
                log = proc.stdout + proc.stderr
                ok = proc.returncode == 0 and (work / f"{tag}.json").is_file()
                error = "" if ok else f"exit {proc.returncode}: " + " | ".join(log.strip().splitlines()[-3:])
            except subprocess.TimeoutExpired as e:
                log = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
                ok, error = False, f"timeout after {timeout:.0f} s"
            if backend.startswith("gl") and args.keep_logs:
                (out / f"{tag}.log").write_text(log[-200_000:])
            print(f"[{time.perf_counter() - t0:6.1f} s] {tag}: " + ("ok" if ok else error), flush=True)
            for line in log.splitlines():
                if "renderer '" in line or "opencl: device" in line or "sdgpu: ERROR" in line:
                    print("   ", line[:400], flush=True)
            row = json.loads((work / f"{tag}.json").read_text()) if ok else {"model": path.stem, "backend": backend,
                                                                             "error": error}
            ref = work / f"{path.stem}_cpu.npy"
            if ok and backend != "cpu" and ref.is_file():
                y, want = np.load(work / f"{tag}.npy"), np.load(ref)
                row["rel_err"] = float(np.linalg.norm(y - want) / max(np.linalg.norm(want), 1e-30))
                row["max_abs_err"] = float(np.abs(y - want).max())
            rows.append(row)
            (out / "gl_h200.json").write_text(json.dumps(rows, indent=1))
            (out / "gl_h200.md").write_text(markdown(rows))
            print(json.dumps({k: v for k, v in row.items() if k not in ("top_nodes",)})[:700], flush=True)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
