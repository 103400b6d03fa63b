"""GEMM-shaped ops that every GPU backend runs the same way (OpenCL on PoCL, GL on llvmpipe in CI) vs float64
NumPy: weights read in place, transposed and broadcast BATCH_MATMUL operands, the tiled and generic convs, half-stored
conv weights, and SdConv2DWinograd's transform kernels around the batched GEMM. Backend-specific configs (OpenCL's
skinny GEMM and split-K planning, GL's half words) stay in test_opencl_gemm.py / test_gl_gemm.py."""
from __future__ import annotations

import numpy as np
import pytest

from harness import assert_close, run
from sdconvert.ops.conv2d_winograd import SPEC as WINOGRAD, Conv2DWinogradAttrs
from sdconvert.winograd.accuracy import random_problem
from sdconvert.winograd.reference import direct_conv2d, winograd_error_bound
from tflite_gemm_models import (batch_matmul_model, batch_matmul_ref, conv2d_model, conv2d_ref,
                                fully_connected_model, fully_connected_ref, winograd_model)


@pytest.fixture(params=["opencl", "gl"])
def backend(request) -> str:
    return request.param


def _run(backend: str, model: bytes, inputs: dict[str, np.ndarray], **opts) -> np.ndarray:
    result = run(model, inputs, backend=backend, **opts)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert result.stats["partitions"] == 1
    return result.outputs["y"]


def test_fully_connected_weights_as_input_read_in_place(rng, backend):
    """Non-constant weights (e.g. a DEQUANTIZE output) are read through their N x K strides, not packed."""
    x = rng.standard_normal((2, 50, 24)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    got = _run(backend, fully_connected_model(x.shape, w, None, const_weights=False), {"x": x, "w": w})
    assert_close(got, fully_connected_ref(x, w, None), rtol=1e-5)


@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, False), (False, True), (True, True)])
def test_batch_matmul_transposes(rng, backend, adj_x, adj_y):
    m, k, n = 67, 40, 77
    a = rng.standard_normal((3, k, m) if adj_x else (3, m, k)).astype(np.float32)
    b = rng.standard_normal((3, n, k) if adj_y else (3, k, n)).astype(np.float32)
    got = _run(backend, batch_matmul_model(a.shape, b.shape, (3, m, n), adj_x, adj_y), {"a": a, "b": b})
    assert_close(got, batch_matmul_ref(a, b, adj_x, adj_y), rtol=1e-5)


@pytest.mark.parametrize("a_batch,b_batch", [(1, 4), (4, 1)])
def test_batch_matmul_broadcasts_a_single_batch(rng, backend, a_batch, b_batch):
    a = rng.standard_normal((a_batch, 130, 18)).astype(np.float32)
    b = rng.standard_normal((b_batch, 18, 70)).astype(np.float32)
    got = _run(backend, batch_matmul_model(a.shape, b.shape, (4, 130, 70), False, False), {"a": a, "b": b})
    assert_close(got, batch_matmul_ref(a, b, False, False), rtol=1e-5)


@pytest.mark.parametrize("config", ["64x64", "128x64", "128x128", "64x64/3"])
@pytest.mark.parametrize("x_shape,co,kernel,stride,dilation,padding", [
    ((2, 9, 11, 32), 40, 3, 1, 1, "SAME"),    # tiled implicit GEMM, edge tiles in M and N
    ((1, 12, 10, 16), 24, 3, 2, 1, "SAME"),   # stride 2 (SAME pads bottom/right only)
    ((1, 11, 13, 48), 8, 3, 1, 2, "VALID"),   # dilation
    ((1, 8, 8, 64), 130, 1, 1, 1, "SAME"),    # 1x1: a pure GEMM over NHWC
    ((1, 10, 9, 4), 20, 3, 1, 1, "SAME"),     # Ci % 16 != 0: the generic conv2d_igemm fallback
])
def test_conv2d_matches_reference(rng, backend, config, x_shape, co, kernel, stride, dilation, padding):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((co, kernel, kernel, x_shape[3])).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    got = _run(backend, conv2d_model(x.shape, w, b, stride, dilation, padding, "relu6"), {"x": x}, gemm_tiles=config)
    assert_close(got, conv2d_ref(x, w, b, stride, dilation, padding, "relu6"), rtol=1e-5)


def test_conv2d_without_bias(rng, backend):
    x = rng.standard_normal((1, 7, 7, 16)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 16)).astype(np.float32)
    got = _run(backend, conv2d_model(x.shape, w, None), {"x": x})
    assert_close(got, conv2d_ref(x, w, None), rtol=1e-5)


def test_weights_fp16_conv(rng, backend):
    """Half-stored packed conv weights: exactly the fp32 conv on half-rounded weights."""
    x = rng.standard_normal((1, 12, 12, 32)).astype(np.float32)
    w = rng.standard_normal((24, 3, 3, 32)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    got = _run(backend, conv2d_model(x.shape, w, b), {"x": x}, weights_fp16=True)
    assert_close(got, conv2d_ref(x, w.astype(np.float16).astype(np.float32), b), rtol=1e-5)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("tile", [2, 4, 6])
def test_winograd_matches_direct_within_bound(backend, tile, padding):
    x, w, b = random_problem((2, 38, 35, 24, 40), seed=tile)  # >= 64 tiles (GL runs fewer direct), edge tiles
    attrs = Conv2DWinogradAttrs(tile=tile, padding=padding, activation="none")
    result = run(winograd_model(x.shape, w, b, WINOGRAD.encode(attrs), padding), {"x": x}, backend=backend)
    assert result.stats["claimed_by_op"] == {"SdConv2DWinograd": 1}
    got, want = result.outputs["y"], direct_conv2d(x, w, b, padding)
    assert got.shape == want.shape
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, tile, padding)).all()
    # V [a*a, T, Ci] + M [a*a, T, Co] in the arena (T = 2 images x tiles): the Winograd path ran
    ho, wo = want.shape[1:3]
    tiles = 2 * -(-ho // tile) * -(-wo // tile)
    assert tiles >= 64
    assert result.stats["max_node_scratch_bytes"] == (tile + 2) ** 2 * tiles * (24 + 40) * 4


@pytest.mark.parametrize("activation", ["relu", "relu6", "tanh"])
def test_winograd_activation(backend, activation):
    x, w, b = random_problem((1, 34, 34, 16, 20), seed=3)  # F4: 81 tiles
    attrs = Conv2DWinogradAttrs(tile=4, padding="SAME", activation=activation)
    got = _run(backend, winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)), {"x": x})
    want = direct_conv2d(x, w, b, "SAME", activation)
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, 4, "SAME")).all()  # activations: 1-Lipschitz
    assert np.abs(got - direct_conv2d(x, w, b, "SAME")).max() > 0.1  # the activation was applied
