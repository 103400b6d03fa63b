"""Zero-copy views on the OpenCL backend (PoCL in CI): RESHAPE / SQUEEZE / EXPAND_DIMS inside a partition launch
nothing and share their input's device memory; the arena planner keeps the shared bytes alive until the last
consumer of any view; views that are partition outputs are still copied into their own output buffer."""
from __future__ import annotations

import json

import numpy as np
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
