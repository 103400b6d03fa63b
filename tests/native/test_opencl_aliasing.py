"""Zero-copy views on the OpenCL backend (PoCL in CI): RESHAPE / SQUEEZE / EXPAND_DIMS inside a partition launch
nothing and share their input's device memory; the arena planner keeps the shared bytes alive until the last
consumer of any view; views that are partition outputs are still copied into their own output buffer."""
from __future__ import annotations

import json

import numpy as np
import pytest
from ai_edge_litert.interpreter import load_delegate
from ai_edge_litert import schema_py_generated as S

from harness import assert_close, make_interpreter
from sdlite import native
from tflite_builtin import BuiltinGraph

ADD, MUL = S.BuiltinOperator.ADD, S.BuiltinOperator.MUL


def _invoke(model: bytes):
    delegate = native.load(backend="opencl")
    runner = make_interpreter(model, delegate).get_signature_runner("serving_default")
    return runner, delegate


def test_reshape_chain_is_free_and_shares_the_arena(rng, tmp_path):
    g = BuiltinGraph()
    x = g.input("x", [2, 8, 16])
    c = rng.standard_normal(16).astype(np.float32)
    t1 = g.binary(ADD, x, g.const("c", c), [2, 8, 16], "t1")
    r1 = g.reshape(t1, [16, 16], "r1")
    r2 = g.reshape(r1, [2, 128], "r2")
    c2 = rng.standard_normal((2, 128)).astype(np.float32)
    g.output(g.binary(MUL, r2, g.const("c2", c2), [2, 128], "y"))
    model = g.build()
    xv = rng.standard_normal((2, 8, 16)).astype(np.float32)

    profile = tmp_path / "profile.json"
    delegate = load_delegate(str(native.delegate_path()), {"backend": "opencl", "profile_path": str(profile)})
    runner = make_interpreter(model, delegate).get_signature_runner("serving_default")
    y = runner(x=xv)["y"]
    assert_close(y, ((xv + c).reshape(2, 128) * c2).astype(np.float32), rtol=1e-6)
    stats = native.stats(delegate)
    assert stats["partitions"] == 1 and stats["claimed_nodes"] == 4
    # Only t1 (2*8*16 floats) lives in the arena: r1/r2 are t1's bytes, y is the partition output.
    assert stats["max_arena_bytes"] == 2 * 8 * 16 * 4
    nodes = json.loads(profile.read_text())["nodes"]
    assert [n["op"] for n in nodes] == ["ADD", "RESHAPE", "RESHAPE", "MUL"]
    assert [n["ms"] for n in nodes if n["op"] == "RESHAPE"] == [0.0, 0.0]  # no launch at all


def test_view_keeps_its_root_alive_until_its_last_consumer(rng):
    # t1's only direct reader is the view; without the merged lifetime the planner would hand t1's bytes to
    # t2 (same size, planned after t1 "died") and y would read t2 twice.
    g = BuiltinGraph()
    x = g.input("x", [4, 32])
    c1 = rng.standard_normal(32).astype(np.float32)
    c2 = rng.standard_normal(128).astype(np.float32)
    t1 = g.binary(ADD, x, g.const("c1", c1), [4, 32], "t1")
    v = g.reshape(t1, [128], "v")
    xf = g.reshape(x, [128], "xf")  # a view of the partition input
    t2 = g.binary(MUL, xf, g.const("c2", c2), [128], "t2")
    g.output(g.binary(ADD, v, t2, [128], "y"))
    xv = rng.standard_normal((4, 32)).astype(np.float32)
    runner, delegate = _invoke(g.build())
    for scale in (1.0, -2.0):  # second invoke: same buffers, new data
        y = runner(x=scale * xv)["y"]
        expected = (scale * xv + c1).reshape(128) + scale * xv.reshape(128) * c2
        assert_close(y, expected.astype(np.float32), rtol=1e-6)
    stats = native.stats(delegate)
    assert stats["claimed_nodes"] == 5 and stats["declined_nodes"] == 0
    assert stats["max_arena_bytes"] == 2 * 128 * 4  # t1 and t2 side by side, nothing else


def test_views_as_partition_outputs_are_written(rng):
    g = BuiltinGraph()
    x = g.input("x", [2, 64])
    c = rng.standard_normal(64).astype(np.float32)
    y1 = g.binary(ADD, x, g.const("c", c), [2, 64], "y1")  # an output ...
    y2 = g.reshape(y1, [128], "y2")                          # ... and a view of it, also an output
    y3 = g.reshape(x, [8, 16], "y3")                         # an output that is a view of the input
    e = g.expand_dims(y1, 0, [1, 2, 64], "e")                # internal view of an output
    y4 = g.binary(MUL, e, e, [1, 2, 64], "y4")
    for t in (y1, y2, y3, y4):
        g.output(t)
    runner, delegate = _invoke(g.build())
    for scale in (1.0, 3.0):
        xv = scale * rng.standard_normal((2, 64)).astype(np.float32)
        out = runner(x=xv)
        assert_close(out["y1"], xv + c, rtol=1e-6)
        assert_close(out["y2"], (xv + c).reshape(128), rtol=1e-6)
        np.testing.assert_array_equal(out["y3"], xv.reshape(8, 16))
        assert_close(out["y4"], ((xv + c) ** 2).reshape(1, 2, 64), rtol=1e-6)
    stats = native.stats(delegate)
    assert stats["partitions"] == 1 and stats["claimed_nodes"] == 5 and stats["declined_nodes"] == 0


def test_squeeze_and_expand_dims_alias(rng):
    g = BuiltinGraph()
    x = g.input("x", [1, 8, 1, 16])
    c = rng.standard_normal(16).astype(np.float32)
    t = g.binary(ADD, x, g.const("c", c), [1, 8, 1, 16], "t")
    s = g.squeeze(t, [0, 2], [8, 16], "s")
    e = g.expand_dims(s, 0, [1, 8, 16], "e")
    g.output(g.binary(MUL, e, e, [1, 8, 16], "y"))
    xv = rng.standard_normal((1, 8, 1, 16)).astype(np.float32)
    runner, delegate = _invoke(g.build())
    y = runner(x=xv)["y"]
    assert_close(y, ((xv + c) ** 2).reshape(1, 8, 16), rtol=1e-6)
    stats = native.stats(delegate)
    assert stats["claimed_nodes"] == 4
    assert stats["max_arena_bytes"] == 8 * 16 * 4


# ---- SLICE views: contiguous runs and the column blocks of a split FULLY_CONNECTED ----------------------------

def _fc(g: BuiltinGraph, x: int, w: np.ndarray, b: np.ndarray | None, out_shape, name: str) -> int:
    o = S.FullyConnectedOptionsT()
    o.keepNumDims = True
    ins = [x, g.const(f"{name}_w", w)] + ([g.const(f"{name}_b", b)] if b is not None else [-1])
    return g.op(S.BuiltinOperator.FULLY_CONNECTED, ins, g.tensor(name, out_shape),
                S.BuiltinOptions.FullyConnectedOptions, o)


def _profiled(model: bytes, tmp_path, **inputs):
    profile = tmp_path / "profile.json"
    delegate = load_delegate(str(native.delegate_path()), {"backend": "opencl", "profile_path": str(profile)})
    out = make_interpreter(model, delegate).get_signature_runner("serving_default")(**inputs)
    return out, native.stats(delegate), json.loads(profile.read_text())["nodes"]


def _qkv_graph(rng, bias: bool, extra_reader: bool, m: int = 24, k: int = 32, c: int = 64,
               weights_input: bool = False):
    """x [1, m, k] -> FC -> [1, m, 3c] -> three column SLICEs (the merged q/k/v of `sdconvert --fuse`);
    `weights_input`: the weights are a graph input `w` (read in place on the device, not packed)."""
    g = BuiltinGraph()
    x = g.input("x", [1, m, k])
    w = rng.standard_normal((3 * c, k)).astype(np.float32)
    b = rng.standard_normal(3 * c).astype(np.float32) if bias else None
    if weights_input:
        o = S.FullyConnectedOptionsT()
        o.keepNumDims = True
        f = g.op(S.BuiltinOperator.FULLY_CONNECTED, [x, g.input("w", [3 * c, k]), -1], g.tensor("f", [1, m, 3 * c]),
                 S.BuiltinOptions.FullyConnectedOptions, o)
    else:
        f = _fc(g, x, w, b, [1, m, 3 * c], "f")
    # out of order on purpose: the split maps each SLICE to its block by `begin`, not by position
    v = g.slice(f, [0, 0, 2 * c], [1, m, c], "v")
    q = g.slice(f, [0, 0, 0], [1, m, c], "q")
    kk = g.slice(f, [0, 0, c], [1, m, c], "k")
    s = rng.standard_normal(c).astype(np.float32)
    t = g.binary(MUL, q, g.const("s", s), [1, m, c], "t")
    u = g.binary(ADD, t, kk, [1, m, c], "u")
    g.output(g.binary(MUL, u, v, [1, m, c], "y"))
    if extra_reader:
        g.output(g.binary(MUL, f, f, [1, m, 3 * c], "f2"))
    xv = rng.standard_normal((1, m, k)).astype(np.float32)
    fv = xv.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0.0)
    qv, kv, vv = fv[..., :c], fv[..., c:2 * c], fv[..., 2 * c:]
    want = {"y": ((qv * s + kv) * vv).astype(np.float32)}
    if extra_reader:
        want["f2"] = (fv * fv).astype(np.float32)
    return g.build(), (dict(x=xv, w=w) if weights_input else dict(x=xv)), want


@pytest.mark.parametrize("weights_input", [False, True])
def test_column_slices_of_a_bias_free_fc_are_views_of_one_batched_gemm(rng, tmp_path, weights_input):
    model, feeds, want = _qkv_graph(rng, bias=False, extra_reader=False, weights_input=weights_input)
    out, stats, nodes = _profiled(model, tmp_path, **feeds)
    assert_close(out["y"], want["y"], rtol=1e-5)
    assert stats["partitions"] == 1 and stats["claimed_nodes"] == 7 and stats["declined_nodes"] == 0
    by_op = {}
    for n in nodes:
        by_op.setdefault(n["op"], []).append(n)
    assert [n["ms"] for n in by_op["SLICE"]] == [0.0, 0.0, 0.0] and all(not n["kernels"] for n in by_op["SLICE"])
    (fc,) = by_op["FULLY_CONNECTED"]
    assert fc["ms"] > 0 and fc["kernels"][0]["name"].startswith("gemm_")
    # the FC output's bytes ([3][24][64] blocks) + t + u; the slices add nothing
    assert stats["max_arena_bytes"] == (24 * 192 + 2 * 24 * 64) * 4


def test_column_slices_stay_copies_with_a_bias_or_another_reader(rng, tmp_path):
    for bias, extra in ((True, False), (False, True)):
        model, feeds, want = _qkv_graph(rng, bias=bias, extra_reader=extra)
        out, stats, nodes = _profiled(model, tmp_path, **feeds)
        for name, ref in want.items():
            assert_close(out[name], ref, rtol=1e-5)
        assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
        slices = [n for n in nodes if n["op"] == "SLICE"]
        assert len(slices) == 3 and all(n["ms"] > 0 and n["kernels"] for n in slices), (bias, extra)


def test_contiguous_slices_are_views(rng, tmp_path):
    # [1, 4c] -> [1, c] runs (b1 time-embedding projections) are views; [2, 4c] -> [2, c] rows have gaps: copies
    c = 32
    for batch, views in ((1, True), (2, False)):
        g = BuiltinGraph()
        x = g.input("x", [batch, 4 * c])
        e = rng.standard_normal(4 * c).astype(np.float32)
        t = g.binary(ADD, x, g.const("e", e), [batch, 4 * c], "t")
        a = g.slice(t, [0, c], [batch, c], "a")
        b = g.slice(t, [0, 3 * c], [batch, c], "b")
        g.output(g.binary(MUL, a, b, [batch, c], "y"))
        g.output(g.slice(t, [0, 2 * c], [batch, c], "z"))  # a partition output: always its own buffer
        xv = rng.standard_normal((batch, 4 * c)).astype(np.float32)
        out, stats, nodes = _profiled(g.build(), tmp_path, x=xv)
        tv = xv + e
        assert_close(out["y"], tv[:, c:2 * c] * tv[:, 3 * c:], rtol=1e-6)
        np.testing.assert_array_equal(out["z"], tv[:, 2 * c:3 * c])
        assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
        ms = {n["op"] + str(i): n["ms"] for i, n in enumerate(nodes)}
        slice_ms = [n["ms"] for n in nodes if n["op"] == "SLICE"]
        assert len(slice_ms) == 3 and slice_ms[2] > 0, ms  # z
        assert all((m == 0.0) == views for m in slice_ms[:2]), ms
