"""SdGelu CPU kernel vs the shared numpy reference (sdconvert.ops.gelu), all three modes."""
from __future__ import annotations

import numpy as np
import pytest

from cpu_isa import ENV as ISA_ENV
from cpu_isa import available_isas
from harness import assert_close, run
from sdconvert.ops import gelu as G
from tflite_models import gelu_model

MODES = ("none", "tanh", "quick")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1,), (7,), (2, 3, 5), (1, 64, 1280), (3, 40000)])
def test_matches_reference(rng, mode, shape):
    attrs = G.GeluAttrs(approximate=mode)
    x = (3.0 * rng.standard_normal(shape)).astype(np.float32)
    result = run(gelu_model(shape, G.SPEC.encode(attrs)), {"x": x}, num_threads=2)
    assert_close(result.outputs["y"], G.reference([x], attrs))


@pytest.mark.parametrize("mode", MODES)
def test_extreme_values(mode):
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-3, -1e-3, 5.0, -5.0, 30.0, -30.0, 1e4, -1e4, 3e38, -3e38],
                 np.float32)
    attrs = G.GeluAttrs(approximate=mode)
    y = run(gelu_model(x.shape, G.SPEC.encode(attrs)), {"x": x}, num_threads=1).outputs["y"]
    assert np.isfinite(y).all()
    with np.errstate(over="ignore"):  # the float64 reference overflows exp() for quick(-3e38), correctly -> -0
        expected = G.reference([x], attrs)
    assert_close(y, expected)


def test_modes_differ():
    # Guards against a kernel that ignores `approximate`: the three curves differ at x = 1.
    x = np.ones((1,), np.float32)
    ys = [run(gelu_model((1,), G.SPEC.encode(G.GeluAttrs(m))), {"x": x}).outputs["y"][0] for m in MODES]
    assert len({float(v) for v in ys}) == 3
    assert ys == pytest.approx([0.8413447, 0.8411920, 0.8457957], abs=2e-6)


@pytest.mark.parametrize("isa", available_isas())
@pytest.mark.parametrize("mode", MODES)
def test_every_instruction_set(monkeypatch, rng, isa, mode):
    # 3 x 40000 + 7: 4 threads' chunks plus a tail shorter than any vector; extremes appended at the end.
    monkeypatch.setenv(ISA_ENV, isa)
    x = np.concatenate([(3.0 * rng.standard_normal(120_007)).astype(np.float32),
                        np.float32([0.0, -0.0, 1e-30, -8.0, 8.0, 30.0, -30.0, 1e4, -1e4, 3e38, -3e38])])
    attrs = G.GeluAttrs(approximate=mode)
    y = run(gelu_model(x.shape, G.SPEC.encode(attrs)), {"x": x}, num_threads=4).outputs["y"]
    with np.errstate(over="ignore"):
        expected = G.reference([x], attrs)
    assert_close(y[:-11], expected[:-11])
    assert_close(y[-11:], expected[-11:])
