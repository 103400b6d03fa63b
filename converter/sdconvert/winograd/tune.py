"""``--tune``: time every candidate (direct and F2/F4/F6) per distinct conv shape on the target runtime.

Each candidate is an op run by the LiteRT interpreter with the sdgpu delegate: ``SdConv2DWinograd`` for tiles
(our kernels), the builtin ``CONV_2D`` for direct (what a conv left direct actually runs as: XNNPACK on CPU, our
direct conv kernels on a GPU backend). The planner then uses these instead of the cost model for the shapes
covered (``make_plan(..., measured=...)``).

Two ways of timing, by backend:

* ``cpu``: one one-op model per candidate, the median wall time of ``repeats`` invokes after ``warmup``.
* ``opencl`` / ``gl``: every candidate of every shape in ONE model (independent ops, one input per shape), run
  as one delegated partition; each candidate's time is its device time from the delegate's own per-node profile
  (OpenCL events / GL timer queries), averaged over ``repeats`` invokes after ``warmup`` (which include the
  delegate's GEMM tile tuning). Wall time would be useless there: an invoke also uploads the input and
  downloads every output, megabytes against a 0.05-0.3 ms conv. Device time leaves out the launch gaps, so a
  Winograd candidate's two extra launches (~2-5 us each) are not charged; the GPU backend's measured margins
  at SD shapes are far larger.

Trade-off: each candidate is measured without its real neighbours (warm caches, no fused GroupNorm prologue or
statistics epilogue: those cost about the same for every tile); shapes are deduplicated, so SD1.5's 49 suitable
UNet convs need ~16 shapes x 2-4 candidates. With a device profile, candidates that profile's backend would not
run in the Winograd domain (fewer than ``min_tiles`` tiles) are skipped, as the planner never picks them.

The tuner builds the candidate models; running them is the runtime's business: a :class:`Timer` passed in by the
caller (the CLI layer passes :class:`sdconvert.delegate_timer.DelegateTimer`, which runs them through sdlite's
delegate loader), so this module imports nothing of the runtime.
"""
from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from sdconvert.errors import UserError
from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, Tensor, write_model
from sdconvert.graph.schema import S
from sdconvert.ops.conv2d_winograd import SPEC, Conv2DWinogradAttrs
from sdconvert.winograd.convspec import ConvSpec, suitability
from sdconvert.winograd.cost import DeviceProfile, runs_winograd
from sdconvert.winograd.plan import Measurements
from sdconvert.ops.conv2d_winograd import KERNEL_TILES

_ACT_CODES = {"none": 0, "relu": 1, "relu_n1_to_1": 2, "relu6": 3, "tanh": 4}
#: backends timed by the delegate's device profile (one multi-candidate model) instead of wall time
GPU_BACKENDS: tuple[str, ...] = ("opencl", "gl")
TUNE_BACKENDS: tuple[str, ...] = ("cpu",) + GPU_BACKENDS


class Timer(Protocol):
    """How candidates are timed on the target runtime."""

    def invoke_seconds(self, path: Path, x: np.ndarray, repeats: int, warmup: int, num_threads: int | None) -> float:
        """Median wall seconds of one invoke of the one-input model ``path`` on the CPU backend, fed ``x``, over
        ``repeats`` invokes after ``warmup``."""
        ...

    def node_device_ms(self, path: Path, backend: str, inputs: Sequence[np.ndarray], repeats: int,
                       warmup: int) -> dict[int, float]:
        """Per-node device ms of ``path`` on the GPU ``backend`` (the delegate's own profile), averaged over
        ``repeats`` invokes after ``warmup``, with ``inputs`` fed in the model's input order; nodes that did not
        run on the GPU are absent."""
        ...


def _conv_op(sg: Subgraph, spec: ConvSpec, tile: int, x: Tensor, w: Tensor, b: Tensor) -> tuple[Op, Tensor]:
    """``spec``'s conv of ``x`` as builtin CONV_2D (tile 0) or SdConv2DWinograd; returns (op, output)."""
    y = sg.new_tensor(f"y_f{tile}", (spec.batch, spec.out_h, spec.out_w, spec.out_c))
    if tile == 0:
        opts = S.Conv2DOptionsT()
        opts.padding = S.Padding.SAME if spec.padding == "SAME" else S.Padding.VALID
        opts.strideH = opts.strideW = opts.dilationHFactor = opts.dilationWFactor = 1
        opts.fusedActivationFunction = _ACT_CODES[spec.activation]
        op = Op(OpCode.of("CONV_2D"), [x, w, b], [y], options_type=S.BuiltinOptions.Conv2DOptions, options=opts)
    else:
        attrs = Conv2DWinogradAttrs(tile=tile, padding=spec.padding, activation=spec.activation)
        op = Op(OpCode.of(SPEC.name, SPEC.version), [x, w, b], [y], custom_options=SPEC.encode(attrs),
                custom_options_format=S.CustomOptionsFormat.FLEXBUFFERS)
    return op, y


def _conv_inputs(sg: Subgraph, spec: ConvSpec, rng: np.random.Generator, tag: str = "") -> tuple[Tensor, Tensor, Tensor]:
    x = sg.new_tensor(f"x{tag}", (spec.batch, spec.in_h, spec.in_w, spec.in_c))
    w = sg.new_constant(f"filter{tag}", (rng.standard_normal((spec.out_c, 3, 3, spec.in_c)) / (3 * spec.in_c ** 0.5))
                        .astype(np.float32))
    b = sg.new_constant(f"bias{tag}", rng.standard_normal(spec.out_c).astype(np.float32))
    return x, w, b


def single_conv_model(spec: ConvSpec, tile: int, seed: int = 0) -> Model:
    """One conv of ``spec``'s shape with random weights: builtin CONV_2D (tile 0) or SdConv2DWinograd."""
    sg = Subgraph("main")
    x, w, b = _conv_inputs(sg, spec, np.random.default_rng(seed))
    op, y = _conv_op(sg, spec, tile, x, w, b)
    sg.ops.append(op)
    sg.inputs, sg.outputs = [x], [y]
    return Model(subgraphs=[sg], signatures=[SignatureDef("serving_default", sg, [("x", x)], [("y", y)])])


def candidates_model(cells: Sequence[tuple[ConvSpec, Sequence[int]]], seed: int = 0) -> tuple[Model, list[tuple[int, int]]]:
    """Every ``(spec, tiles)`` cell's candidates as independent ops of one model: per cell one input and one
    filter shared by its candidates. Returns the model and, per op (= node index), ``(cell index, tile)``."""
    rng = np.random.default_rng(seed)
    sg = Subgraph("main")
    nodes: list[tuple[int, int]] = []
    inputs: list[Tensor] = []
    outputs: list[Tensor] = []
    for i, (spec, tiles) in enumerate(cells):
        x, w, b = _conv_inputs(sg, spec, rng, tag=str(i))
        inputs.append(x)
        for tile in tiles:
            op, y = _conv_op(sg, spec, tile, x, w, b)
            sg.ops.append(op)
            outputs.append(y)
            nodes.append((i, tile))
    sg.inputs, sg.outputs = inputs, outputs
    sig = SignatureDef("serving_default", sg, [(f"x{i}", t) for i, t in enumerate(inputs)],
                       [(f"y{i}", t) for i, t in enumerate(outputs)])
    return Model(subgraphs=[sg], signatures=[sig]), nodes


def _distinct(specs: Sequence[ConvSpec]) -> dict[tuple[int, ...], ConvSpec]:
    seen: dict[tuple[int, ...], ConvSpec] = {}
    for s in specs:
        if suitability(s)[0]:
            seen.setdefault(s.shape_key(), s)
    return seen


def _report(progress: Callable[[str], None] | None, spec: ConvSpec, times: dict[int, float]) -> None:
    if progress is not None:
        cells = ", ".join(f"{'direct' if t == 0 else f'F{t}'} {s * 1e3:.3f} ms" for t, s in times.items())
        progress(f"tuned {spec.batch}x{spec.in_h}x{spec.in_w} {spec.in_c}->{spec.out_c}: {cells}")


def tune(specs: Sequence[ConvSpec], timer: Timer, tiles: Sequence[int] = KERNEL_TILES, repeats: int = 3,
         warmup: int = 1, num_threads: int | None = None, progress: Callable[[str], None] | None = None,
         backend: str = "cpu", profile: DeviceProfile | None = None) -> Measurements:
    """Measure direct + ``tiles`` for every distinct suitable shape in ``specs`` on ``backend`` with ``timer``
    (module docstring); with ``profile``, tiles that profile's backend runs direct anyway are not measured."""
    if backend not in TUNE_BACKENDS:
        raise UserError(f"--tune-backend must be one of {', '.join(TUNE_BACKENDS)}, got {backend!r}")
    if repeats < 1 or warmup < (1 if backend in GPU_BACKENDS else 0):
        raise UserError(f"tuning needs repeats >= 1 and, on a GPU backend, warmup >= 1 (got {repeats}, {warmup})")
    seen = _distinct(specs)
    cells = [(spec, (0, *(t for t in tiles if profile is None or runs_winograd(spec, t, profile))))
             for spec in seen.values()]
    if backend in GPU_BACKENDS:
        return _tune_device(cells, timer, backend, repeats, warmup, progress)
    measured: dict[tuple[tuple[int, ...], int], float] = {}
    with tempfile.TemporaryDirectory(prefix="sdconvert-tune-") as tmp:
        for spec, cands in cells:
            x = np.random.default_rng(1).standard_normal((spec.batch, spec.in_h, spec.in_w, spec.in_c)).astype(np.float32)
            times = {}
            for tile in cands:
                path = write_model(single_conv_model(spec, tile), Path(tmp) / f"t{tile}.tflite")
                times[tile] = timer.invoke_seconds(path, x, repeats, warmup, num_threads)
                measured[(spec.shape_key(), tile)] = times[tile]
            _report(progress, spec, times)
    return measured


def _tune_device(cells: Sequence[tuple[ConvSpec, Sequence[int]]], timer: Timer, backend: str, repeats: int,
                 warmup: int, progress: Callable[[str], None] | None) -> Measurements:
    """All candidates in one model on a GPU backend, timed by the delegate's per-node device profile."""
    model, nodes = candidates_model(cells)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((s.batch, s.in_h, s.in_w, s.in_c)).astype(np.float32) for s, _ in cells]
    with tempfile.TemporaryDirectory(prefix="sdconvert-tune-") as tmp:
        path = write_model(model, Path(tmp) / "candidates.tflite")
        avg = timer.node_device_ms(path, backend, inputs, repeats, warmup)
    missing = [n for n in range(len(nodes)) if n not in avg]
    if missing:
        raise UserError(f"--tune-backend {backend}: {len(missing)} candidate op(s) did not run on the GPU "
                        f"(nodes {missing[:8]}); cannot time them by device events")
    measured: dict[tuple[tuple[int, ...], int], float] = {}
    for node, (cell, tile) in enumerate(nodes):
        measured[(cells[cell][0].shape_key(), tile)] = avg[node] * 1e-3
    for spec, cands in cells:
        _report(progress, spec, {t: measured[(spec.shape_key(), t)] for t in cands})
    return measured
