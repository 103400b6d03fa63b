"""weights_fp16 weights made on the device: the float32 values a device producer makes (the packing transpose of a
FULLY_CONNECTED / CONV_2D filter, Winograd F(2x2)'s U) go through pack_half (gpu/kernels/copy.kern) into the half
buffer, so the host converts nothing (it took 3.0 s of the H200's first SD1.5 UNet call, BENCHMARKS.md). Asserted
from the delegate's stats (weights made on the device, none on the host; the bytes held) and against numpy with the
weights rounded to half the way the host rounds them (nearest even: np.float16), on PoCL and llvmpipe."""
from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from sdlite import native
from test_winograd_delegate import _opts, conv_model
from tflite_gemm_models import fully_connected_model


def _run(model: bytes, inputs: dict[str, np.ndarray], backend: str, **options) -> tuple[dict, dict]:
    delegate = native.load(backend=backend, gemm_autotune=False, **options)
    it = Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], inputs[d["name"]])
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}, native.stats(delegate)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


@pytest.mark.parametrize("shape", [(256, 512), (96, 132), (33, 129)])  # the last: an odd count (a padded pair)
@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_fc_half_weights_are_packed_on_the_device(rng, backend: str, shape) -> None:
    n, k = shape
    w = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    x = rng.standard_normal((1, 8, k)).astype(np.float32)
    got, stats = _run(fully_connected_model([1, 8, k], w, b), {"x": x}, backend, weights_fp16=True)
    assert (stats["weights_on_device"], stats["weights_on_host"]) == (1, 0), stats
    assert stats["device_weight_bytes"] == n * k * 2 + n * 4
    # the device's rounding is the host's (nearest even): only fp32 accumulation separates them
    want = x.astype(np.float64) @ w.astype(np.float16).astype(np.float64).T + b
    assert _rel(got["y"], want) < 2e-6
    # against the float32 weights: the half rounding is there (a device path that kept float32 would be ~1e-7)
    assert _rel(got["y"], x.astype(np.float64) @ w.astype(np.float64).T + b) > 1e-5


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_winograd_f2_half_u_is_made_on_the_device(rng, backend: str) -> None:
    w = (rng.standard_normal((64, 3, 3, 32)) * 0.1).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    model = conv_model((1, 24, 24, 32), w, b, _opts(2))
    x = {"x": rng.standard_normal((1, 24, 24, 32)).astype(np.float32)}
    want, _ = _run(model, x, backend)
    got, stats = _run(model, x, backend, weights_fp16=True)
    assert (stats["weights_on_device"], stats["weights_on_host"]) == (1, 0), stats
    assert stats["device_weight_bytes"] == 16 * 32 * 64 * 2 + 64 * 4  # U (4 x 4 per filter) as half, the bias
    assert 1e-5 < _rel(got["y"], want["y"]) < 2e-3
