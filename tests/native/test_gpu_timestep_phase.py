"""The timestep embedding's phase on the GPU backends (OpenCL on PoCL, GL on llvmpipe in CI): the converter's graph
RESHAPE(t) -> MUL(t, freqs) -> SIN / COS -> CONCATENATION. The partition folds the MUL into the SIN and the COS
(mul_unary_f32: sin(t * freqs) and cos(t * freqs) in one kernel each, freqs read as float32), so with
activations_fp16 neither the phase nor freqs is ever stored as half: at t = 999 half's spacing is 0.5 rad, and
freqs rounded to half moves t * f by up to 999 * f * 2^-11 -- either error alone makes the high-frequency features
wrong by up to ~0.25. What remains is the sin / cos values' own half rounding (<= 2^-12 ~ 2.4e-4 absolute)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from harness import run
from tflite_builtin import BuiltinGraph

BACKENDS = ("opencl", "gl")
HALF_DIM = 160  # SD1.5's 320-channel embedding: 160 frequencies
# diffusers' get_timestep_embedding: exp(-ln(10000) * i / half_dim)
FREQS = np.exp(-np.log(10000.0) * np.arange(HALF_DIM) / HALF_DIM).astype(np.float32)[None, :]


def _phase_model(phase_output: bool = False, phase_reader: bool = False) -> bytes:
    """t [1] -> RESHAPE [1, 1] -> MUL freqs [1, 160] -> SIN, COS -> CONCATENATION [1, 320] = "y". ``phase_output``:
    the phase is also a graph output ("phase"); ``phase_reader``: an ADD reads it too ("phase2" = phase + phase)."""
    g = BuiltinGraph()
    t = g.input("t", [1])
    t2 = g.reshape(t, [1, 1], "t2")
    f = g.const("freqs", FREQS)
    phase = g.binary(S.BuiltinOperator.MUL, t2, f, [1, HALF_DIM], "phase")
    s = g.op(S.BuiltinOperator.SIN, [phase], g.tensor("sin", [1, HALF_DIM]))
    c = g.op(S.BuiltinOperator.COS, [phase], g.tensor("cos", [1, HALF_DIM]))
    g.output(g.concat([s, c], 1, [1, 2 * HALF_DIM], "y"))
    if phase_output:
        g.output(phase)
    if phase_reader:
        g.output(g.binary(S.BuiltinOperator.ADD, phase, phase, [1, HALF_DIM], "phase2"))
    return g.build()


def _expected(t: float) -> np.ndarray:
    phase = np.float64(t) * FREQS.astype(np.float64)
    return np.concatenate([np.sin(phase), np.cos(phase)], axis=1)


def _launches(profile: Path) -> dict[str, list[str]]:
    """Node op name -> the kernels it launched (nodes without launches are absent)."""
    out: dict[str, list[str]] = {}
    for node in json.loads(profile.read_text())["nodes"]:
        if node["kernels"]:
            out.setdefault(node["op"], []).extend(k["name"] for k in node["kernels"])
    return out


@pytest.mark.parametrize("act_half", [True, False], ids=["half", "float32"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_phase_stays_out_of_half_storage(tmp_path, backend, act_half):
    profile = tmp_path / "profile.json"
    for t in (999.0, 500.0, 1.0):
        result = run(_phase_model(), {"t": np.array([t], np.float32)}, backend=backend, activations_fp16=act_half,
                     profile_path=str(profile))
        assert (result.stats["partitions"], result.stats["declined_nodes"]) == (1, 0), result.stats
        error = np.abs(result.outputs["y"].astype(np.float64) - _expected(t)).max()
        # fp32 rounds the product by up to 3e-5 rad near 1000; half also rounds sin / cos (2^-12). Phase in half: 0.25
        assert error <= (5e-4 if act_half else 1e-4), (t, error)
    # the MUL launches nothing; SIN and COS each launch the fold's kernel once
    launches = _launches(profile)
    assert launches == {"SIN": ["mul_unary_f32"], "COS": ["mul_unary_f32"], "CONCATENATION": launches["CONCATENATION"]}
    assert "MUL" not in launches


@pytest.mark.parametrize("kind", ["phase_output", "phase_reader"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_phase_with_other_readers_keeps_its_mul(tmp_path, backend, kind):
    """A phase that is a graph output or that another op reads is still written by its MUL; SIN and COS fold
    anyway (they do not read it)."""
    profile = tmp_path / "profile.json"
    t = 999.0
    result = run(_phase_model(**{kind: True}), {"t": np.array([t], np.float32)}, backend=backend,
                 activations_fp16=True, profile_path=str(profile))
    assert (result.stats["partitions"], result.stats["declined_nodes"]) == (1, 0), result.stats
    assert np.abs(result.outputs["y"].astype(np.float64) - _expected(t)).max() <= 5e-4
    phase = np.float64(t) * FREQS.astype(np.float64)
    if kind == "phase_output":  # stored as half: within half's spacing at 1000 (0.5)
        np.testing.assert_allclose(result.outputs["phase"], phase, rtol=1e-3)
    else:
        np.testing.assert_allclose(result.outputs["phase2"], 2 * phase, rtol=1e-3)
    launches = _launches(profile)
    assert launches["MUL"] == ["binary_f32_v4"] and launches["SIN"] == launches["COS"] == ["mul_unary_f32"], launches
