"""`--tune`: one-op models timed through the delegate; the planner then trusts the measurements."""
from __future__ import annotations

from sdconvert.winograd.convspec import ConvSpec
from sdconvert.winograd.plan import make_plan
from sdconvert.winograd.tune import tune


def test_tune_measures_every_candidate_once_per_shape() -> None:
    specs = [ConvSpec("a", 1, 12, 12, 16, 16), ConvSpec("b", 1, 12, 12, 16, 16, activation="relu"),
             ConvSpec("c", 1, 8, 8, 8, 24, padding="VALID"), ConvSpec("s2", 1, 8, 8, 8, 8, stride_h=2, stride_w=2)]
    lines: list[str] = []
    measured = tune(specs, repeats=1, warmup=1, num_threads=1, progress=lines.append)
    keys = {specs[0].shape_key(), specs[2].shape_key()}           # a and b share a shape; s2 is unsuitable
    assert set(measured) == {(k, t) for k in keys for t in (0, 2, 4, 6)}
    assert all(v > 0 for v in measured.values())
    assert len(lines) == 2 and lines[0].startswith("tuned 1x12x12 16->16: direct ")

    plan = make_plan(specs, "auto", "h200", memory_budget=1 << 40, measured=measured)
    for d in plan.decisions[:3]:
        assert d.source == "measured"
        times = {t: measured[(d.spec.shape_key(), t)] for t in (0, 2, 4, 6)}
        assert d.tile == min(times, key=times.get)
    assert plan.decisions[3].source == "model" and plan.decisions[3].tile == 0
