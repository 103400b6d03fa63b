"""SdGelu(gated) folded into the FULLY_CONNECTED that feeds it (OpenCL on PoCL and GL on llvmpipe in CI): the FC's weights and bias are
re-packed with (value, gate) columns interleaved and the gated twins of its kernels (NAME_gg: tiled GEMMs, the
skinny 16-row GEMM, the split-K reduce) write v * gelu(g), so the GELU node launches nothing. Cases that keep the GELU launch: an
FC output with a second reader, an odd number of value/gate column pairs per float4 (N % 4 != 0), fuse_epilogues=0.
A RESHAPE between the FC and the GELU (the cfg-batch-2 UNet: [2*S, 2F] -> [2, S, 2F]) is folded away with them."""
from __future__ import annotations

import json

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from harness import assert_close, make_interpreter
from sdconvert.ops import gelu as G
from sdlite import native
from tflite_gemm_models import OpGraphBuilder
from test_opencl_residual import _add, _fc, _kernels, _rand, _run, backend  # noqa: F401 (fixture)


def _gelu(g: OpGraphBuilder, x: int, shape, name: str, approximate: str) -> int:
    y = g.tensor(name, list(shape))
    g.custom("SdGelu", [x], [y], G.SPEC.encode(G.GeluAttrs(approximate=approximate, gated=True)))
    return y


def _want(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, approximate: str) -> np.ndarray:
    h = x.astype(np.float64) @ w.T.astype(np.float64) + (0.0 if b is None else b)
    return G.reference([h.astype(np.float32)], G.GeluAttrs(approximate=approximate, gated=True))


@pytest.mark.parametrize("approximate", ["none", "tanh", "quick"])
@pytest.mark.parametrize("tiles,m,f,act16", [("", 40, 24, False), ("64x64/2", 40, 30, False), ("16x64", 9, 24, False),
                                             ("16x64/2", 9, 34, False), ("", 40, 24, True), ("64x64/2", 40, 30, True),
                                             ("16x64/2", 9, 34, True)])
def test_gated_gelu_in_the_fc_epilogue(rng, tmp_path, backend, approximate, tiles, m, f, act16):
    """[1, m, K] -> FC (bias) -> [1, m, 2F] -> SdGelu(gated) -> [1, m, F]: the cost model's plan, a split-K plan (the
    reduce applies the GELU), the skinny kernel with and without split-K; F = 30 and 34 leave a partial column tile.
    act16: half activation storage (the partials and the output as half)."""
    k = 192
    g = OpGraphBuilder()
    x = g.input("x", [1, m, k])
    w, b = _rand(rng, 2 * f, k) * 0.2, _rand(rng, 2 * f)
    h = _fc(g, x, w, b, [1, m, 2 * f], "ff")
    g.output(_gelu(g, h, [1, m, f], "y", approximate))
    xv = _rand(rng, 1, m, k)
    options = {**({"gemm_tiles": tiles} if tiles else {}), **({"activations_fp16": "1"} if act16 else {})}
    out, nodes = _run(g.build(), tmp_path, options, backend, x=xv)
    assert_close(out["y"], _want(xv, w, b, approximate), rtol=3e-3 if act16 else 1e-5)
    assert _kernels(nodes, "SdGelu") == []
    names = _kernels(nodes, "FULLY_CONNECTED")  # the gated twins (NAME_gg) of the planned kernels
    assert names and all(n.endswith("_gg") for n in names)
    assert ("gemm_splitk_reduce_gg" in names) == ("/" in tiles)
    if tiles:  # forced; unforced, the cost model's pick for the shape is whichever it is
        assert ("gemm_t16x64_gg" in names) == tiles.startswith("16x64")


def test_gated_gelus_that_keep_their_launch(rng, tmp_path, backend):
    """FC a (no bias) folds; FC b's output is also read by an ADD; FC c has 2F = 6 columns (pairs would straddle a
    float4)."""
    g = OpGraphBuilder()
    x = g.input("x", [1, 8, 32])
    wa, wb, wc = _rand(rng, 16, 32), _rand(rng, 16, 32), _rand(rng, 6, 32)
    ya = _gelu(g, _fc(g, x, wa, None, [1, 8, 16], "a"), [1, 8, 8], "ya", "none")
    hb = _fc(g, x, wb, None, [1, 8, 16], "b")
    yb = _gelu(g, hb, [1, 8, 8], "yb", "tanh")
    sb = _add(g, hb, hb, [1, 8, 16], "sb")
    yc = _gelu(g, _fc(g, x, wc, None, [1, 8, 6], "c"), [1, 8, 3], "yc", "quick")
    for t in (ya, yb, sb, yc):
        g.output(t)
    xv = _rand(rng, 1, 8, 32)
    out, nodes = _run(g.build(), tmp_path, None, backend, x=xv)
    assert_close(out["ya"], _want(xv, wa, None, "none"), rtol=1e-5)
    assert_close(out["yb"], _want(xv, wb, None, "tanh"), rtol=1e-5)
    assert_close(out["yc"], _want(xv, wc, None, "quick"), rtol=1e-5)
    assert [bool(n["kernels"]) for n in nodes if n["op"] == "SdGelu"] == [False, True, True]


def test_fuse_epilogues_off_keeps_the_gelu_launch(rng, tmp_path, backend):
    g = OpGraphBuilder()
    x = g.input("x", [1, 8, 32])
    w, b = _rand(rng, 16, 32), _rand(rng, 16)
    g.output(_gelu(g, _fc(g, x, w, b, [1, 8, 16], "f"), [1, 8, 8], "y", "none"))
    model, xv = g.build(), _rand(rng, 1, 8, 32)
    for fuse in (True, False):
        profile = tmp_path / f"p{int(fuse)}.json"
        delegate = native.load(backend=backend, profile_path=str(profile), fuse_epilogues=fuse)
        out = make_interpreter(model, delegate).get_signature_runner("serving_default")(x=xv)
        assert_close(out["y"], _want(xv, w, b, "none"), rtol=1e-5)
        nodes = json.loads(profile.read_text())["nodes"]
        assert bool(_kernels(nodes, "SdGelu")) == (not fuse)


def test_a_reshape_between_fc_and_gelu_folds_too(rng, tmp_path, backend):
    """The cfg-batch-2 UNet's form: FC over [2*S, K] rows, RESHAPE to [2, S, 2F], SdGelu(gated)."""
    s_, k, f = 24, 64, 16
    g = OpGraphBuilder()
    x = g.input("x", [2 * s_, k])
    w, b = _rand(rng, 2 * f, k), _rand(rng, 2 * f)
    h = _fc(g, x, w, b, [2 * s_, 2 * f], "ff")
    o = S.ReshapeOptionsT()
    o.newShape = [2, s_, 2 * f]
    hr = g.tensor("hr", [2, s_, 2 * f])
    g.builtin(S.BuiltinOperator.RESHAPE, S.BuiltinOptions.ReshapeOptions, o,
              [h, g.const("shape", np.asarray([2, s_, 2 * f], np.int32))], [hr])
    g.output(_gelu(g, hr, [2, s_, f], "y", "tanh"))
    xv = _rand(rng, 2 * s_, k)
    out, nodes = _run(g.build(), tmp_path, None, backend, x=xv)
    assert_close(out["y"], _want(xv, w, b, "tanh").reshape(2, s_, f), rtol=1e-5)
    assert [(n["op"], bool(n["kernels"])) for n in nodes] == [
        ("FULLY_CONNECTED", True), ("RESHAPE", False), ("SdGelu", False)]
