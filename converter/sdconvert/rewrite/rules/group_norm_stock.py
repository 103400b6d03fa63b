"""GroupNorm for ``--target litert``: the same match as :mod:`.group_norm`, re-emitted with stock ops only.

The stock LiteRT GPU accelerator falls back to the CPU on BROADCAST_TO, which litert-torch's GroupNorm uses to
spread per-group statistics over channels when C/G > 1. This rewrite computes the normalisation on the grouped view
instead, ``reshape((R - mean) * rsqrt(var + eps)) * gamma + beta``, where every broadcast is implicit (numpy-style)
and gamma/beta are the fitted per-channel constants. Sites that are already broadcast-free are left alone (a silent
rejection, so the rule reaches a fixed point on its own output).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...graph.ir import Op, OpCode, Subgraph, Tensor
from ...graph.schema import S
from ...ops.group_norm import GroupNormAttrs
from ..edit import reshape, take_output, transpose
from ..engine import Alternative, Check, Context, FusedOp, Match, Rule
from .group_norm import _check_decomposed, _pattern, _Plan, _record


def _builtin(
    sg: Subgraph,
    name: str,
    inputs: list[Tensor],
    shape: tuple[int, ...],
    before: Op,
    options: tuple[int, Any] = (0, None),
    out: Tensor | None = None,
) -> Tensor:
    y = out if out is not None else sg.new_tensor(f"gn_{name.lower()}", shape)
    sg.insert_op(Op(OpCode.of(name), inputs, [y], options_type=options[0], options=options[1]), before=before)
    return y


def _opts(name: str) -> tuple[int, Any]:
    if name == "MEAN":
        o = S.ReducerOptionsT()
        o.keepDims = True
        return S.BuiltinOptions.ReducerOptions, o
    cls = {
        "ADD": (S.BuiltinOptions.AddOptions, S.AddOptionsT),
        "SUB": (S.BuiltinOptions.SubOptions, S.SubOptionsT),
        "MUL": (S.BuiltinOptions.MulOptions, S.MulOptionsT),
    }[name]
    return cls[0], cls[1]()


def _check_stock(ctx: Context, m: Match) -> Check:
    res = _check_decomposed(ctx, m)
    if res.ok and not res.plan.has_broadcast:
        return Check.reject("already broadcast-free", silent=True)
    return res


def _rewrite_stock(ctx: Context, m: Match, p: _Plan) -> FusedOp:
    """Y = reshape((R - mean) * rsqrt(var + eps)) * gamma + beta on the grouped view, no BROADCAST_TO."""
    sg = ctx.sg
    x = p.x_in
    shape = tuple(x.shape or ())
    n, g = shape[0], p.groups
    if p.channel_axis == 1:
        c = shape[1]
        l_ = x.numel // (n * c)
        gshape, red, flat, cshape = (n, g, (c // g) * l_), [2], (n, c, l_), (c, 1)
    else:
        c = shape[-1]
        l_ = x.numel // (n * c)
        gshape, red, flat, cshape = (n, l_, g, c // g), [1, 3], (n, l_, c), (c,)
    stat = tuple(1 if i in red else d for i, d in enumerate(gshape))

    def build(before: Op, y: Tensor) -> None:
        r = reshape(sg, x, gshape, before=before)
        axes = sg.new_constant("axes", np.asarray(red, np.int32))
        mean = _builtin(sg, "MEAN", [r, axes], stat, before, _opts("MEAN"))
        d = _builtin(sg, "SUB", [r, mean], gshape, before, _opts("SUB"))
        var = _builtin(
            sg, "MEAN", [_builtin(sg, "MUL", [d, d], gshape, before, _opts("MUL")), axes], stat, before, _opts("MEAN")
        )
        eps = sg.new_constant("eps", np.asarray(p.eps, np.float32))
        rs = _builtin(sg, "RSQRT", [_builtin(sg, "ADD", [var, eps], stat, before, _opts("ADD"))], stat, before)
        z = reshape(sg, _builtin(sg, "MUL", [d, rs], gshape, before, _opts("MUL")), flat, before=before)
        gm = sg.new_constant("gamma", p.gamma.astype(np.float32).reshape(cshape))
        bt = sg.new_constant("beta", p.beta.astype(np.float32).reshape(cshape))
        z = _builtin(
            sg, "ADD", [_builtin(sg, "MUL", [z, gm], flat, before, _opts("MUL")), bt], flat, before, _opts("ADD")
        )
        if p.activation == "silu":
            z = _builtin(sg, "MUL", [z, _builtin(sg, "LOGISTIC", [z], flat, before)], flat, before, _opts("MUL"))
        if p.post_perm is None:
            reshape(sg, z, y.shape or (), before=before, out=y)
        else:
            transpose(sg, reshape(sg, z, shape, before=before), p.post_perm, before=before, out=y)

    old = take_output(sg, p.out)
    if old is None:
        raise ValueError("group norm output has no producer")
    build(old, p.out)
    attrs = GroupNormAttrs(
        groups=p.groups, eps=float(np.float32(p.eps)), activation=p.activation, channel_axis=p.channel_axis
    )
    return _record(ctx, m, p, attrs, "stock_group_norm", "group_norm_stock")


STOCK_RULE = Rule(
    "group_norm_stock",
    (Alternative("decomposed", frozenset({"MEAN"}), _pattern, _check_stock, _rewrite_stock),),
    "GroupNorm re-emitted without BROADCAST_TO for the stock LiteRT GPU accelerator.",
)

__all__ = ["STOCK_RULE"]
