"""Residual ADDs folded into the epilogue of the op that produces one of their operands (OpenCL on PoCL and GL on
llvmpipe in CI): FULLY_CONNECTED, CONV_2D (tiled implicit GEMM) and SdConv2DWinograd (OpenCL only so far: its GL
output transform takes no residual) write ADD(op output, R) directly, split-K GEMMs add R in their reduce, and the ADD
launches nothing. R may have the output's shape, one row per image (SD's time
embedding, [B, 1, 1, C]) or one row ([C]), or be a column SLICE of a wider tensor (cfg batch 2's merged
time-embedding projections: the epilogue reads the SLICE's input with its row stride, the SLICE launches nothing).
Cases that must keep their ADD launch: a fused activation on the ADD, an op output with a second reader, an R
produced after the op."""
from __future__ import annotations

import json

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S
from ai_edge_litert.interpreter import load_delegate

from harness import assert_close, make_interpreter
from sdconvert.ops.conv2d_winograd import SPEC as WINO_SPEC, Conv2DWinogradAttrs
from sdlite import native
from tflite_gemm_models import OpGraphBuilder, conv2d_ref

RELU = S.ActivationFunctionType.RELU


@pytest.fixture(params=["opencl", "gl"])
def backend(request) -> str:
    return request.param


def _add(g: OpGraphBuilder, a: int, b: int, shape, name: str, act: int = 0) -> int:
    o = S.AddOptionsT()
    o.fusedActivationFunction = act
    y = g.tensor(name, list(shape))
    g.builtin(S.BuiltinOperator.ADD, S.BuiltinOptions.AddOptions, o, [a, b], [y])
    return y


def _fc(g: OpGraphBuilder, x: int, w: np.ndarray, b: np.ndarray | None, shape, name: str, act: int = 0) -> int:
    o = S.FullyConnectedOptionsT()
    o.fusedActivationFunction = act
    o.keepNumDims = len(shape) == 3
    y = g.tensor(name, list(shape))
    ins = [x, g.const(f"{name}_w", w)] + ([g.const(f"{name}_b", b)] if b is not None else [-1])
    g.builtin(S.BuiltinOperator.FULLY_CONNECTED, S.BuiltinOptions.FullyConnectedOptions, o, ins, [y])
    return y


def _conv(g: OpGraphBuilder, x: int, w: np.ndarray, b: np.ndarray, shape, name: str) -> int:
    o = S.Conv2DOptionsT()
    o.padding = S.Padding.SAME
    o.strideH = o.strideW = o.dilationHFactor = o.dilationWFactor = 1
    y = g.tensor(name, list(shape))
    g.builtin(S.BuiltinOperator.CONV_2D, S.BuiltinOptions.Conv2DOptions, o, [x, g.const(f"{name}_w", w),
                                                                            g.const(f"{name}_b", b)], [y])
    return y


def _wino(g: OpGraphBuilder, x: int, w: np.ndarray, b: np.ndarray, shape, name: str, tile: int) -> int:
    y = g.tensor(name, list(shape))
    options = WINO_SPEC.encode(Conv2DWinogradAttrs(tile=tile, padding="SAME", activation="none"))
    g.custom("SdConv2DWinograd", [x, g.const(f"{name}_w", w), g.const(f"{name}_b", b)], [y], options)
    return y


def _run(model: bytes, tmp_path, options: dict[str, str] | None = None, backend: str = "opencl", **feeds):
    """``options``: more delegate options (e.g. ``{"gemm_tiles": "64x64/2"}``)."""
    profile = tmp_path / "profile.json"
    # the cost model's plans (gemm_autotune's host-timed pick could differ from run to run on a busy machine)
    delegate = load_delegate(str(native.delegate_path()),
                             {"backend": backend, "profile_path": str(profile), "gemm_autotune": "0", **(options or {})})
    runner = make_interpreter(model, delegate).get_signature_runner("serving_default")
    out = runner(**feeds)
    stats = native.stats(delegate)
    assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
    return out, json.loads(profile.read_text())["nodes"]


def _add_launches(nodes) -> list[bool]:
    return [bool(n["kernels"]) for n in nodes if n["op"] == "ADD"]


def _kernels(nodes, op: str) -> list[str]:
    return [k["name"] for n in nodes if n["op"] == op for k in n["kernels"]]


def _slice(g: OpGraphBuilder, x: int, begin, size, name: str) -> int:
    y = g.tensor(name, list(size))
    ins = [x, g.const(f"{name}_begin", np.asarray(begin, np.int32)), g.const(f"{name}_size", np.asarray(size, np.int32))]
    g.builtin(S.BuiltinOperator.SLICE, S.BuiltinOptions.SliceOptions, S.SliceOptionsT(), ins, [y])
    return y


def _reshape(g: OpGraphBuilder, x: int, shape, name: str) -> int:
    o = S.ReshapeOptionsT()
    o.newShape = list(shape)
    y = g.tensor(name, list(shape))
    g.builtin(S.BuiltinOperator.RESHAPE, S.BuiltinOptions.ReshapeOptions, o,
              [x, g.const(f"{name}_shape", np.asarray(shape, np.int32))], [y])
    return y


def _rand(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("act16", [False, True])
@pytest.mark.parametrize("tiles", ["", "64x64/4", "16x64/2"])
def test_fc_residual(rng, tmp_path, backend, tiles, act16):
    """[M, N] FC output (keepNumDims off) + a [1, M, N] R, with the FC's bias and RELU applied before R; forced
    split-K plans put R in the reduce. act16: half activation storage (R, the partials and the output as half)."""
    m, k, n = 20, 192, 40
    g = OpGraphBuilder()
    x, r = g.input("x", [1, m, k]), g.input("r", [1, m, n])
    w, b = _rand(rng, n, k), _rand(rng, n)
    y = _fc(g, x, w, b, [m, n], "f", act=RELU)
    g.output(_add(g, y, r, [1, m, n], "y"))
    xv, rv = _rand(rng, 1, m, k), _rand(rng, 1, m, n)
    options = {**({"gemm_tiles": tiles} if tiles else {}), **({"activations_fp16": "1"} if act16 else {})}
    out, nodes = _run(g.build(), tmp_path, options, backend, x=xv, r=rv)
    want = np.maximum(xv[0].astype(np.float64) @ w.T + b, 0.0) + rv[0]
    assert_close(out["y"], want[None].astype(np.float32), rtol=3e-3 if act16 else 1e-5)
    assert _add_launches(nodes) == [False]
    assert ("gemm_splitk_reduce" in _kernels(nodes, "FULLY_CONNECTED")) == ("/" in tiles)


@pytest.mark.parametrize("r_shape", [(2, 12, 10, 32), (2, 1, 1, 32), (32,)])
@pytest.mark.parametrize("kind", ["conv", "conv/2", "wino2", "wino4", "conv:act16", "conv/2:act16"])
def test_conv_residual(rng, tmp_path, backend, kind, r_shape):
    """A 3x3 conv (tiled implicit GEMM, or split in two along K, or Winograd F2 / F4) + R of the output's shape,
    one row per image (the time embedding) or one row; ":act16" with half activation storage."""
    kind, act16 = kind.split(":")[0], kind.endswith(":act16")
    shape = (2, 12, 10, 32)
    g = OpGraphBuilder()
    x = g.input("x", [2, 12, 10, 16])
    r = g.input("r", list(r_shape))
    w, b = _rand(rng, 32, 3, 3, 16), _rand(rng, 32)
    y = _wino(g, x, w, b, shape, "c", int(kind[-1])) if kind.startswith("wino") else _conv(g, x, w, b, shape, "c")
    g.output(_add(g, r, y, shape, "y"))  # R first: the op's operand may be either side
    xv, rv = _rand(rng, 2, 12, 10, 16), _rand(rng, *r_shape)
    options = {**({"gemm_tiles": "64x64/2"} if kind == "conv/2" else {}), **({"activations_fp16": "1"} if act16 else {})}
    out, nodes = _run(g.build(), tmp_path, options, backend, x=xv, r=rv)
    assert_close(out["y"], conv2d_ref(xv, w, b) + rv, rtol=3e-3 if act16 else 1e-4)
    assert _add_launches(nodes) == [False]  # every kernel family takes the residual on both backends
    op = "SdConv2DWinograd" if kind.startswith("wino") else "CONV_2D"
    names = _kernels(nodes, op)
    assert ("gemm_splitk_reduce" in names) == (kind == "conv/2")
    assert any(k.startswith("winograd_output") for k in names) == kind.startswith("wino")


def test_adds_that_keep_their_launch(rng, tmp_path, backend):
    g = OpGraphBuilder()
    x, r = g.input("x", [1, 8, 32]), g.input("r", [1, 8, 32])
    w1, w2, w3 = _rand(rng, 32, 32), _rand(rng, 32, 32), _rand(rng, 32, 32)
    a = _fc(g, x, w1, None, [1, 8, 32], "a")
    ya = _add(g, a, r, [1, 8, 32], "ya", act=RELU)       # fused activation on the ADD
    bt = _fc(g, x, w2, None, [1, 8, 32], "b")
    yb = _add(g, bt, r, [1, 8, 32], "yb")                 # b is read twice (also by yb2)
    yb2 = _add(g, bt, ya, [1, 8, 32], "yb2")
    c = _fc(g, x, w3, None, [1, 8, 32], "c")
    late = _add(g, r, r, [1, 8, 32], "late")             # R made after c (and not by a GEMM-shaped op)
    yc = _add(g, c, late, [1, 8, 32], "yc")
    for t in (yb, yb2, yc):
        g.output(t)
    xv, rv = _rand(rng, 1, 8, 32), _rand(rng, 1, 8, 32)
    out, nodes = _run(g.build(), tmp_path, None, backend, x=xv, r=rv)
    x64, r64 = xv.astype(np.float64), rv.astype(np.float64)
    av, bv, cv = x64 @ w1.T, x64 @ w2.T, x64 @ w3.T
    yav = np.maximum(av + r64, 0.0)
    assert_close(out["yb"], (bv + r64).astype(np.float32), rtol=1e-5)
    assert_close(out["yb2"], (bv + yav).astype(np.float32), rtol=1e-5)
    assert_close(out["yc"], (cv + 2 * r64).astype(np.float32), rtol=1e-5)
    assert _add_launches(nodes) == [True] * 5  # ya, yb, yb2, late, yc


def test_either_operand_and_a_chain(rng, tmp_path, backend):
    """ADD(c, d) of two FC outputs, c first: d's epilogue adds c; then ADD(that, e) with e = FC after it: e's
    epilogue adds the first sum (a residual chain, as in SD's transformer blocks)."""
    g = OpGraphBuilder()
    x = g.input("x", [1, 8, 32])
    w1, w2, w3 = _rand(rng, 32, 32), _rand(rng, 32, 32), _rand(rng, 32, 32)
    c = _fc(g, x, w1, None, [1, 8, 32], "c")
    d = _fc(g, x, w2, None, [1, 8, 32], "d")
    s1 = _add(g, c, d, [1, 8, 32], "s1")
    e = _fc(g, s1, w3, None, [1, 8, 32], "e")
    g.output(_add(g, s1, e, [1, 8, 32], "y"))
    xv = _rand(rng, 1, 8, 32)
    out, nodes = _run(g.build(), tmp_path, None, backend, x=xv)
    x64 = xv.astype(np.float64)
    s1v = x64 @ w1.T + x64 @ w2.T
    assert_close(out["y"], (s1v + s1v @ w3.T).astype(np.float32), rtol=1e-5)
    assert _add_launches(nodes) == [False, False]


def test_fuse_epilogues_option(rng, tmp_path, backend):
    """fuse_epilogues=0 keeps every ADD as its own launch (A/B benchmarks), with the same result; a bad value is
    rejected when the delegate is created."""
    g = OpGraphBuilder()
    x, r = g.input("x", [1, 8, 32]), g.input("r", [1, 8, 32])
    w = _rand(rng, 32, 32)
    g.output(_add(g, _fc(g, x, w, None, [1, 8, 32], "f"), r, [1, 8, 32], "y"))
    model = g.build()
    xv, rv = _rand(rng, 1, 8, 32), _rand(rng, 1, 8, 32)
    want = (xv.astype(np.float64) @ w.T + rv).astype(np.float32)
    for fuse in (True, False):
        profile = tmp_path / f"p{int(fuse)}.json"
        delegate = native.load(backend=backend, profile_path=str(profile), fuse_epilogues=fuse)
        out = make_interpreter(model, delegate).get_signature_runner("serving_default")(x=xv, r=rv)
        assert_close(out["y"], want, rtol=1e-5)
        assert _add_launches(json.loads(profile.read_text())["nodes"]) == [not fuse]
    with pytest.raises(ValueError, match="option fuse_epilogues='yes' must be 0 or 1"):
        load_delegate(str(native.delegate_path()), {"backend": backend, "fuse_epilogues": "yes"})
    with pytest.raises(native.NativeDelegateError, match="fuse_epilogues must be a bool"):
        native.load(backend=backend, fuse_epilogues="1")


@pytest.mark.parametrize("slice_is_output", [False, True])
@pytest.mark.parametrize("kind", ["conv", "conv/2", "wino4"])
def test_strided_slice_residual(rng, tmp_path, backend, kind, slice_is_output):
    """cfg batch 2's time embedding: FC [2, 24] -> [2, 96], SLICE columns 32..63 ([2, 32], not one contiguous run),
    RESHAPE [2, 1, 1, 32], ADD to a conv's [2, H, W, 32] output. The conv's epilogue reads the FC output at column
    32 with row stride 96: neither the ADD nor the SLICE launches. When the SLICE's output is also a partition
    output it keeps its launch and the ADD folds with the SLICE's own output as R."""
    _strided_case(rng, tmp_path, backend, kind, slice_is_output, blocks=False)


def test_column_block_residual_is_not_read_strided(rng, tmp_path, backend):
    """A bias-free FC whose readers are all SLICEs of equal column blocks writes [3][2][32] (the split GEMM of
    `sdconvert --fuse`'s q/k/v), so its block 1 is NOT columns 32..63 of [2, 96] rows: the ADD folds with the
    block's view as R (a contiguous run), never the strided read of the FC output."""
    _strided_case(rng, tmp_path, backend, "conv", False, blocks=True)


def _strided_case(rng, tmp_path, backend, kind, slice_is_output, blocks):
    shape = (2, 12, 10, 32)
    g = OpGraphBuilder()
    e, x = g.input("e", [2, 24]), g.input("x", [2, 12, 10, 16])
    we, be = _rand(rng, 96, 24), (np.zeros(96, np.float32) if blocks else _rand(rng, 96))
    temb = _fc(g, e, we, None if blocks else be, [2, 96], "temb")
    s = _slice(g, temb, [0, 32], [2, 32], "s")
    other = _slice(g, temb, [0, 64], [2, 32], "other")  # the FC output's second reader, like SD's 22 slices
    if blocks:  # every reader a block, none a partition output: the FC's output is split
        first = _slice(g, temb, [0, 0], [2, 32], "first")
        other = _add(g, other, first, [2, 32], "other_plus_first")
    r = _reshape(g, s, [2, 1, 1, 32], "r")
    w, b = _rand(rng, 32, 3, 3, 16), _rand(rng, 32)
    y = _wino(g, x, w, b, shape, "c", 4) if kind == "wino4" else _conv(g, x, w, b, shape, "c")
    g.output(_add(g, y, r, shape, "y"))
    g.output(other)
    other_name = "other_plus_first" if blocks else "other"
    if slice_is_output:
        g.output(s)
    ev, xv = _rand(rng, 2, 24), _rand(rng, 2, 12, 10, 16)
    out, nodes = _run(g.build(), tmp_path, {"gemm_tiles": "64x64/2"} if kind == "conv/2" else None, backend, e=ev,
                      x=xv)
    t = ev.astype(np.float64) @ we.T + be
    assert_close(out["y"], conv2d_ref(xv, w, b) + t[:, None, None, 32:64].astype(np.float32), rtol=1e-4)
    want_other = t[:, 64:] + (t[:, :32] if blocks else 0.0)
    assert_close(out[other_name], want_other.astype(np.float32), rtol=1e-5)
    if slice_is_output:
        assert_close(out["s"], t[:, 32:64].astype(np.float32), rtol=1e-5)
    slice_launches = [bool(n["kernels"]) for n in nodes if n["op"] == "SLICE"]
    if blocks:  # the blocks are views of the split output; R is block 1's view
        assert _add_launches(nodes) == [True, False]  # other + first, then the residual ADD
        assert slice_launches == [False, False, False]
    else:
        assert _add_launches(nodes) == [False]
        assert slice_launches == [slice_is_output, True]  # `other` is a partition output: copied
