"""Benchmark a .tflite file or every model of a converted folder on a backend; compare several.

A target spec is ``PATH`` or ``PATH@BACKEND`` (``@`` because backends never contain it and paths rarely
do). A folder expands to its manifest's models. Timing is of ``invoke`` only (inputs are set once, as in
benchmark_model): synthetic inputs - floats standard-normal, token ids a fixed CLIP prompt, other ints 0.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sdlite.backends import BACKENDS, BackendOptions
from sdlite.bench.op_profile import OpProfile, profile_ops
from sdlite.bench.stats import TimingStats
from sdlite.errors import SdliteError
from sdlite.manifest import MANIFEST_NAME, load_manifest
from sdlite.runner import ModelRunner, open_runner

# "a photo of a cat" in CLIP ids, EOS-padded: realistic ids for text encoders (any int input of length 77).
_PROMPT_IDS = [49406, 320, 1125, 539, 320, 2368, 49407]


@dataclass(frozen=True)
class BenchTarget:
    label: str  # what the tables call it, e.g. "tiny/unet.tflite"
    path: Path
    options: BackendOptions
    group: str  # rows with the same group are compared with each other


@dataclass
class BenchResult:
    label: str
    path: Path
    backend: str
    threads: int
    group: str
    stats: TimingStats
    load_s: float
    first_run_us: float
    warmup_avg_us: float
    placement: str
    num_ops: int
    op_histogram: dict[str, int]
    weight_bytes: int
    peak_activation_bytes: int
    profile: OpProfile | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("stats", "profile", "path")}
        d["path"] = str(self.path)
        d["timings_us"] = self.stats.to_dict()
        if self.profile is not None:
            d["op_profile"] = {
                "method": self.profile.method,
                "overhead_us": self.profile.overhead_us,
                "total_us": self.profile.total_us,
                "distinct_nodes_timed": self.profile.distinct,
                "skipped": {str(k): v for k, v in self.profile.skipped.items()},
                "ops": [dataclasses.asdict(o) for o in self.profile.ops],
            }
        return d


def synthetic_inputs(runner: ModelRunner, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in runner.inputs.items():
        if spec.dtype.kind == "f":
            feeds[name] = rng.standard_normal(spec.shape).astype(spec.dtype)
        elif spec.shape and spec.shape[-1] == 77:
            row = np.full(77, _PROMPT_IDS[-1], dtype=spec.dtype)
            row[: len(_PROMPT_IDS)] = _PROMPT_IDS
            feeds[name] = np.broadcast_to(row, spec.shape).copy()
        else:
            feeds[name] = np.zeros(spec.shape, dtype=spec.dtype)
    return feeds


def parse_spec(spec: str, default: BackendOptions) -> tuple[Path, BackendOptions]:
    path_text, sep, backend = spec.rpartition("@")
    if not sep or not backend or backend not in BACKENDS:
        return Path(spec), default
    return Path(path_text), dataclasses.replace(default, name=backend)


def expand(spec: str, default: BackendOptions, models: tuple[str, ...] | None = None) -> list[BenchTarget]:
    """Targets of one spec: the file itself, or each (selected) model of a converted folder."""
    path, options = parse_spec(spec, default)
    if path.is_dir():
        manifest = load_manifest(path, require=())
        names = [n for n in manifest.models if manifest.models[n].path.is_file()]
        if models:
            unknown = [m for m in models if m not in manifest.models]
            if unknown:
                raise SdliteError(
                    f"{path / MANIFEST_NAME} lists no model {unknown[0]!r} (has {sorted(manifest.models)})"
                )
            names = [n for n in names if n in models]
        if not names:
            raise SdliteError(f"no model files found in {path}")
        return [BenchTarget(f"{path.name}/{manifest.models[n].path.name}", manifest.models[n].path, options, n)
                for n in names]
    if not path.is_file():
        raise SdliteError(f"model not found: {path} (give a .tflite file or a converted model folder)")
    return [BenchTarget(path.name, path, options, "model")]


def bench_target(target: BenchTarget, num_runs: int, warmup_runs: int, op_profiling: bool = False,
                 seed: int = 0) -> BenchResult:
    if num_runs < 1:
        raise SdliteError(f"--num_runs must be >= 1, got {num_runs}")
    if warmup_runs < 0:
        raise SdliteError(f"--warmup_runs must be >= 0, got {warmup_runs}")
    runner = open_runner(target.path, target.options)
    try:
        runner.set_inputs(synthetic_inputs(runner, seed))
        t0 = time.perf_counter()
        runner.invoke()
        first_us = (time.perf_counter() - t0) * 1e6
        warm = []
        for _ in range(warmup_runs):
            t0 = time.perf_counter()
            runner.invoke()
            warm.append(time.perf_counter() - t0)
        samples = []
        for _ in range(num_runs):
            t0 = time.perf_counter()
            runner.invoke()
            samples.append(time.perf_counter() - t0)
        info = runner.info
        result = BenchResult(
            label=target.label, path=target.path, backend=target.options.name, threads=target.options.threads,
            group=target.group, stats=TimingStats.from_seconds(samples), load_s=runner.load_s,
            first_run_us=first_us, warmup_avg_us=float(np.mean(warm)) * 1e6 if warm else 0.0,
            placement=runner.placement.summary(info), num_ops=len(info.ops), op_histogram=info.op_histogram,
            weight_bytes=info.weight_bytes, peak_activation_bytes=info.peak_activation_bytes(),
        )
        placement = runner.placement
    finally:
        runner.close()
    if op_profiling:
        result.profile = profile_ops(target.path, info, placement, target.options, num_runs, warmup_runs, seed)
    return result
