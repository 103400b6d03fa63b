"""SdConv2DWinograd through the TFLite interpreter + sdgpu delegate vs float64 direct conv: the CPU backend, and
chained convs with a residual ADD on every backend (the GPU backends fold the ADD into the output transform)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_cases import mark_gl_gemm_gap, winograd_tiles
from harness import make_interpreter, run
from sdconvert.ops.conv2d_winograd import SPEC, Conv2DWinogradAttrs
from sdconvert.winograd.accuracy import random_problem
from sdconvert.winograd.buffers import kernel_buffers
from sdconvert.winograd.convspec import ConvSpec
from sdconvert.winograd.reference import direct_conv2d, winograd_error_bound
from sdlite import native
from tflite_models import GraphBuilder, flex


def conv_model(x_shape: tuple[int, ...], w: np.ndarray, b: np.ndarray, options: bytes, padding: str = "SAME",
               chained: bool = False) -> bytes:
    """x -> SdConv2DWinograd(w, b) [-> ADD x -> SdConv2DWinograd(w, b)] -> y."""
    n, h, wd, _ = x_shape
    ho, wo = (h, wd) if padding == "SAME" else (h - 2, wd - 2)
    g = GraphBuilder()
    x = g.input("x", x_shape)
    wt = g.const("filter", w.astype(np.float32))
    bt = g.const("bias", b.astype(np.float32))
    y = g.tensor("y", [n, ho, wo, w.shape[0]])
    g.custom("SdConv2DWinograd", [x, wt, bt], [y], options)
    if chained:
        s = g.tensor("s", [n, ho, wo, w.shape[0]])
        g.add(y, x, s)
        y2 = g.tensor("y2", [n, ho, wo, w.shape[0]])
        g.custom("SdConv2DWinograd", [s, wt, bt], [y2], options)
        y = y2
    g.output(y)
    return g.build()


def _opts(tile: int, padding: str = "SAME", activation: str = "none") -> bytes:
    return SPEC.encode(Conv2DWinogradAttrs(tile=tile, padding=padding, activation=activation))


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("tile", [2, 4, 6])
def test_single_conv_matches_direct_within_bound(tile: int, padding: str) -> None:
    shape = (2, 13, 11, 24, 40)
    x, w, b = random_problem(shape, seed=tile)
    result = run(conv_model(x.shape, w, b, _opts(tile, padding), padding), {"x": x}, num_threads=2)
    got = result.outputs["y"]
    want = direct_conv2d(x, w, b, padding)
    assert got.shape == want.shape
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, tile, padding)).all()
    assert result.stats["claimed_by_op"] == {"SdConv2DWinograd": 1}
    scratch = kernel_buffers(ConvSpec("c", *shape, padding=padding), tile).scratch * 4
    assert result.stats["max_node_scratch_bytes"] == scratch


@pytest.mark.parametrize("backend,tile", [("cpu", 4), ("opencl", 4), ("opencl", 2), ("gl", 4), ("gl", 2)])
def test_chained_convs_and_repeated_invokes(request, tmp_path, backend: str, tile: int) -> None:
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles((1, 16, 16), tile))
    x, w, b = random_problem((1, 16, 16, 32, 32), seed=9)
    profile = tmp_path / "profile.json"
    gpu = {} if backend == "cpu" else {"profile_path": str(profile)}
    delegate = native.load(backend=backend, num_threads=2, **gpu)
    interp = make_interpreter(conv_model(x.shape, w, b, _opts(tile, activation="relu"), chained=True), delegate)
    runner = interp.get_signature_runner("serving_default")
    first = runner(x=x)["y2"]
    y1 = direct_conv2d(x, w, b, "SAME", "relu")
    want = direct_conv2d(y1 + x, w, b, "SAME", "relu")
    np.testing.assert_allclose(first, want, rtol=0, atol=5e-5 * np.abs(want).max())
    x2 = x[:, ::-1].copy()
    second = runner(x=x2)["y2"]                  # cached transformed weights, new activations
    y1 = direct_conv2d(x2, w, b, "SAME", "relu")
    np.testing.assert_allclose(second, direct_conv2d(y1 + x2, w, b, "SAME", "relu"), rtol=0,
                               atol=5e-5 * np.abs(want).max())
    np.testing.assert_array_equal(runner(x=x)["y2"], first)
    stats = native.stats(delegate)
    if backend == "cpu":
        assert stats["claimed_by_op"] == {"SdConv2DWinograd": 2}
        return
    assert stats["claimed_by_op"] == {"SdConv2DWinograd": 2, "ADD": 1} and stats["partitions"] == 1
    nodes = json.loads(profile.read_text())["nodes"]
    assert [bool(n["kernels"]) for n in nodes if n["op"] == "ADD"] == [False]  # folded into the first conv
    outputs = [n["kernels"][-1]["name"] for n in nodes if n["op"] == "SdConv2DWinograd"]
    assert outputs == [f"winograd_output_f{tile}"] * 2


def test_native_options_parser_agrees_with_the_python_spec() -> None:
    for tile in (2, 4, 6):
        assert native.check_op_options("SdConv2DWinograd", _opts(tile, "VALID", "relu6")) == (True, "")
    ok, msg = native.check_op_options("SdConv2DWinograd", flex({"tile": 3, "padding": "SAME", "activation": "none"}))
    assert not ok and msg == "SdConv2DWinograd: attribute 'tile' must be 2, 4 or 6, got 3"
    ok, msg = native.check_op_options("SdConv2DWinograd", flex({"tile": 4, "padding": "FULL", "activation": "none"}))
    assert not ok and "padding" in msg and "FULL" in msg
    ok, msg = native.check_op_options("SdConv2DWinograd",
                                      flex({"tile": 4, "padding": "SAME", "activation": "none", "stride": 2}))
    assert not ok and "stride" in msg


def test_bad_filter_shape_is_declined_not_crashed() -> None:
    x, w, b = random_problem((1, 8, 8, 8, 8), seed=1)
    bad = np.ascontiguousarray(w[:, :, :, :4])                      # Cin 4 != input channels 8
    delegate = native.load(num_threads=1, log_level="silent")
    interp = make_interpreter(conv_model(x.shape, bad, b, _opts(4)), delegate)
    stats = native.stats(delegate)
    assert stats["claimed_nodes"] == 0
    assert any("filter must be [Cout,3,3,8]" in d["reason"] for d in stats["declined"])
    del interp
