"""Graph-editing helpers for rewrites: new builtin/custom ops, taking over a tensor's production.

Rewrites keep the matched output tensor object (its name, its place in subgraph/signature outputs) and make the new
op produce it: :func:`take_output` gives the old producer a throw-away tensor instead, so the old pattern becomes
dead and the cleanup after each sweep removes it. New ops are inserted just before that old producer, which keeps
the op list topologically ordered (all pattern inputs are produced earlier, all consumers later).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..graph.ir import Op, OpCode, Subgraph, Tensor
from ..graph.schema import S


def take_output(sg: Subgraph, t: Tensor) -> Op | None:
    """Detach ``t`` from its producer (which gets a dead placeholder output). Returns the old producer."""
    old = t.producer
    if old is None:
        return None
    for i, o in enumerate(old.outputs):
        if o is t:
            old.outputs[i] = sg.new_tensor(t.name + ";dead", t.shape or (), t.dtype)
    return old


def reshape(sg: Subgraph, x: Tensor, shape: Sequence[int], *, before: Op, out: Tensor | None = None) -> Tensor:
    shape = tuple(int(d) for d in shape)
    y = out if out is not None else sg.new_tensor(x.name + ";reshape", shape, x.dtype)
    opts = S.ReshapeOptionsT()
    opts.newShape = list(shape)
    op = Op(
        OpCode.of("RESHAPE"),
        [x, sg.new_constant("shape", np.asarray(shape, np.int32))],
        [y],
        options_type=S.BuiltinOptions.ReshapeOptions,
        options=opts,
    )
    sg.insert_op(op, before=before)
    return y


def transpose(sg: Subgraph, x: Tensor, perm: Sequence[int], *, before: Op, out: Tensor | None = None) -> Tensor:
    assert x.shape is not None
    shape = tuple(x.shape[p] for p in perm)
    y = out if out is not None else sg.new_tensor(x.name + ";transpose", shape, x.dtype)
    op = Op(
        OpCode.of("TRANSPOSE"),
        [x, sg.new_constant("perm", np.asarray(perm, np.int32))],
        [y],
        options_type=S.BuiltinOptions.TransposeOptions,
        options=S.TransposeOptionsT(),
    )
    sg.insert_op(op, before=before)
    return y


def custom_op(sg: Subgraph, spec: Any, attrs: Any, inputs: Sequence[Tensor], output: Tensor, *, before: Op) -> Op:
    """Insert a fused custom op defined by an :class:`sdconvert.ops.OpSpec` (flexbuffer options, version)."""
    op = Op(
        OpCode.of(spec.name, spec.version),
        list(inputs),
        [output],
        custom_options=spec.encode(attrs),
        custom_options_format=S.CustomOptionsFormat.FLEXBUFFERS,
    )
    sg.insert_op(op, before=before)
    return op


def emit_to(sg: Subgraph, out: Tensor, shape: Sequence[int], build: Any) -> Op:
    """Make ``build(before, y)`` compute ``out`` through a tensor of ``shape`` (+RESHAPE when shapes differ).

    ``build`` receives the insertion anchor and the tensor it must write; returns nothing.
    """
    old = take_output(sg, out)
    anchor = old if old is not None else (sg.ops[0] if sg.ops else None)
    if anchor is None:
        raise ValueError("cannot place a rewrite in an empty subgraph")
    if tuple(out.shape or ()) == tuple(shape):
        build(anchor, out)
    else:
        tmp = sg.new_tensor(out.name + ";fused", shape, out.dtype)
        build(anchor, tmp)
        reshape(sg, tmp, out.shape or (), before=anchor, out=out)
    return anchor


__all__ = ["custom_op", "emit_to", "reshape", "take_output", "transpose"]
