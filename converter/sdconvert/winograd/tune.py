"""``--tune``: time every candidate (direct and F2/F4/F6) per distinct conv shape on the target runtime.

Each candidate is a one-op model run by the LiteRT interpreter with the sdgpu delegate: ``SdConv2DWinograd``
for tiles (our kernels), the builtin ``CONV_2D`` for direct (what a conv left direct actually runs as: XNNPACK
on CPU). The median of ``repeats`` timed invokes after ``warmup`` is the measurement; the planner then uses
these instead of the cost model for the shapes covered (``make_plan(..., measured=...)``).
Trade-off: a one-op model measures the kernel in isolation (warm caches, no neighbours); shapes are
deduplicated, so SD1.5's 49 suitable UNet convs need only ~12 shapes x 4 candidates.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, write_model
from sdconvert.graph.schema import S
from sdconvert.ops.conv2d_winograd import SPEC, Conv2DWinogradAttrs
from sdconvert.winograd.convspec import ConvSpec, suitability
from sdconvert.winograd.plan import Measurements
from sdconvert.winograd.transforms import KERNEL_TILES

_ACT_CODES = {"none": 0, "relu": 1, "relu_n1_to_1": 2, "relu6": 3, "tanh": 4}


def single_conv_model(spec: ConvSpec, tile: int, seed: int = 0) -> Model:
    """One conv of ``spec``'s shape with random weights: builtin CONV_2D (tile 0) or SdConv2DWinograd."""
    rng = np.random.default_rng(seed)
    sg = Subgraph("main")
    x = sg.new_tensor("x", (spec.batch, spec.in_h, spec.in_w, spec.in_c))
    w = sg.new_constant("filter", (rng.standard_normal((spec.out_c, 3, 3, spec.in_c)) / (3 * spec.in_c ** 0.5))
                        .astype(np.float32))
    b = sg.new_constant("bias", rng.standard_normal(spec.out_c).astype(np.float32))
    y = sg.new_tensor("y", (spec.batch, spec.out_h, spec.out_w, spec.out_c))
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
    sg.ops.append(op)
    sg.inputs, sg.outputs = [x], [y]
    return Model(subgraphs=[sg], signatures=[SignatureDef("serving_default", sg, [("x", x)], [("y", y)])])


def time_model(path: Path, x: np.ndarray, repeats: int, warmup: int, num_threads: int | None) -> float:
    """Median seconds of one invoke of ``path`` with the sdgpu CPU delegate attached."""
    from ai_edge_litert.interpreter import Interpreter

    from sdlite import native

    opts = {} if num_threads is None else {"num_threads": num_threads}
    interp = Interpreter(model_path=str(path), experimental_delegates=[native.load(**opts)],
                         num_threads=num_threads or 1)
    interp.allocate_tensors()
    index = interp.get_input_details()[0]["index"]
    times = []
    for i in range(warmup + repeats):
        interp.set_tensor(index, x)
        t0 = time.perf_counter()
        interp.invoke()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tune(specs: Sequence[ConvSpec], tiles: Sequence[int] = KERNEL_TILES, repeats: int = 3, warmup: int = 1,
         num_threads: int | None = None, progress: Callable[[str], None] | None = None) -> Measurements:
    """Measure direct + ``tiles`` for every distinct suitable shape in ``specs``."""
    measured: dict[tuple[tuple[int, ...], int], float] = {}
    seen: dict[tuple[int, ...], ConvSpec] = {}
    for s in specs:
        if suitability(s)[0]:
            seen.setdefault(s.shape_key(), s)
    with tempfile.TemporaryDirectory(prefix="sdconvert-tune-") as tmp:
        for key, spec in seen.items():
            x = np.random.default_rng(1).standard_normal((spec.batch, spec.in_h, spec.in_w, spec.in_c)).astype(np.float32)
            for tile in (0, *tiles):
                path = write_model(single_conv_model(spec, tile), Path(tmp) / f"t{tile}.tflite")
                measured[(key, tile)] = time_model(path, x, repeats, warmup, num_threads)
            if progress is not None:
                cells = ", ".join(f"{'direct' if t == 0 else f'F{t}'} {measured[(key, t)] * 1e3:.3f} ms"
                                  for t in (0, *tiles))
                progress(f"tuned {spec.batch}x{spec.in_h}x{spec.in_w} {spec.in_c}->{spec.out_c}: {cells}")
    return measured
