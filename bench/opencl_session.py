"""What the OpenCL micro-benchmarks (bench/opencl_gemm_bench.py, bench/opencl_attn_bench.py) share: a profiled
delegate session whose per-node device times cover only the timed runs, a per-op-type summary, and the refill of a
weight skeleton (``.sparse.gz`` + ``.json`` regions) with N(0, 0.02) weights, and their common arguments."""
from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np


def timed_session(lib: str, model: bytes | str, inputs: dict[str, np.ndarray] | None, profile: Path, warmup: int,
                  runs: int, extra: dict[str, str] | None = None, threads: int = 4) -> dict[str, Any]:
    """Warm-up + timed invokes with the event profile on: device ms per node over the timed runs only."""
    from ai_edge_litert.interpreter import Interpreter, load_delegate

    delegate = load_delegate(lib, {"backend": "opencl", "profile_path": str(profile), **(extra or {})})
    kw = {"model_path": model} if isinstance(model, str) else {"model_content": model}
    t0 = time.perf_counter()
    runner = Interpreter(**kw, experimental_delegates=[delegate], num_threads=threads).get_signature_runner()
    load_s = time.perf_counter() - t0
    if inputs is None:
        rng = np.random.default_rng(1)
        inputs = {}
        for k, d in runner.get_input_details().items():
            inputs[k] = (rng.integers(0, 1000, d["shape"]).astype(d["dtype"]) if d["dtype"] == np.int32
                         else rng.standard_normal(d["shape"]).astype(np.float32))
        if "timestep" in inputs:
            inputs["timestep"] = np.array([500.0], np.float32)
    t0 = time.perf_counter()
    out = runner(**inputs)
    first_s = time.perf_counter() - t0
    for _ in range(warmup - 1):
        runner(**inputs)
    before = json.loads(profile.read_text())
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = runner(**inputs)  # ends with the blocking read of the outputs
        walls.append((time.perf_counter() - t0) * 1e3)
    after = json.loads(profile.read_text())
    n0, n1 = before["invocations"], after["invocations"]
    def window(a: float, b: float) -> float:
        return (a * n1 - b * n0) / (n1 - n0)

    nodes = []
    for a, b in zip(after["nodes"], before["nodes"]):
        old = {k["name"]: k["ms"] for k in b.get("kernels", [])}
        kernels = {k["name"]: window(k["ms"], old.get(k["name"], 0.0)) for k in a.get("kernels", [])}
        nodes.append(dict(op=a["op"], node=a["node"], ms=window(a["ms"], b["ms"]), kernels=kernels))
    return dict(device=after["device"], nodes=nodes, load_s=load_s, first_s=first_s, wall_ms=walls, inputs=inputs,
                output=next(iter(out.values())))


def by_op_type(nodes: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    acc: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for n in nodes:
        acc[n["op"]][0] += 1
        acc[n["op"]][1] += n["ms"]
    return {k: dict(nodes=int(v[0]), ms=round(v[1], 4)) for k, v in sorted(acc.items(), key=lambda kv: -kv[1][1])}


def refill(src: Path, dst: Path) -> None:
    """A skeleton (float weights cut out: .sparse.gz + .json regions) back to a model with N(0, 0.02) weights."""
    meta = json.loads(Path(str(src) + ".json").read_text())
    packed = gzip.open(src).read()
    rng = np.random.default_rng(0)
    pool = (rng.standard_normal(1 << 22) * 0.02).astype(np.float32)
    pool = np.concatenate([pool, pool])
    tmp = dst.with_name(dst.name + ".part")
    with open(tmp, "wb") as f:
        pos = q = 0
        for start, n, dt in meta["regions"]:
            k = start - pos
            f.write(packed[q:q + k])
            q += k
            left = n // int(dt[1])
            while left:
                m = min(left, 1 << 22)
                off = int(rng.integers(1 << 22))
                f.write(pool[off:off + m].astype("<" + dt).tobytes())
                left -= m
            pos = start + n
        f.write(packed[q:])
    os.replace(tmp, dst)


def add_session_args(ap: argparse.ArgumentParser, default_out: str) -> None:
    """The arguments both micro-benchmarks take: the delegate build, the output folder ($OUT when set), the kit's
    models folder and which of its models to time."""
    root = Path(__file__).resolve().parent.parent
    ap.add_argument("--lib", required=True, help="libsdgpu_delegate.so to measure")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", default_out)))
    ap.add_argument("--models-dir", type=Path, default=root / ".h200" / "models")
    ap.add_argument("--models", default="unet_b1,vae_decoder")
