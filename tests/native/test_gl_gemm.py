"""GEMM-shaped ops on the GL backend (llvmpipe in CI) vs float64 NumPy, where GL differs from OpenCL: the GLSL
tiled GEMM's tile configs with split-K (the gemm_tiles option), and half-stored weights read as 32-bit words. The tests
every GPU backend shares (transposed / broadcast operands, convs, Winograd transforms) are in test_gpu_gemm.py."""
from __future__ import annotations

import numpy as np
import pytest

from harness import assert_close, run
from tflite_gemm_models import fully_connected_model, fully_connected_ref

TILE_CONFIGS = ("64x64", "128x64", "128x128")


def _run(model: bytes, inputs: dict[str, np.ndarray], **opts) -> np.ndarray:
    result = run(model, inputs, backend="gl", **opts)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert result.stats["partitions"] == 1
    return result.outputs["y"]


@pytest.mark.parametrize("config", [*TILE_CONFIGS, "64x64/3", "128x128/2"])
@pytest.mark.parametrize("m,k,n", [(128, 64, 128), (70, 37, 45), (3, 200, 130)])
def test_fully_connected_every_tile_config_and_split(rng, config, m, k, n):
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    got = _run(fully_connected_model(x.shape, w, b, "relu"), {"x": x}, gemm_tiles=config)
    assert_close(got, fully_connected_ref(x, w, b, "relu"), rtol=1e-5)


@pytest.mark.parametrize("n,k", [(72, 96), (33, 37)])
def test_weights_fp16_reads_half_words(rng, n, k):
    """Half-stored packed weights (B as 32-bit words, unpackHalf2x16): exactly the fp32 GEMM on half-rounded
    weights; odd N * K puts the last weight in the low half of a partial word."""
    x = rng.standard_normal((1, 100, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    got = _run(fully_connected_model(x.shape, w, b), {"x": x}, weights_fp16=True)
    assert_close(got, fully_connected_ref(x, w.astype(np.float16).astype(np.float32), b), rtol=1e-5)
    fp32 = fully_connected_ref(x, w, b)
    err = float(np.abs(got - fp32).max() / np.abs(fp32).max())
    assert 1e-5 < err < 2e-3, err  # it really is half storage