"""Benchmark a .tflite file or every model of a converted folder on a backend; compare several.

A target spec is ``PATH`` or ``PATH@BACKEND`` (``@`` because backends never contain it and paths rarely
do). A folder expands to its manifest's models. Timing is of ``invoke`` only (inputs are set once, as in
benchmark_model): synthetic inputs - floats standard-normal, token ids a fixed CLIP prompt, other ints 0.

Per-node profiles: on the GPU backends (``opencl``, ``gl``) the delegate's own device timings of the same
runs (:mod:`sdlite.bench.device_profile`); elsewhere each node timed alone (:mod:`sdlite.bench.op_profile`).
On the GPU backends the result also carries the delegate's memory figures (:class:`DeviceFigures`).

Run counts follow benchmark_model (:mod:`sdlite.bench.loop`): the first inference opens the warm-up phase, which
lasts ``warmup_runs`` runs and ``warmup_min_secs``; the timed phase ``num_runs`` runs and ``min_secs``; each phase
stops starting runs after ``max_secs``. "Init" is the wall time of loading the model (delegates, interpreter,
tensor allocation), and the memory footprint is benchmark_model's (:mod:`sdlite.bench.memory`).
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sdlite.backends import BACKENDS, DELEGATE_NAME, BackendOptions
from sdlite.bench.device_profile import DEVICE_BACKENDS, ProfileSnapshot, device_op_profile
from sdlite.bench.loop import RunLoop, TimingRules
from sdlite.bench.memory import PeakMonitor, RssStatus, footprint_kb, rss_status
from sdlite.bench.op_profile import OpProfile, profile_ops
from sdlite.bench.state import state_text
from sdlite.bench.stats import TimingStats
from sdlite.errors import SdliteError
from sdlite.manifest import MANIFEST_NAME, load_manifest
from sdlite.placement import Placement
from sdlite.runner import ModelRunner, open_runner
from sdlite.tflite_info import ModelInfo

# "a photo of a cat" in CLIP ids, EOS-padded: realistic ids for text encoders (any int input of length 77).
_PROMPT_IDS = [49406, 320, 1125, 539, 320, 2368, 49407]


@dataclass(frozen=True)
class BenchTarget:
    label: str  # what the tables call it, e.g. "tiny/unet.tflite"
    path: Path
    options: BackendOptions
    group: str  # rows with the same group are compared with each other


@dataclass(frozen=True)
class DeviceFigures:
    """What our GPU delegate holds for one loaded model (backends ``opencl`` / ``gl``).

    ``arena_bytes`` is the delegate's planned intermediate arena (stats ``max_arena_bytes``: every tensor
    living only inside a partition plus kernel scratch, with reuse). ``weight_bytes`` is the delegate's own
    count of uploaded constants when its stats have one (``device_weight_bytes``); otherwise it is computed
    from the model - the bytes of the distinct constant tensors that delegated nodes read - and
    ``weight_source`` says so (device copies can differ: e.g. filters a kernel re-lays out at load time).
    ``dispatch_us`` is the host time the last partition invoke spent submitting its work (uploads and launches,
    before waiting; stats ``dispatch_us_last``; -1 when the delegate does not report it): close to the invoke's
    wall time, the GPU waits on the host rather than the other way round.
    ``setup_*_us`` is host time of the delegate's lazy set-up, summed so far (stats ``setup_weights_host_us``,
    ``setup_weights_upload_us``, ``setup_tuning_us``; -1 when not reported): packing / transforming constant weights
    on the host (Winograd's U, the LayerNorm folds), uploading them, and timing GEMM tile candidates. Most of it
    falls in the first inference, so it says where "First inference" went.
    """

    partitions: int  # delegate kernels (-1: unknown)
    delegated_nodes: int
    cpu_nodes: int  # model nodes left to the CPU (XNNPACK / builtin kernels)
    arena_bytes: int
    weight_bytes: int
    weight_source: str
    dispatch_us: float = -1.0
    setup_weights_host_us: float = -1.0
    setup_weights_upload_us: float = -1.0
    setup_tuning_us: float = -1.0


def delegated_constant_bytes(info: ModelInfo, placement: Placement) -> int:
    """Bytes of the distinct constant tensors read by nodes our delegate runs."""
    seen: set[int] = set()
    for op, executor in zip(info.ops, placement.node_executor):
        if executor == DELEGATE_NAME:
            seen.update(t for t in op.inputs if t >= 0 and info.tensors[t].constant)
    return sum(info.tensors[t].nbytes for t in seen)


def device_figures(runner: ModelRunner) -> DeviceFigures | None:
    """Memory/placement figures of our delegate in ``runner`` (None when it has none)."""
    from sdlite import native

    delegates = getattr(runner, "_delegates", None) or []  # InterpreterRunner keeps them alive there
    if not delegates:
        return None
    stats = native.stats(delegates[0])
    info, placement = runner.info, runner.placement
    delegated = sum(1 for ex in placement.node_executor if ex == DELEGATE_NAME)
    if "device_weight_bytes" in stats:
        weights, source = int(stats["device_weight_bytes"]), "delegate stats device_weight_bytes"
    else:
        weights = delegated_constant_bytes(info, placement)
        source = "computed from the model: constant tensors read by delegated nodes"
    partitions = int(stats.get("partitions", -1))
    if partitions < 0:
        partitions = placement.partitions.get(DELEGATE_NAME, -1)
    return DeviceFigures(
        partitions=partitions, delegated_nodes=delegated, cpu_nodes=len(info.ops) - delegated,
        arena_bytes=int(stats.get("max_arena_bytes", 0)), weight_bytes=weights, weight_source=source,
        dispatch_us=float(stats.get("dispatch_us_last", -1)),
        setup_weights_host_us=float(stats.get("setup_weights_host_us", -1)),
        setup_weights_upload_us=float(stats.get("setup_weights_upload_us", -1)),
        setup_tuning_us=float(stats.get("setup_tuning_us", -1)),
    )


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
    device: DeviceFigures | None = None  # GPU backends only
    outputs: dict[str, np.ndarray] | None = None  # outputs of the last timed run (keep_outputs=True)
    profile_error: str = ""  # why the delegate's device profile could not be read (GPU backends)
    # benchmark_model's figures (see the module docstring)
    init_us: float = 0.0  # wall time of loading the model
    model_bytes: int = 0
    warmup: TimingStats | None = None  # every warm-up run, the first inference first
    loops: tuple[RunLoop, ...] = ()  # (warm-up, timed) as run
    mem_init_kb: int = 0  # growth of the peak resident set during init / over the whole benchmark
    mem_overall_kb: int = 0
    peak_mem_mb: float = -1.0  # --report_peak_memory_footprint (-1: not sampled)
    rss_end: RssStatus | None = None
    delegate_kernels: int = -1  # partitions of our delegate (-1: not loaded)
    fully_delegated: bool = False
    states: dict[str, str] = field(default_factory=dict)  # "pre-invoke" / "post-invoke" interpreter state text

    def to_dict(self) -> dict[str, Any]:
        skip = ("stats", "profile", "path", "device", "outputs", "warmup", "loops", "rss_end", "states")
        d = {k: getattr(self, k) for k in (f.name for f in dataclasses.fields(self)) if k not in skip}
        d["op_histogram"] = dict(self.op_histogram)
        d["path"] = str(self.path)
        d["timings_us"] = self.stats.to_dict()
        d["warmup_us"] = self.warmup.to_dict() if self.warmup is not None else None
        d["loops"] = [dataclasses.asdict(loop) for loop in self.loops]
        d["rss_end"] = dataclasses.asdict(self.rss_end) if self.rss_end is not None else None
        if self.device is not None:
            d["device"] = {**dataclasses.asdict(self.device),
                           "arena_mb": self.device.arena_bytes / 2**20, "weight_mb": self.device.weight_bytes / 2**20}
        if self.profile is not None:
            d["op_profile"] = {
                "kind": self.profile.kind,
                "device": self.profile.device,
                "runs_averaged": self.profile.runs_averaged,
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


@dataclass(frozen=True)
class ReportOptions:
    """benchmark_model's optional outputs and checks: interpreter state before the first / after the last run,
    a sampled peak of the resident set (interval in ms, 0 = off) and ``require_full_delegation``."""

    preinvoke_state: bool = False
    postinvoke_state: bool = False
    peak_memory_interval_ms: int = 0
    require_full_delegation: bool = False


def _delegate_kernels(runner: ModelRunner) -> tuple[int, bool]:
    """Partitions of our delegate in ``runner`` (-1 when not loaded) and whether it runs every node."""
    if not getattr(runner, "_delegates", None):
        return -1, False
    placement = runner.placement
    kernels = placement.partitions.get(DELEGATE_NAME, 0)
    full = kernels == 1 and bool(placement.node_executor) and all(
        ex == DELEGATE_NAME for ex in placement.node_executor)
    return kernels, full


def unique_labels(targets: list[BenchTarget]) -> list[BenchTarget]:
    """``targets`` relabelled so different files never share a label: ``a/unet.tflite`` and ``b/unet.tflite`` instead
    of two ``unet.tflite`` (the shortest trailing part of the paths that tells them apart)."""
    groups: dict[str, set[Path]] = {}
    for t in targets:
        groups.setdefault(t.label, set()).add(t.path.absolute())
    relabel: dict[Path, str] = {}
    for label, paths in groups.items():
        if len(paths) < 2:
            continue
        depth = label.count("/") + 1
        longest = max(len(p.parts) for p in paths)
        while depth < longest and len({Path(*p.parts[-depth:]) for p in paths}) < len(paths):
            depth += 1
        for p in paths:
            relabel[p] = str(Path(*p.parts[-depth:]))
    return [dataclasses.replace(t, label=relabel.get(t.path.absolute(), t.label)) for t in targets]


def bench_target(target: BenchTarget, num_runs: int, warmup_runs: int, op_profiling: bool = False,
                 seed: int = 0, keep_outputs: bool = False, isolated_fallback: bool = True, *,
                 rules: TimingRules = TimingRules(), report: ReportOptions = ReportOptions()) -> BenchResult:
    """Time ``target``: a warm-up phase that starts with the first inference, then the timed phase (``invoke``
    only), with ``rules`` deciding how long each lasts (defaults: exactly ``warmup_runs`` / ``num_runs`` runs,
    with at least the first inference).

    With ``op_profiling`` on a GPU backend the delegate profiles these very runs on the device; elsewhere the
    nodes are timed in isolation after the model is closed (see the module docstring). When the delegate
    writes no profile, ``isolated_fallback`` decides between isolation (slow on big models) and no profile;
    either way ``profile_error`` says why.
    """
    if num_runs < 1:
        raise SdliteError(f"--num_runs must be >= 1, got {num_runs}")
    if warmup_runs < 0:
        raise SdliteError(f"--warmup_runs must be >= 0, got {warmup_runs}")
    warm_loop, timed_loop = RunLoop.warmup(warmup_runs, rules), RunLoop.timed(num_runs, rules)
    on_device = op_profiling and target.options.name in DEVICE_BACKENDS
    profile: OpProfile | None = None
    monitor = PeakMonitor(report.peak_memory_interval_ms) if report.peak_memory_interval_ms > 0 else None
    if monitor is not None:
        monitor.start()
    mem_start = footprint_kb()
    with ExitStack() as stack:
        if monitor is not None:
            stack.callback(monitor.stop)
        profile_file: Path | None = None
        t_init = time.perf_counter()
        if on_device:
            from sdlite import native

            profile_file = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sdlite-profile-")))
            profile_file = profile_file / "profile.json"
            with native.extra_options(profile_path=str(profile_file)):
                runner = open_runner(target.path, target.options)
        else:
            runner = open_runner(target.path, target.options)
        init_us = (time.perf_counter() - t_init) * 1e6
        mem_init = footprint_kb()
        stack.callback(runner.close)
        kernels, full = _delegate_kernels(runner)
        if report.require_full_delegation and not full:
            raise SdliteError(f"{target.label}: Disallowed CPU fallback detected "
                              f"(--require_full_delegation; placement: {runner.placement.summary(runner.info)})")
        states: dict[str, str] = {}
        snapshots: list[ProfileSnapshot] = []
        unavailable = ""

        def snapshot() -> None:
            nonlocal unavailable
            if profile_file is not None and not unavailable:
                try:
                    snapshots.append(ProfileSnapshot.read(profile_file))
                except SdliteError as exc:
                    unavailable = str(exc)

        runner.set_inputs(synthetic_inputs(runner, seed))
        if report.preinvoke_state:
            states["pre-invoke"] = state_text(runner, "pre-invoke")
        t0 = time.perf_counter()
        runner.invoke()
        first_s = time.perf_counter() - t0
        first_us = first_s * 1e6
        snapshot()
        warm = warm_loop.run(runner.invoke, [first_s], started=t0)
        snapshot()
        samples = timed_loop.run(runner.invoke)
        snapshot()
        mem_overall = footprint_kb()
        if report.postinvoke_state:
            states["post-invoke"] = state_text(runner, "post-invoke")
        info = runner.info
        placement = runner.placement
        result = BenchResult(
            label=target.label, path=target.path, backend=target.options.name, threads=target.options.threads,
            group=target.group, stats=TimingStats.from_seconds(samples), load_s=runner.load_s,
            first_run_us=first_us, warmup_avg_us=float(np.mean(warm)) * 1e6,
            placement=placement.summary(info), num_ops=len(info.ops), op_histogram=info.op_histogram,
            weight_bytes=info.weight_bytes, peak_activation_bytes=info.peak_activation_bytes(),
            device=device_figures(runner) if target.options.name in DEVICE_BACKENDS else None,
            outputs=runner.get_outputs() if keep_outputs else None,
            init_us=init_us, model_bytes=info.file_bytes, warmup=TimingStats.from_seconds(warm),
            loops=(warm_loop, timed_loop), mem_init_kb=mem_init - mem_start, mem_overall_kb=mem_overall - mem_start,
            rss_end=rss_status(), delegate_kernels=kernels, fully_delegated=full, states=states,
        )
        if on_device and not unavailable:
            profile = device_op_profile(info, placement, *snapshots)
    if monitor is not None:
        result.peak_mem_mb = monitor.stop()
    result.profile_error = unavailable
    if op_profiling and profile is None and (isolated_fallback or not on_device):
        profile = profile_ops(target.path, info, placement, target.options, num_runs, warmup_runs, seed)
        if unavailable:
            profile.method += f" (device events unavailable: {unavailable})"
    result.profile = profile
    return result
