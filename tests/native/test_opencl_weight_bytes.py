"""The GPU backends' count of the model constants they hold on the device (stats ``device_weight_bytes``, what
``sdlite bench`` and the H200 kit report as GPU weight MB): packed weights at their stored precision and layout,
Winograd's transformed filters U at a^2/9 x the filter bytes, biases as uploaded. PoCL and llvmpipe in CI; the shapes
keep every packed layout free of padding (N a multiple of 64) so the expected byte counts are exact."""
from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from sdlite import native
from test_winograd_delegate import _opts, conv_model
from tflite_gemm_models import fully_connected_model


@pytest.fixture(params=["opencl", "gl"])
def backend(request) -> str:
    return request.param


def _weight_bytes(model: bytes, rng: np.random.Generator, backend: str, **options) -> int:
    delegate = native.load(backend=backend, **options)
    it = Interpreter(model_content=model, experimental_delegates=[delegate])
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], rng.standard_normal(d["shape"]).astype(np.float32))
    it.invoke()  # packed weights may be produced at the first invoke
    stats = native.stats(delegate)
    assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
    return stats["device_weight_bytes"]


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_fully_connected_weights_counted_at_stored_precision(rng, backend: str, fp16: bool, bias: bool) -> None:
    w = rng.standard_normal((64, 128)).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32) if bias else None
    got = _weight_bytes(fully_connected_model([1, 8, 128], w, b), rng, backend, weights_fp16=fp16)
    assert got == 64 * 128 * (2 if fp16 else 4) + (64 * 4 if bias else 0)  # the bias stays float32


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_winograd_counts_the_transformed_filters(rng, backend: str, tile: int) -> None:
    """U holds (tile + 2)^2 values per filter tap pair (Ci, Co) where the filter holds 9: 1.8x / 4x / 7.1x."""
    w = (rng.standard_normal((64, 3, 3, 32)) * 0.1).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    got = _weight_bytes(conv_model((1, 48, 48, 32), w, b, _opts(tile)), rng, backend)
    assert got == (tile + 2) ** 2 * 32 * 64 * 4 + 64 * 4


def test_cpu_backend_reports_no_device_weights() -> None:
    """The CPU backend reads the interpreter's own buffers: the key is absent rather than 0."""
    assert "device_weight_bytes" not in native.stats(native.load(backend="cpu"))


def test_large_fc_weights_packed_on_several_threads_match_the_reference(rng, backend: str) -> None:
    """N x K = 1056 x 1000 (>= 2^20 elements, 33 row blocks of 32: uneven bands) takes TransposeInto's threaded path."""
    from tflite_gemm_models import fully_connected_ref

    w = (rng.standard_normal((1056, 1000)) * 0.03).astype(np.float32)
    b = rng.standard_normal(1056).astype(np.float32)
    x = rng.standard_normal((1, 4, 1000)).astype(np.float32)
    delegate = native.load(backend=backend)
    it = Interpreter(model_content=fully_connected_model([1, 4, 1000], w, b), experimental_delegates=[delegate])
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, fully_connected_ref(x, w, b), rtol=1e-4, atol=1e-4)
    assert native.stats(delegate)["device_weight_bytes"] == 1056 * 1000 * 4 + 1056 * 4
