"""`--tune`: one-op models timed through the delegate; the planner then trusts the measurements."""
from __future__ import annotations

import pytest

from sdconvert.delegate_timer import DelegateTimer
from sdconvert.winograd.convspec import ConvSpec
from sdconvert.winograd.plan import make_plan
from sdconvert.winograd.tune import tune


def test_tune_measures_every_candidate_once_per_shape() -> None:
    specs = [ConvSpec("a", 1, 12, 12, 16, 16), ConvSpec("b", 1, 12, 12, 16, 16, activation="relu"),
             ConvSpec("c", 1, 8, 8, 8, 24, padding="VALID"), ConvSpec("s2", 1, 8, 8, 8, 8, stride_h=2, stride_w=2)]
    lines: list[str] = []
    measured = tune(specs, DelegateTimer(), repeats=1, warmup=1, num_threads=1, progress=lines.append)
    keys = {specs[0].shape_key(), specs[2].shape_key()}           # a and b share a shape; s2 is unsuitable
    assert set(measured) == {(k, t) for k in keys for t in (0, 2, 4, 6)}
    assert all(v > 0 for v in measured.values())
    assert len(lines) == 2 and lines[0].startswith("tuned 1x12x12 16->16: direct ")

    # the "cpu" profile (these are CPU timings): it runs every tile from one tile up, so the measured minimum is always
    # a plan option (the "h200" profile, min_tiles 16, excludes F4 / F6 on these small maps, and the test failed
    # whenever one of them happened to time fastest)
    plan = make_plan(specs, "auto", "cpu", memory_budget=1 << 40, measured=measured)
    for d in plan.decisions[:3]:
        assert d.source == "measured"
        times = {t: measured[(d.spec.shape_key(), t)] for t in (0, 2, 4, 6)}
        assert d.tile == min(times, key=times.get)
    assert plan.decisions[3].source == "model" and plan.decisions[3].tile == 0


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_tune_on_a_gpu_backend_times_candidates_by_device_events_in_one_model(backend: str) -> None:
    """PoCL / llvmpipe here: every candidate of every shape in one delegated model, timed by the delegate's profile
    (OpenCL events / GL timer queries); with a device profile, tiles its backend would run direct (fewer than
    min_tiles tiles) are not measured."""
    from sdconvert.winograd.cost import get_profile

    specs = [ConvSpec("a", 1, 16, 16, 8, 8), ConvSpec("b", 1, 8, 8, 16, 8)]
    lines: list[str] = []
    measured = tune(specs, DelegateTimer(), repeats=2, warmup=1, backend=backend, profile=get_profile("h200"), progress=lines.append)
    # h200: min_tiles 16 -> 16x16 runs F2 (64 tiles) and F4 (16); F6 has 9 tiles. 8x8 runs F2 (16) only.
    assert set(measured) == {(specs[0].shape_key(), t) for t in (0, 2, 4)} | {(specs[1].shape_key(), t) for t in (0, 2)}
    assert all(0 < v < 1.0 for v in measured.values())
    assert lines == [ln for ln in lines if ln.startswith("tuned 1x")] and len(lines) == 2
    plan = make_plan(specs, "auto", "h200", memory_budget=1 << 40, measured=measured)
    assert [d.source for d in plan.decisions] == ["measured", "measured"]


def test_candidates_model_ops_agree_with_each_other_on_opencl() -> None:
    """The tuning model is a real model: each shape's direct and Winograd candidates compute the same conv."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    from sdconvert.graph import write_model
    from sdconvert.winograd.tune import candidates_model
    from sdlite import native

    cells = [(ConvSpec("a", 1, 12, 12, 8, 16), (0, 2, 4, 6)), (ConvSpec("b", 2, 8, 8, 4, 4, padding="VALID"), (0, 2))]
    model, nodes = candidates_model(cells)
    assert nodes == [(0, 0), (0, 2), (0, 4), (0, 6), (1, 0), (1, 2)]
    assert [op.opcode.name for op in model.subgraphs[0].ops] == ["CONV_2D", *["SdConv2DWinograd"] * 3, "CONV_2D",
                                                                 "SdConv2DWinograd"]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        path = write_model(model, Path(tmp) / "c.tflite")
        interp = Interpreter(model_path=str(path), experimental_delegates=[native.load(backend="opencl")])
        interp.allocate_tensors()
        rng = np.random.default_rng(0)
        for d in interp.get_input_details():
            interp.set_tensor(d["index"], rng.standard_normal(d["shape"]).astype(np.float32))
        interp.invoke()
        outs = [interp.get_tensor(d["index"]) for d in interp.get_output_details()]
    assert [o.shape for o in outs] == [(1, 12, 12, 16)] * 4 + [(2, 6, 6, 4)] * 2
    for ref, group in ((outs[0], outs[1:4]), (outs[4], outs[5:6])):
        for y in group:
            assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max()


def test_tune_backend_errors() -> None:
    from sdconvert.errors import UserError
    from sdconvert.export.optimize import GraphOptions

    with pytest.raises(UserError, match="--tune-backend must be one of cpu, opencl, gl"):
        tune([ConvSpec("a", 1, 8, 8, 4, 4)], DelegateTimer(), backend="cuda")
    with pytest.raises(UserError, match="--tune-backend only applies with --tune --winograd auto"):
        GraphOptions(winograd="auto", tune_backend="opencl").validate()
    GraphOptions(winograd="auto", tune=True, tune_backend="opencl").validate()


def test_tune_times_through_the_timer_it_is_given() -> None:
    """The tuner builds the candidate models and asks its timer for the times (here a fake one that charges each
    model by its file size): the runtime is the caller's choice, and the plan follows what the timer reported."""
    from pathlib import Path

    from sdconvert.errors import UserError
    from sdconvert.winograd.apply import WinogradOptions, winograd_pass
    from sdconvert.winograd.tune import single_conv_model

    class BySize:
        def __init__(self) -> None:
            self.calls: list[tuple[str, int]] = []

        def invoke_seconds(self, path: Path, x, repeats: int, warmup: int, num_threads) -> float:  # noqa: ANN001
            self.calls.append(("cpu", x.shape[1]))
            return 1.0 / path.stat().st_size  # the largest candidate model "wins"

        def node_device_ms(self, path: Path, backend: str, inputs, repeats: int, warmup: int) -> dict[int, float]:  # noqa: ANN001
            self.calls.append((backend, len(inputs)))
            return {n: 0.5 + n for n in range(4)}

    timer = BySize()
    specs = [ConvSpec("a", 1, 12, 12, 16, 16)]
    measured = tune(specs, timer, repeats=1, warmup=0)
    assert timer.calls == [("cpu", 12)] * 4 and len(measured) == 4
    gpu = tune(specs, timer, backend="opencl", repeats=1, warmup=1)
    assert timer.calls[-1] == ("opencl", 1)
    assert gpu == {(specs[0].shape_key(), t): (0.5 + n) * 1e-3 for n, t in enumerate((0, 2, 4, 6))}
    with pytest.raises(UserError, match="--tune needs a timer"):
        winograd_pass(single_conv_model(specs[0], 0), WinogradOptions(mode="auto", tune=True))
