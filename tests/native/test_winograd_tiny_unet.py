"""`--winograd 4` on the tiny UNet: plan + rewrite + delegate keep fp32 parity with the unrewritten model."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness import make_interpreter
from sdconvert.graph import read_model, write_model
from sdconvert.winograd.apply import apply_plan, plan_model
from sdlite import native


def _run(path: Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    interp = make_interpreter(path.read_bytes(), native.load(num_threads=2))
    outputs = interp.get_signature_runner("serving_default")(**inputs)
    assert len(outputs) == 1
    return next(iter(outputs.values()))


@pytest.mark.parametrize("mode", ["4", "mixed"])
def test_tiny_unet_winograd_parity(tiny_export: Path, tmp_path: Path, mode: str) -> None:
    """``4``: what ``--winograd 4`` does. ``mixed``: F2/F4/F6 in turn over the suitable convs (no cost model
    picks F6 on the tiny UNet's 8x8 maps, but every tile size must run in one graph)."""
    src = tiny_export / "unet.tflite"
    model = read_model(src)
    plan = plan_model(model, 4, "adreno740")
    summary = plan.summary()
    assert summary["convs"] > 0 and summary["suitable"] > 0
    if mode == "mixed":
        suitable = [i for i, d in enumerate(plan.decisions) if d.suitable]
        for k, i in enumerate(suitable):
            plan.decisions[i] = replace(plan.decisions[i], tile=(2, 4, 6)[k % 3])
    rewritten = apply_plan(model, plan)
    assert rewritten == summary["suitable"] == summary["decisions"]["F4"]
    assert model.op_histogram().get("SdConv2DWinograd", 0) == rewritten
    out = write_model(model, tmp_path / "unet_winograd.tflite")
    assert out.stat().st_size < src.stat().st_size * 1.01            # filters stay untransformed in the file

    sig = read_model(src).signatures[0]
    rng = np.random.default_rng(0)
    inputs = {}
    for name, t in sig.inputs:
        shape = t.shape
        inputs[name] = (rng.standard_normal(shape) if "timestep" not in name else np.array([500.0])).astype(np.float32)
    want = _run(src, inputs)
    got = _run(out, inputs)
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max())
    print(f"\n  tiny UNet --winograd {mode}: {rewritten} convs rewritten, max abs err {err:.2e} (scale {scale:.2f})")
    assert err <= 1e-4 * max(scale, 1.0)
