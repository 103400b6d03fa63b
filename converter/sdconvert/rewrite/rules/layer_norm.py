"""LayerNorm over the last axis -> ``RESHAPE [R, 1, C] -> SdGroupNorm(groups=1) -> RESHAPE`` (no new op or kernel).

LayerNorm over the last axis of x[..., C] is GroupNorm with one group on x viewed as [R, 1, C] (R = numel / C rows,
channels last): statistics over the 1 x C elements of each row, biased variance, per-channel gamma/beta. The
RESHAPEs are zero-copy views in the GPU delegate, so a transformer LayerNorm (~9 TFLite ops and as many kernel
launches: MEAN, SQUARED_DIFFERENCE, MEAN, ADD eps, RSQRT, MUL, SUB, MUL, ADD, then the affine MUL/ADD) becomes one
read and one write. The trade-off: SdGroupNorm's GPU kernels parallelise over (batch, group) pairs, here one short
row each (C = 320..1280 in SD1.5, under the 4096-element limit of the one-kernel path: one work-group per row, one
launch) -- thousands of small reductions instead of the few large ones GroupNorm has.

What litert-torch emits for ``nn.LayerNorm`` (UNet transformer norm1/2/3, CLIP layer_norm1/2 and final_layer_norm):
x viewed as [1, R, C] (a RESHAPE when x is not already rank 3 with N=1), ``MEAN(axis 2) -> RESHAPE [1,R,1] ->
SQUARED_DIFFERENCE -> MEAN -> ADD eps -> RSQRT``, applied as ``x * rs + (0 - mean * rs)``, then ``MUL gamma`` /
``ADD beta`` when they are not the identity (init values fold away), and a RESHAPE back to x's shape.

Matching is semantic, as in :mod:`.group_norm`. Pattern (anchor ``MEAN``): a MEAN over ONE axis whose output is
subtracted from its own input (``SUB`` / ``SQUARED_DIFFERENCE``, possibly after a RESHAPE of the mean). Check: the
first tensor after it whose backward slice from x contains the mean and a RSQRT/SQRT/DIV and has no other exits is
the normalised output (a mean subtraction with no variance step is not LayerNorm-shaped: silent); statistics over
any axis but the last are rejected; per-channel affine ops that follow (and a RESHAPE) are absorbed; the region is
verified by :func:`.group_norm.verify_norm` as what the rewrite emits, a one-group GroupNorm on [R, 1, C]: evaluated
in float64 on random rows that alternate between a wide regime and a narrow one (row variance ~1.3 eps, so eps, read
from the graph's ``ADD`` before the RSQRT, is observable), with gamma/beta fitted per channel by least squares over
the rows -- an (exact) max residual above 1e-6 rejects. Rows are the instances the fit needs, so a LayerNorm with
>= 16 rows (all SD1.5 ones: 64..8192) is evaluated on one sample (before: two), and the reference is computed in the
input's own buffer: ~0.05 s per [2, 4096, 320] site (before ~0.2 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ... import ops as sdops
from ...graph.evaluate import Unsupported
from ...graph.ir import Op, Tensor
from ...ops.group_norm import GroupNormAttrs
from ..edit import custom_op, emit_to, reshape
from ..engine import Alternative, Check, Context, FusedOp, Match, Rule, ref
from ..match import FLOAT32, const_value
from .group_norm import NormLayout, _affine_tail, _eps, _normalised_core, verify_norm

FIT_TOLERANCE = 1e-6
_CENTERING = frozenset({"SUB", "SQUARED_DIFFERENCE"})


def _reduced_axes(op: Op, shape: tuple[int, ...]) -> set[int] | None:
    """The axes a MEAN really reduces: litert-torch also lists size-1 ones (axes [0, 2] of [1, R, C])."""
    v = const_value(op.inputs[1], max_ops=0) if len(op.inputs) > 1 else None
    if v is None:
        return None
    return {a for a in (int(i) % len(shape) for i in np.asarray(v).reshape(-1)) if shape[a] > 1}


def _centred(mean: Op, x: Tensor) -> bool:
    """The mean (directly or through one RESHAPE) is subtracted from x."""
    m = mean.outputs[0]
    views = [m] + [c.outputs[0] for c in m.consumers if c.type == "RESHAPE"]
    return any(
        c.type in _CENTERING and any(i is x for i in c.inputs) and any(i is v for i in c.inputs)
        for v in views
        for c in v.consumers
    )


def _pattern(ctx: Context, mean: Op) -> Match | None:
    x = mean.inputs[0] if mean.inputs else None
    if x is None or x.shape is None or len(x.shape) < 2 or x.dtype != FLOAT32 or x.shape[-1] < 2:
        return None
    axes = _reduced_axes(mean, tuple(x.shape))
    if axes is None or len(axes) != 1 or not _centred(mean, x):
        return None
    return Match("decomposed", mean, [mean], dict(x=x, axis=next(iter(axes))))


@dataclass
class _Plan:
    x: Tensor
    out: Tensor
    gamma: np.ndarray
    beta: np.ndarray
    eps: float
    region: list[Op]
    fit_residual: float  # verify_norm's exact max residual of the fitted one-group GroupNorm


def _check(ctx: Context, m: Match) -> Check:
    x: Tensor = m.captures["x"]
    shape = tuple(x.shape or ())
    core = _normalised_core(ctx, m.anchor, x)
    if core is None:
        return Check.reject("mean subtraction without a variance normalisation", silent=True)
    if isinstance(core, str):
        return Check.reject(core)
    if m.captures["axis"] != len(shape) - 1:
        return Check.reject(f"statistics over axis {m.captures['axis']} of {list(shape)}, not the last axis")
    exits = _affine_tail(ctx, *core, x.numel)
    eps = _eps(sorted(exits[-1][1], key=ctx.pos))
    lay = NormLayout(x.numel // shape[-1], shape[-1], 1, True)  # [R, 1, C]: one group per row
    resid = math.inf
    for i in range(len(exits) - 1, -1, -1):
        out, ops = exits[i]
        ops = sorted(ops, key=ctx.pos)
        try:
            fit = verify_norm(ops, x, out, lay, 1, eps)
        except (Unsupported, ValueError, IndexError, TypeError) as e:
            return Check.reject(f"cannot evaluate region: {e}")
        resid = fit.resid
        if resid <= FIT_TOLERANCE:
            return Check.accept(_Plan(x, out, fit.gamma, fit.beta, float(eps), ops, resid))
    return Check.reject(f"region is not a LayerNorm over the last axis (eps={eps:g}, fit residual {resid:.1e})")


def _source(ctx: Context, p: _Plan) -> tuple[Tensor, int]:
    """x, or the input of the RESHAPE producing x when only the region reads x (litert-torch's [N, S, C] ->
    [1, N*S, C] view becomes dead: the [R, 1, C] view is taken from the original tensor). Returns (tensor, ops
    that become dead)."""
    rop = p.x.producer
    inside = {id(o) for o in p.region}
    if (
        rop is not None
        and rop.type == "RESHAPE"
        and rop.inputs[0] is not None
        and rop.inputs[0].numel == p.x.numel
        and not ctx.sg.is_output(p.x)
        and all(id(c) in inside for c in p.x.consumers)
    ):
        return rop.inputs[0], 1
    return p.x, 0


def _rewrite(ctx: Context, m: Match, p: _Plan) -> FusedOp:
    sg = ctx.sg
    c = (p.x.shape or ())[-1]
    view = (p.x.numel // c, 1, c)
    src, dead = _source(ctx, p)
    attrs = GroupNormAttrs(groups=1, eps=float(np.float32(p.eps)), activation="none", channel_axis=-1)
    spec = sdops.get("SdGroupNorm")
    gamma, beta = p.gamma.astype(np.float32), p.beta.astype(np.float32)
    g = sg.new_constant("ln_gamma", gamma)
    b = sg.new_constant("ln_beta", beta)

    def build(before: Op, y: Tensor) -> None:
        xv = reshape(sg, src, view, before=before)
        custom_op(sg, spec, attrs, [xv, g, b], y, before=before)

    emit_to(sg, p.out, view, build)
    return FusedOp(
        "layer_norm",
        m.alternative,
        spec.name,
        {**attrs.__dict__},
        ctx.sg_index,
        [ref(src, view), ref(g, value=gamma), ref(b, value=beta)],
        ref(p.out, view),
        len(p.region) + dead,
        p.fit_residual,
    )


RULE = Rule(
    "layer_norm",
    (Alternative("decomposed", frozenset({"MEAN"}), _pattern, _check, _rewrite),),
    __doc__ or "",
)

__all__ = ["RULE"]
