"""graph/evaluate.py's buffer reuse: elementwise ops write into dead intermediates and Scratch buffers, never into
feeds, constants, wanted outputs or arrays a live view still reads; results equal plain numpy."""

from __future__ import annotations

import tracemalloc

import numpy as np
from ai_edge_litert import schema_py_generated as S

from sdconvert.graph import Op, OpCode, Subgraph, Tensor
from sdconvert.graph.evaluate import Scratch, evaluate_region

N = 1 << 18  # elements: above Scratch.MIN_ELEMENTS


class _G:
    def __init__(self) -> None:
        self.sg = Subgraph("main")
        self.ops: list[Op] = []

    def input(self, shape: tuple) -> Tensor:
        return self.sg.add_tensor(Tensor("x", shape))

    def const(self, v: np.ndarray) -> Tensor:
        return self.sg.new_constant("c", v)

    def op(self, name: str, inputs: list, shape: tuple) -> Tensor:
        opts = {
            "ADD": (S.BuiltinOptions.AddOptions, S.AddOptionsT),
            "MUL": (S.BuiltinOptions.MulOptions, S.MulOptionsT),
            "SUB": (S.BuiltinOptions.SubOptions, S.SubOptionsT),
        }.get(name)
        y = self.sg.add_tensor(Tensor(f"{name.lower()}_{len(self.ops)}", shape))
        kind, options = (opts[0], opts[1]()) if opts else (0, None)
        op = Op(OpCode.of(name), inputs, [y], options_type=kind, options=options)
        self.ops.append(op)
        return y

    def reshape(self, t: Tensor, shape: tuple) -> Tensor:
        return self.op("RESHAPE", [t, self.const(np.asarray(shape, np.int32))], shape)


def test_no_write_through_live_views_feeds_or_constants():
    g = _G()
    x = g.input((N,))
    c = g.const(np.full(N, 3.0, np.float32))
    a = g.op("MUL", [x, c], (N,))  # 3x, owned
    r = g.reshape(a, (2, N // 2))  # a view of a, read below
    b = g.op("ADD", [a, c], (N,))  # a's last use, but r still reads a's buffer: no in-place into a
    d = g.op("MUL", [r, g.const(np.float32(2.0))], (2, N // 2))  # 6x
    e = g.op("SUB", [b, c], (N,))  # b dies here: in place -> 3x
    f = g.op("ADD", [e, x], (N,))  # 4x
    xv = np.random.default_rng(0).standard_normal(N)
    before = xv.copy()
    for scratch in (None, Scratch()):
        got_d, got_f = evaluate_region(g.ops, {id(x): xv}, [d, f], scratch=scratch)
        np.testing.assert_array_equal(got_d, (6 * xv).reshape(2, -1))
        np.testing.assert_array_equal(got_f, 3 * xv + 3 - 3 + xv)
        # a wanted intermediate is kept as computed, although its last reader could have overwritten it
        got_b, got_e = evaluate_region(g.ops, {id(x): xv}, [b, e], scratch=scratch)
        np.testing.assert_array_equal(got_b, 3 * xv + 3)
        np.testing.assert_array_equal(got_e, 3 * xv + 3 - 3)
        np.testing.assert_array_equal(xv, before)  # the feed is only read
        assert np.all(c.numpy() == 3.0)  # and the graph's constant
        assert not np.may_share_memory(got_f, xv)


def _chain(g: _G, x: Tensor, k: int) -> Tensor:
    t = x
    for i in range(k):
        t = g.op(("MUL", "ADD")[i % 2], [t, g.const(np.float32(1.5))], (N,))
    return t


def test_elementwise_chain_runs_in_one_buffer():
    """x -> 6 elementwise ops: one result buffer in all (each op overwrites its dead input); none with a warm
    Scratch."""
    g = _G()
    x = g.input((N,))
    y = _chain(g, x, 6)
    xv = np.random.default_rng(1).standard_normal(N)
    want = xv.copy()
    for i in range(6):
        want = want * 1.5 if i % 2 == 0 else want + 1.5
    tracemalloc.start()
    try:
        (got,) = evaluate_region(g.ops, {id(x): xv}, [y])
        cold = tracemalloc.get_traced_memory()[1]
        scratch = Scratch()
        scratch.give(got)
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        (again,) = evaluate_region(g.ops, {id(x): xv}, [y], scratch=scratch)
        warm = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(again, want, rtol=1e-15)
    assert cold < 1.25 * 8 * N  # one float64 buffer (a copy per op would peak at two)
    assert warm < 0.25 * 8 * N  # the recycled buffer: no new one
    assert np.may_share_memory(again, got)


def test_scratch_keeps_a_buffer_once():
    s = Scratch()
    a = np.empty(N)
    s.give(a, a.reshape(2, -1))
    first, second = s.take((N,)), s.take((N,))
    assert np.may_share_memory(first, a) and not np.may_share_memory(second, a)
    s.give(np.empty(16))  # small arrays are not worth keeping
    assert s.take((16,)).shape == (16,)
