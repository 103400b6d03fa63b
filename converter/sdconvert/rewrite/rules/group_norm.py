"""GroupNorm (+ optional SiLU) -> ``SdGroupNorm``; and, for ``--target litert``, a broadcast-free stock-op form.

What litert-torch emits for ``nn.GroupNorm`` on NCHW activations (after its layout pass, between NHWC convs):
``TRANSPOSE(nhwc->nchw) -> RESHAPE [N,G,C/G,HW] -> MEAN -> SUB -> MUL(d,d) -> MEAN -> ADD eps -> RSQRT``, then the
normalisation applied as an affine map of the *input*: ``x * A + B`` with ``A = rsqrt·γ``, ``B = β - mean·rsqrt·γ``
broadcast per channel (``BROADCAST_TO [N,G,C/G,1] -> RESHAPE [N,C,1,1]`` when C/G > 1, plain broadcasting when
C/G == 1), then ``TRANSPOSE(nchw->nhwc)`` and the SiLU ``x * LOGISTIC(x)`` of the ResNet block. γ=1/β=0 (random
init) are folded away entirely; real weights appear as extra MULs/ADDs or folded into A/B. The
``odml.group_norm`` composite (``ENABLE_GROUP_NORM_COMPOSITE=y``) has γ/β as explicit inputs.

Matching is therefore semantic rather than op-by-op. Pattern (anchor ``MEAN``): the mean of a RESHAPE of a rank-3/4
tensor X into a grouped view (channels-first [N,G,...] reduced over all but N,G; or channels-last [N,L,G,C/G]
reduced over L and C/G). Check: the first tensor Y after it whose backward slice from X (plus constants) contains the
statistics and has no other exits is the normalised output; per-channel affine ops that follow are absorbed; the
region is evaluated in float64 on two random inputs (one with variance near eps, so eps and groups are really
verified) and γ, β are *fitted* per channel by least squares -- a residual above 1e-6 rejects the site. That covers
every sign/folding variant without enumerating them. Transposes around the region (NHWC->NCHW->NHWC) are dropped in
favour of ``channel_axis=-1`` on the NHWC tensor, and a following SiLU becomes ``activation="silu"``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from flatbuffers import flexbuffers

from ... import ops as sdops
from ...graph.evaluate import Unsupported, evaluate_region
from ...graph.ir import Op, Subgraph, Tensor
from ...ops.group_norm import GroupNormAttrs
from ..edit import custom_op, emit_to, take_output, transpose
from ..engine import Alternative, Check, Context, FusedOp, Match, Rule, ref
from ..match import (
    FLOAT32,
    activation,
    backward_slice,
    const_value,
    is_single_exit,
    perm,
    scalar,
    silu_after,
    sole_consumer,
)

FIT_TOLERANCE = 1e-6


def _axes(op: Op, rank: int) -> set[int] | None:
    v = const_value(op.inputs[1], max_ops=0) if len(op.inputs) > 1 else None
    return None if v is None else {int(a) % rank for a in np.asarray(v).reshape(-1)}


def _pattern(ctx: Context, mean: Op) -> Match | None:
    r = mean.inputs[0]
    rop = r.producer if r is not None else None
    if rop is None or rop.type != "RESHAPE" or r.shape is None:
        return None
    x = rop.inputs[0]
    if x is None or x.shape is None or len(x.shape) not in (3, 4) or x.dtype != FLOAT32 or x.numel != r.numel:
        return None
    axes = _axes(mean, len(r.shape))
    if axes is None:
        return None
    n, c = x.shape[0], x.shape[1]
    if (
        len(r.shape) >= 3
        and r.shape[0] == n
        and axes == set(range(2, len(r.shape)))
        and 1 <= r.shape[1] <= c
        and c % r.shape[1] == 0
    ):
        return Match("decomposed", mean, [rop, mean], dict(x=x, groups=int(r.shape[1]), channel_axis=1))
    cl = x.shape[-1]
    if (
        len(r.shape) == 4
        and r.shape[0] == n
        and axes == {1, 3}
        and r.shape[2] * r.shape[3] == cl
        and r.shape[1] == x.numel // (n * cl)
    ):
        return Match("decomposed", mean, [rop, mean], dict(x=x, groups=int(r.shape[2]), channel_axis=-1))
    return None


@dataclass
class _Plan:
    x_in: Tensor
    out: Tensor
    gamma: np.ndarray
    beta: np.ndarray
    groups: int
    eps: float
    activation: str
    channel_axis: int
    replaced: int
    region: list[Op]
    has_broadcast: bool
    post_perm: tuple[int, ...] | None = None  # a TRANSPOSE kept after the op (SiLU folded across it)


def _normalize(x: np.ndarray, groups: int, eps: float, axis: int) -> np.ndarray:
    xc = np.moveaxis(x, axis, -1)
    c = xc.shape[-1]
    g = xc.reshape(xc.shape[0], -1, groups, c // groups)
    mean = g.mean(axis=(1, 3), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 3), keepdims=True)
    return np.moveaxis(((g - mean) / np.sqrt(var + eps)).reshape(xc.shape), -1, axis)


def _fit(y: np.ndarray, nrm: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Per-channel least squares y = gamma * nrm + beta; returns gamma, beta, max residual relative to |y|."""
    yc = np.moveaxis(y, axis, 0).reshape(y.shape[axis], -1)
    nc = np.moveaxis(nrm, axis, 0).reshape(nrm.shape[axis], -1)
    nm, ym = nc.mean(axis=1, keepdims=True), yc.mean(axis=1, keepdims=True)
    var = ((nc - nm) ** 2).sum(axis=1)
    gamma = ((nc - nm) * (yc - ym)).sum(axis=1) / np.where(var > 0, var, 1.0)
    beta = ym[:, 0] - gamma * nm[:, 0]
    resid = np.abs(yc - (gamma[:, None] * nc + beta[:, None])).max()
    return gamma, beta, float(resid / max(1.0, float(np.abs(yc).max())))


def _eps(region: list[Op]) -> float:
    for op in region:
        if op.type in ("RSQRT", "SQRT"):
            t = op.inputs[0]
            for _ in range(4):
                p = t.producer if t is not None else None
                if p is None:
                    break
                if p.type == "RESHAPE":
                    t = p.inputs[0]
                    continue
                if p.type == "ADD":
                    for a in p.inputs:
                        s = scalar(a)
                        if s is not None:
                            return s
                break
    return 0.0


def _samples(x: Tensor, axis: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = x.shape or ()
    c = shape[axis]
    offs = rng.standard_normal(c)
    bshape = [1] * len(shape)
    bshape[axis] = c
    a = rng.standard_normal(shape) * 2.0 + offs.reshape(bshape)
    b = rng.standard_normal(shape) * 1e-3 + offs.reshape(bshape)  # variance ~ eps: makes eps observable
    return [a, b]


def _post(
    sg: Subgraph, x: Tensor, out: Tensor, channel_axis: int, region: list[Op]
) -> tuple[Tensor, Tensor, int, str, list[Op], tuple[int, ...] | None]:
    """Fold surrounding NHWC<->NCHW transposes and a following SiLU (also across a TRANSPOSE); pick the input."""
    extra: list[Op] = []
    x_in = x
    if channel_axis == 1 and len(x.shape or ()) == 4 and out.shape == x.shape:
        xp = x.producer
        c = sole_consumer(sg, out)
        if (
            xp is not None
            and xp.type == "TRANSPOSE"
            and perm(xp) == (0, 3, 1, 2)
            and c is not None
            and c.type == "TRANSPOSE"
            and perm(c) == (0, 2, 3, 1)
        ):
            x_in, channel_axis, out = xp.inputs[0], -1, c.outputs[0]
            extra.append(c)
    act = "none"
    post_perm = None
    s = silu_after(sg, out)
    if s is not None:
        act, out = "silu", s[1]
        extra += s[0]
    else:
        c = sole_consumer(sg, out)
        if c is not None and c.type == "TRANSPOSE" and perm(c) is not None and out.shape == x_in.shape:
            s = silu_after(sg, c.outputs[0])
            if s is not None:
                act, out, post_perm = "silu", s[1], perm(c)
                extra += [c, *s[0]]
                return x_in, out, channel_axis, act, extra, post_perm
    if channel_axis == 1 and out.shape != x_in.shape:
        for op in region:
            o = op.outputs[0]
            if (
                op.type == "RESHAPE"
                and op.inputs[0] is x
                and o.shape == out.shape
                and (o.shape or ())[:2] == (x.shape or ())[:2]
            ):
                x_in = o
                break
    return x_in, out, channel_axis, act, extra, post_perm


def _check_decomposed(ctx: Context, m: Match) -> Check:
    sg = ctx.sg
    x: Tensor = m.captures["x"]
    groups, axis = m.captures["groups"], m.captures["channel_axis"]
    mean = m.anchor
    start = ctx.pos(mean)
    core = None
    for op in sg.ops[start + 1 : start + 48]:
        if len(op.outputs) != 1:
            continue
        t = op.outputs[0]
        if t.numel != x.numel or t.dtype != FLOAT32:
            continue
        sl = backward_slice(t, [x], max_ops=48)
        if sl is None or not any(o is mean for o in sl):
            continue
        if not any(o.type in ("RSQRT", "SQRT", "DIV") for o in sl) or not is_single_exit(sg, sl, t):
            continue
        core = (t, sl)
        break
    if core is None:
        return Check.reject("no single-exit region after the group statistics")
    t, sl = core
    exits = [(t, list(sl))]
    cur, ext = t, []
    for _ in range(6):
        c = sole_consumer(sg, cur)
        if c is None or activation(c):
            break
        if c.type == "RESHAPE":
            nxt = c.outputs[0]
        elif c.type in ("MUL", "ADD", "SUB", "DIV") and len(c.inputs) == 2:
            other = c.inputs[1] if c.inputs[0] is cur else c.inputs[0]
            if other is cur or other is None or const_value(other) is None or (c.type == "DIV" and c.inputs[1] is cur):
                break
            nxt = c.outputs[0]
        else:
            break
        if nxt.numel != x.numel:
            break
        ext.append(c)
        cur = nxt
        exits.append((cur, sl + ext))
    region = sorted(exits[-1][1], key=ctx.pos)
    eps = _eps(region)
    try:
        samples = _samples(x, axis)
        ys = [evaluate_region(region, {id(x): s}, [e for e, _ in exits]) for s in samples]
    except (Unsupported, ValueError, IndexError, TypeError) as e:
        return Check.reject(f"cannot evaluate region: {e}")
    nrm = np.concatenate([_normalize(s, groups, eps, axis) for s in samples], axis=0)
    for i in range(len(exits) - 1, -1, -1):
        y = np.concatenate([ys[k][i].reshape(x.shape) for k in range(len(samples))], axis=0)
        gamma, beta, resid = _fit(y, nrm, axis)
        if resid <= FIT_TOLERANCE:
            out, ops = exits[i]
            ops = sorted(ops, key=ctx.pos)
            x_in, out, ca, act, extra, post_perm = _post(sg, x, out, axis, ops)
            return Check.accept(
                _Plan(
                    x_in,
                    out,
                    gamma,
                    beta,
                    groups,
                    float(eps),
                    act,
                    ca,
                    len(ops) + len(extra),
                    ops,
                    any(o.type == "BROADCAST_TO" for o in ops),
                    post_perm,
                )
            )
    return Check.reject(f"region is not a GroupNorm(groups={groups}, eps={eps:g}) (fit residual {resid:.1e})")


def _composite_pattern(ctx: Context, op: Op) -> Match | None:
    o2 = op.options2
    name = getattr(o2, "name", None)
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    if name != "odml.group_norm" or len(op.inputs) != 3 or len(op.outputs) != 1:
        return None
    return Match("odml_composite", op, [op], {})


def _check_composite(ctx: Context, m: Match) -> Check:
    op = m.anchor
    try:
        attrs = flexbuffers.Loads(bytes(op.options2.compositeAttributes))
        groups, eps, ca = int(attrs["num_groups"]), float(attrs["epsilon"]), int(attrs["channel_axis"])
    except Exception as e:  # noqa: BLE001 - malformed attributes are a rejection, not a crash
        return Check.reject(f"unreadable composite attributes ({type(e).__name__})")
    x = op.inputs[0]
    if x is None or x.shape is None or len(x.shape) not in (3, 4) or x.dtype != FLOAT32:
        return Check.reject("input is not a float32 rank-3/4 tensor")
    rank = len(x.shape)
    ca = ca % rank
    if ca not in (1, rank - 1):
        return Check.reject(f"channel_axis {ca} is neither 1 nor last")
    c = x.shape[ca]
    gamma, beta = const_value(op.inputs[1]), const_value(op.inputs[2])
    if gamma is None or beta is None or gamma.size != c or beta.size != c:
        return Check.reject("gamma/beta are not constant [C] vectors")
    if groups < 1 or c % groups:
        return Check.reject(f"{c} channels not divisible by {groups} groups")
    out = op.outputs[0]
    act = "none"
    s = silu_after(ctx.sg, out)
    if s is not None:
        act, out = "silu", s[1]
    return Check.accept(
        _Plan(
            x,
            out,
            gamma.reshape(-1),
            beta.reshape(-1),
            groups,
            eps,
            act,
            1 if ca == 1 else -1,
            1 + (2 if s else 0),
            [op],
            False,
        )
    )


def _record(ctx: Context, m: Match, p: _Plan, attrs: GroupNormAttrs, op_type: str, rule: str) -> FusedOp:
    inv = tuple(int(i) for i in np.argsort(p.post_perm)) if p.post_perm is not None else None
    return FusedOp(
        rule,
        m.alternative,
        op_type,
        {**attrs.__dict__},
        ctx.sg_index,
        [
            ref(p.x_in),
            ref(p.x_in, (len(p.gamma),), value=p.gamma.astype(np.float32)),
            ref(p.x_in, (len(p.beta),), value=p.beta.astype(np.float32)),
        ],
        ref(p.out, p.x_in.shape, perm=inv),
        p.replaced,
    )


def _rewrite(ctx: Context, m: Match, p: _Plan) -> FusedOp:
    sg = ctx.sg
    attrs = GroupNormAttrs(
        groups=p.groups, eps=float(np.float32(p.eps)), activation=p.activation, channel_axis=p.channel_axis
    )
    spec = sdops.get("SdGroupNorm")
    g = sg.new_constant("gamma", p.gamma.astype(np.float32))
    b = sg.new_constant("beta", p.beta.astype(np.float32))
    if p.post_perm is None:
        emit_to(
            sg,
            p.out,
            p.x_in.shape or (),
            lambda before, y: custom_op(sg, spec, attrs, [p.x_in, g, b], y, before=before),
        )
    else:
        old = take_output(sg, p.out)
        assert old is not None
        tmp = sg.new_tensor(p.out.name + ";gn", p.x_in.shape or ())
        custom_op(sg, spec, attrs, [p.x_in, g, b], tmp, before=old)
        transpose(sg, tmp, p.post_perm, before=old, out=p.out)
    rec = _record(ctx, m, p, attrs, spec.name, "group_norm")
    rec.inputs[1] = ref(g, value=p.gamma.astype(np.float32))
    rec.inputs[2] = ref(b, value=p.beta.astype(np.float32))
    return rec


RULE = Rule(
    "group_norm",
    (
        Alternative(
            "odml_composite", frozenset({"STABLEHLO_COMPOSITE"}), _composite_pattern, _check_composite, _rewrite
        ),
        Alternative("decomposed", frozenset({"MEAN"}), _pattern, _check_decomposed, _rewrite),
    ),
    __doc__ or "",
)

__all__ = ["RULE"]
