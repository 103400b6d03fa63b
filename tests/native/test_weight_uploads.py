"""The first invoke's weight uploads through host-visible staging slots (delegate option weight_uploads;
backends/opencl/host_staging_ring.h), on PoCL: with ``ring`` every device-made weight goes through the slots (stats
upload_ring_bytes) -- a weight larger than one 16 MiB slot in several chunks, more weights than slots reusing them --
and the outputs are bit-identical to ``direct``'s; ``auto`` on PoCL (a CPU device: unified host memory) and
``direct`` never use them; the tiny fused + Winograd UNet runs the same both ways."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from harness import signature_inputs
from sdlite import native
from tflite_gemm_models import fully_connected_model, fully_connected_ref

SLOT_BYTES = 16 << 20


def _run(model: bytes | Path, inputs: dict[str, np.ndarray], **options) -> tuple[dict[str, np.ndarray], dict]:
    delegate = native.load(backend="opencl", gemm_autotune=False, cache_dir="none", **options)
    source = {"model_path": str(model)} if isinstance(model, Path) else {"model_content": model}
    interpreter = Interpreter(**source, experimental_delegates=[delegate])
    out = interpreter.get_signature_runner("serving_default")(**inputs)
    return out, native.stats(delegate)


@pytest.fixture(scope="module")
def large_fc() -> tuple[bytes, dict[str, np.ndarray], np.ndarray]:
    """A FULLY_CONNECTED whose 2304 x 2048 float weights (18.9 MB) go up as two chunks (one slot is 16 MiB)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 8, 2048)).astype(np.float32)
    w = (rng.standard_normal((2304, 2048)) / 45).astype(np.float32)
    b = rng.standard_normal(2304).astype(np.float32)
    return fully_connected_model(x.shape, w, b), {"x": x}, fully_connected_ref(x, w, b)


def test_large_weights_go_through_the_ring_with_the_same_outputs(large_fc) -> None:
    model, inputs, ref = large_fc
    direct, direct_stats = _run(model, inputs, weight_uploads="direct")
    ring, stats = _run(model, inputs, weight_uploads="ring")
    (name,) = direct
    assert stats["weights_on_device"] >= 1 and stats["partitions"] == 1, stats
    assert stats["upload_ring_bytes"] >= 2304 * 2048 * 4 > SLOT_BYTES, stats
    assert direct_stats["upload_ring_bytes"] == 0
    assert np.array_equal(ring[name], direct[name])
    np.testing.assert_allclose(ring[name], ref, rtol=1e-4, atol=1e-4)


def test_auto_is_direct_on_a_device_sharing_host_memory(large_fc) -> None:
    model, inputs, _ = large_fc
    _, stats = _run(model, inputs)
    assert stats["upload_ring_bytes"] == 0  # PoCL's CPU device: unified host memory


def test_the_fused_winograd_unet_is_the_same_through_the_ring(tiny_fused_winograd_models: Path, rng) -> None:
    path = tiny_fused_winograd_models / "unet.tflite"
    inputs = signature_inputs(Interpreter(model_path=str(path)).get_signature_runner("serving_default"), rng,
                              timestep=500.0)
    direct, _ = _run(path, inputs, weight_uploads="direct")
    ring, stats = _run(path, inputs, weight_uploads="ring")
    assert stats["upload_ring_bytes"] > 0 and stats["weights_on_device"] > 10, stats
    for name in direct:
        assert np.array_equal(ring[name], direct[name]), name


def test_a_bad_value_is_rejected() -> None:
    with pytest.raises(native.NativeDelegateError, match="weight_uploads"):
        native.load(backend="opencl", weight_uploads="pinned")
