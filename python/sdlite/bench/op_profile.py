"""Per-node timing by isolation: each node runs alone, as a one-node model, on the same backend.

Why: ``ai_edge_litert`` exposes no in-graph op profiler (benchmark_model's ``--enable_op_profiling`` hooks
a C++ profiler the Python API does not reach). Isolation measures each node's own kernel cost honestly,
with caveats the report states:
* it misses cross-node effects (cache reuse between consecutive nodes, XNNPACK fusing a node with its
  neighbours), so the sum of node times differs from the whole-model time - both are printed;
* non-constant inputs are synthetic (floats uniform in [0.5, 1.5) so RSQRT/LOG/DIV see valid values,
  integers zero), not the values the node sees inside the model;
* identical nodes (same op, options, shapes) are timed once and the result shared - SD repeats blocks,
  so a UNet's ~1,300 nodes are ~300 distinct timings;
* the per-invoke overhead (a 1-element ADD model's time) is subtracted, clamped at zero.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sdlite.backends import BackendOptions
from sdlite.bench.single_op import ModelCutter, trivial_model
from sdlite.errors import SdliteError
from sdlite.placement import Placement
from sdlite.runner import open_runner
from sdlite.tflite_info import ModelInfo

METHOD = (
    "per-node times: each node run alone as a one-node model on the same backend (ai_edge_litert exposes no "
    "in-graph per-op profiler); synthetic inputs; identical nodes timed once"
)


@dataclass(frozen=True)
class OpTiming:
    index: int
    op_name: str
    executor: str  # where the node ran inside the full model
    first_us: float
    avg_us: float
    out_bytes: int
    name: str  # first output tensor name
    times_called: int = 1  # per model invocation
    kernels: tuple[tuple[str, float], ...] = ()  # device kind: (kernel name, avg us) per kernel the node launched
    kernel_launches: tuple[tuple[str, int], ...] = ()  # device kind: (kernel name, launches per invocation)


@dataclass
class OpProfile:
    """Per-node timings. ``kind``: ``isolated`` (this module) or ``device`` (the delegate's device events,
    see :mod:`sdlite.bench.device_profile`); ``overhead_us``/``distinct`` only mean something for isolation."""

    ops: list[OpTiming] = field(default_factory=list)
    overhead_us: float = 0.0
    distinct: int = 0
    skipped: dict[int, str] = field(default_factory=dict)  # op index -> why it could not be timed
    method: str = METHOD
    kind: str = "isolated"
    device: str = ""  # device name reported by the delegate (device kind)
    runs_averaged: int = 0  # timed invocations the device averages cover (device kind)

    @property
    def total_us(self) -> float:
        return float(sum(o.avg_us for o in self.ops))


def _synthetic(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.uniform(0.5, 1.5, size=shape).astype(dt)
    return np.zeros(shape, dtype=dt)


def _time_runner(runner, num_runs: int, warmup_runs: int) -> tuple[float, float]:
    """(first, mean) of ``num_runs`` timed invokes after ``warmup_runs`` untimed ones, in microseconds."""
    for _ in range(warmup_runs):
        runner.invoke()
    samples = []
    for _ in range(num_runs):
        t0 = time.perf_counter_ns()
        runner.invoke()
        samples.append(time.perf_counter_ns() - t0)
    return samples[0] / 1e3, float(np.mean(samples)) / 1e3


def invoke_overhead_us(options: BackendOptions, num_runs: int = 200) -> float:
    runner = open_runner(Path("overhead-probe.tflite"), options, content=trivial_model())
    try:
        runner.set_inputs({n: np.ones(s.shape, s.dtype) for n, s in runner.inputs.items()})
        samples = []
        for _ in range(num_runs):
            t0 = time.perf_counter_ns()
            runner.invoke()
            samples.append(time.perf_counter_ns() - t0)
        return float(np.median(samples)) / 1e3
    finally:
        runner.close()


def profile_ops(path: Path, info: ModelInfo, placement: Placement, options: BackendOptions,
                num_runs: int, warmup_runs: int, seed: int = 0) -> OpProfile:
    """Isolated timing of every node of ``path``'s main subgraph (see module docstring for the method)."""
    rng = np.random.default_rng(seed)
    prof = OpProfile(overhead_us=invoke_overhead_us(options))
    cache: dict[tuple, tuple[float, float] | str] = {}
    executors = placement.node_executor or tuple(["?"] * len(info.ops))
    with ModelCutter(path) as cutter:
        for op in info.ops:
            try:
                single = cutter.cut(op.index)
            except SdliteError as exc:
                prof.skipped[op.index] = str(exc)
                continue
            if single.key not in cache:
                try:
                    runner = open_runner(Path(f"{path.stem}-op{op.index}.tflite"), options, content=single.content)
                except SdliteError as exc:
                    cache[single.key] = str(exc)
                else:
                    try:
                        runner.set_inputs({n: _synthetic(s.shape, s.dtype.name, rng) for n, s in runner.inputs.items()})
                        cache[single.key] = _time_runner(runner, num_runs, warmup_runs)
                    finally:
                        runner.close()
            result = cache[single.key]
            if isinstance(result, str):
                prof.skipped[op.index] = result
                continue
            first, avg = result
            out = [t for t in op.outputs if t >= 0]
            prof.ops.append(OpTiming(
                index=op.index, op_name=op.op_name, executor=executors[op.index],
                first_us=max(first - prof.overhead_us, 0.0), avg_us=max(avg - prof.overhead_us, 0.0),
                out_bytes=sum(info.tensors[t].nbytes for t in out),
                name=info.tensors[out[0]].name if out else "",
            ))
    prof.distinct = sum(1 for v in cache.values() if not isinstance(v, str))
    return prof
