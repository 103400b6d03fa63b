"""GELU -> ``SdGelu`` (one read + one write instead of up to 8 elementwise ops).

Alternatives:
- ``builtin``: the ``GELU`` builtin (litert-torch's lowering of ``F.gelu``: SD's GEGLU feed-forward); its
  ``approximate`` option selects ``"tanh"`` or ``"none"`` (erf). TFLite has no ERF builtin, so the exact form only
  ever arrives this way.
- ``quick``: ``x * LOGISTIC(1.702 * x)`` (CLIP's ``quick_gelu``). SiLU (``x * LOGISTIC(x)``) has no scaling MUL and
  does not match.
- ``tanh_chain``: the decomposed tanh approximation ``0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`` in any
  arrangement of MUL/ADD/POW (anchor ``TANH``).
- ``geglu`` (tried first): any of the above -- or an ``SdGelu`` already in the model -- whose input is the second
  half of a tensor p [..., 2F] along the last axis and whose output is multiplied by the first half:
  ``MUL(p[..., :F], GELU(p[..., F:]))`` (either operand order), diffusers' GEGLU. The halves may come from
  ``SLICE``, ``STRIDED_SLICE`` (unit strides, no ellipsis/new-axis/shrink masks), ``SPLIT`` or ``SPLIT_V``
  (litert-torch emits two SLICEs). Rewritten to one ``SdGelu(gated=True)`` on p when the halves and the GELU
  output feed nothing else. It is an alternative of this rule rather than a second rule so that ``gelu`` keeps
  counting GELU sites (one rewrite per site, gated or not) instead of rewriting the same site twice.

Chains are verified numerically: the matched ops are evaluated in float64 on a grid over [-8, 8] and must equal the
reference of the chosen ``approximate`` mode within 1e-6 (relative to max(1, |y|)); otherwise the site is rejected.
"""

from __future__ import annotations

import numpy as np

from ... import ops as sdops
from ...graph.evaluate import Unsupported, evaluate_region
from ...graph.ir import Op, Tensor
from ...ops.gelu import GeluAttrs, gelu
from ..edit import custom_op, emit_to
from ..engine import Alternative, Check, CheckFn, Context, FusedOp, Match, PatternFn, Rule, ref
from ..match import (
    FLOAT32,
    activation,
    backward_slice,
    const_value,
    data_and_scale,
    is_const,
    is_single_exit,
    scalar,
    used_only_by,
)

TOLERANCE = 1e-6
_POINTWISE = frozenset({"MUL", "ADD", "SUB", "DIV", "POW", "SQUARE", "TANH", "LOGISTIC", "NEG"})
_GRID = np.concatenate([np.linspace(-8.0, 8.0, 4001), [-1e-3, 1e-3, 0.0]])


def _verify(region: list[Op], x: Tensor, y: Tensor, mode: str) -> str | None:
    """None when the pointwise ``region`` maps x to y like GELU(``mode``); else the reason."""
    for op in region:
        if op.type not in _POINTWISE:
            return f"{op.type} inside the chain"
        for t in op.inputs:
            if t is not None and t is not x and t.producer not in region and scalar(t) is None:
                return "non-scalar constant inside the chain"
    try:
        (got,) = evaluate_region(region, {id(x): _GRID}, [y])
    except (Unsupported, ValueError, IndexError, TypeError) as e:
        return f"cannot evaluate chain: {e}"
    ref_y = gelu(_GRID, mode)
    err = float(np.max(np.abs(got.reshape(-1) - ref_y) / np.maximum(1.0, np.abs(ref_y))))
    return None if err <= TOLERANCE else f"chain differs from GELU({mode}) by {err:.1e}"


# --- builtin -----------------------------------------------------------------------------------------------------


def _builtin_pattern(ctx: Context, op: Op) -> Match | None:
    return Match("builtin", op, [op], dict(x=op.inputs[0], y=op.outputs[0]))


def _builtin_check(ctx: Context, m: Match) -> Check:
    x, y = m.captures["x"], m.captures["y"]
    if x is None or x.dtype != FLOAT32 or y.dtype != FLOAT32:
        return Check.reject("not float32")
    approx = bool(getattr(m.anchor.options, "approximate", False))
    return Check.accept(("tanh" if approx else "none", x, y))


# --- quick: x * sigmoid(1.702 x) -----------------------------------------------------------------------------------


def _quick_pattern(ctx: Context, log: Op) -> Match | None:
    inner = log.inputs[0]
    p = inner.producer if inner is not None else None
    if p is None or p.type != "MUL":
        return None
    ds = data_and_scale(p)
    if ds is None:
        return None
    x, _ = ds
    s = log.outputs[0]
    mul = next((c for c in s.consumers if c.type == "MUL" and {id(i) for i in c.inputs} == {id(x), id(s)}), None)
    if mul is None:
        return None
    return Match("quick", log, [p, log, mul], dict(x=x, y=mul.outputs[0]))


def _chain_check(mode: str):  # noqa: ANN202
    def check(ctx: Context, m: Match) -> Check:
        x, y = m.captures["x"], m.captures["y"]
        if x.dtype != FLOAT32:
            return Check.reject("not float32")
        region = sorted(m.ops, key=ctx.pos)
        if not is_single_exit(ctx.sg, region, y):
            return Check.reject("an intermediate of the chain is used elsewhere")
        reason = _verify(region, x, y, mode)
        return Check.reject(reason) if reason else Check.accept((mode, x, y))

    return check


# --- tanh chain --------------------------------------------------------------------------------------------------


def _tanh_pattern(ctx: Context, th: Op) -> Match | None:
    sg = ctx.sg
    t_in = th.inputs[0]
    if t_in is None:
        return None
    # candidate inputs X: tensors the tanh argument is computed from through pointwise ops, nearest first
    frontier, seen, cands = [t_in], set(), []
    while frontier and len(cands) < 16:
        t = frontier.pop(0)
        if id(t) in seen or is_const(t):
            continue
        seen.add(id(t))
        cands.append(t)
        p = t.producer
        if p is not None and p.type in _POINTWISE:
            frontier.extend(i for i in p.inputs if i is not None)
    start = ctx.pos(th)
    best: Match | None = None
    for x in cands[1:]:
        sl = backward_slice(t_in, [x], max_ops=12)
        if sl is None or not all(o.type in _POINTWISE for o in sl):
            continue
        for op in sg.ops[start + 1 : start + 10]:
            if len(op.outputs) != 1 or op.type not in _POINTWISE:
                continue
            y = op.outputs[0]
            if y.numel != x.numel:
                continue
            region = backward_slice(y, [x], max_ops=16)
            if region is None or not any(o is th for o in region) or not is_single_exit(sg, region, y):
                continue
            m = Match("tanh_chain", th, region, dict(x=x, y=y))
            if _verify(sorted(region, key=ctx.pos), x, y, "tanh") is None:
                return m
            if best is None or len(region) >= len(best.ops):
                best = m  # the largest GELU-shaped region, so the rejection says how far off it is
    return best


# --- geglu: MUL(p[..., :F], GELU(p[..., F:])) -----------------------------------------------------------------


def _full(begin: int, end: int, dim: int) -> tuple[int, int]:
    """Python-style [begin, end) on an axis of extent ``dim``: negative indices wrap, then clamp."""
    b = begin + dim if begin < 0 else begin
    e = end + dim if end < 0 else end
    return min(max(b, 0), dim), min(max(e, 0), dim)


def _ints(t: Tensor | None) -> list[int] | None:
    v = const_value(t, max_ops=0)
    return None if v is None else [int(i) for i in np.asarray(v).reshape(-1)]


def _ranges(op: Op, t: Tensor, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    """Per-axis [start, stop) of ``shape`` that output ``t`` of the slicing ``op`` covers (None: not a plain box)."""
    rank = len(shape)
    if op.type == "SLICE":
        begin, size = _ints(op.inputs[1]), _ints(op.inputs[2])
        if begin is None or size is None or len(begin) != rank or len(size) != rank:
            return None
        return [(b, d if s == -1 else b + s) for b, s, d in zip(begin, size, shape)]
    if op.type == "STRIDED_SLICE":
        o = op.options
        begin, end = _ints(op.inputs[1]), _ints(op.inputs[2])
        strides = _ints(op.inputs[3]) if len(op.inputs) > 3 else None
        if o is None or begin is None or end is None or strides is None or len(begin) != len(end) or len(begin) > rank:
            return None
        if o.ellipsisMask or o.newAxisMask or o.shrinkAxisMask or getattr(o, "offset", False) or set(strides) != {1}:
            return None
        out = []
        for i, d in enumerate(shape):
            if i >= len(begin):
                out.append((0, d))
                continue
            b = 0 if o.beginMask >> i & 1 else begin[i]
            e = d if o.endMask >> i & 1 else end[i]
            out.append(_full(b, e, d))
        return out
    if op.type in ("SPLIT", "SPLIT_V"):
        axis_t = op.inputs[0] if op.type == "SPLIT" else op.inputs[2] if len(op.inputs) > 2 else None
        axis = _ints(axis_t)
        if axis is None or len(axis) != 1:
            return None
        ax = axis[0] + rank if axis[0] < 0 else axis[0]
        n = len(op.outputs)
        if op.type == "SPLIT":
            if n == 0 or shape[ax] % n:
                return None
            sizes = [shape[ax] // n] * n
        else:
            sizes = _ints(op.inputs[1]) or []
            if len(sizes) != n or sizes.count(-1) > 1:
                return None
            if -1 in sizes:
                sizes[sizes.index(-1)] = shape[ax] - sum(v for v in sizes if v != -1)
            if sum(sizes) != shape[ax]:
                return None
        k = next(i for i, o in enumerate(op.outputs) if o is t)
        start = sum(sizes[:k])
        return [(start, start + sizes[k]) if i == ax else (0, d) for i, d in enumerate(shape)]
    return None


_SLICERS = frozenset({"SLICE", "STRIDED_SLICE", "SPLIT", "SPLIT_V"})


def _half(t: Tensor | None) -> tuple[Tensor, int, Op] | None:
    """(p, h, op) when ``t`` is the h-th half (0 = first) of p [..., 2F] along the last axis, cut by one slicing op."""
    op = t.producer if t is not None else None
    if op is None or op.type not in _SLICERS:
        return None
    p = op.inputs[1] if op.type == "SPLIT" else op.inputs[0]
    if p is None or not p.shape or t.shape is None or p.shape[-1] % 2 or p.shape[-1] == 0:
        return None
    shape = tuple(p.shape)
    f = shape[-1] // 2
    if tuple(t.shape) != shape[:-1] + (f,):
        return None
    r = _ranges(op, t, shape)
    if r is None or any(ab != (0, d) for ab, d in zip(r[:-1], shape[:-1])):
        return None
    if r[-1] not in ((0, f), (f, 2 * f)):
        return None
    return p, 0 if r[-1][0] == 0 else 1, op


def _sd_gelu_pattern(ctx: Context, op: Op) -> Match | None:
    """An ``SdGelu`` of the input model (or of an earlier run) as the inner GELU; gated ones are done."""
    try:
        attrs = sdops.get("SdGelu").decode(op.custom_options or b"")
    except sdops.OpAttrError:
        return None
    if attrs.gated:
        return None
    return Match("sd_gelu", op, [op], dict(x=op.inputs[0], y=op.outputs[0], mode=attrs.approximate))


def _sd_gelu_check(ctx: Context, m: Match) -> Check:
    return Check.accept((m.captures["mode"], m.captures["x"], m.captures["y"]))


# anchor op type -> (pattern, check) of the plain GELU alternative that finds the gate's GELU
_INNER: dict[str, tuple[PatternFn, CheckFn]] = {
    "GELU": (_builtin_pattern, _builtin_check),
    "LOGISTIC": (_quick_pattern, _chain_check("quick")),
    "TANH": (_tanh_pattern, _chain_check("tanh")),
    "SdGelu": (_sd_gelu_pattern, _sd_gelu_check),
}


def _geglu_pattern(ctx: Context, op: Op) -> Match | None:
    pattern, _ = _INNER[op.type]
    inner = pattern(ctx, op)
    if inner is None:
        return None
    x, y = inner.captures["x"], inner.captures["y"]
    gate = _half(x)
    if gate is None or gate[1] != 1 or len(y.consumers) != 1:
        return None
    p, _, gate_op = gate
    mul = y.consumers[0]
    if mul.type != "MUL" or len(mul.inputs) != 2 or not any(i is y for i in mul.inputs):
        return None
    v = mul.inputs[1] if mul.inputs[0] is y else mul.inputs[0]
    value = _half(v)
    if value is None or value[0] is not p or value[1] != 0:
        return None
    value_op = value[2]
    slicers = [gate_op] if value_op is gate_op else [value_op, gate_op]
    return Match(
        "geglu",
        op,
        [*slicers, *inner.ops, mul],
        dict(inner=inner, p=p, x=x, y=y, v=v, mul=mul, out=mul.outputs[0], slicers=slicers),
    )


def _geglu_check(ctx: Context, m: Match) -> Check:
    c = m.captures
    inner: Match = c["inner"]
    _, inner_check = _INNER[m.anchor.type]
    res = inner_check(ctx, inner)
    if not res.ok:
        return res
    mode = res.plan[0]
    p, x, y, v, mul, out = c["p"], c["x"], c["y"], c["v"], c["mul"], c["out"]
    if p.dtype != FLOAT32 or out.dtype != FLOAT32:
        return Check.reject("not float32")
    if activation(mul):
        return Check.reject("the MUL has a fused activation")
    if tuple(out.shape or ()) != tuple(v.shape):
        return Check.reject("the MUL broadcasts")
    sg = ctx.sg
    if sg.is_output(y) or not used_only_by(sg, v, [mul]) or not used_only_by(sg, x, inner.ops):
        return Check.reject("a half of the projection or the GELU output is used elsewhere")
    for op in c["slicers"]:  # a SPLIT's outputs are exactly the two halves
        if any(o is not v and o is not x and (o.consumers or sg.is_output(o)) for o in op.outputs):
            return Check.reject("the slicing op has other used outputs")
    return Check.accept(mode)


def _geglu_rewrite(ctx: Context, m: Match, mode: str) -> FusedOp:
    c = m.captures
    p, out = c["p"], c["out"]
    sg = ctx.sg
    attrs = GeluAttrs(approximate=mode, gated=True)
    spec = sdops.get("SdGelu")
    shape = (*p.shape[:-1], p.shape[-1] // 2)
    emit_to(sg, out, shape, lambda before, y: custom_op(sg, spec, attrs, [p], y, before=before))
    return FusedOp("gelu", m.alternative, spec.name, {**attrs.__dict__}, ctx.sg_index, [ref(p)], ref(out, shape),
                   len(m.ops))


# --- rewrite -----------------------------------------------------------------------------------------------------


def _rewrite(ctx: Context, m: Match, plan: tuple[str, Tensor, Tensor]) -> FusedOp:
    mode, x, y = plan
    sg = ctx.sg
    attrs = GeluAttrs(approximate=mode)
    spec = sdops.get("SdGelu")
    emit_to(sg, y, x.shape or (), lambda before, out: custom_op(sg, spec, attrs, [x], out, before=before))
    return FusedOp(
        "gelu", m.alternative, spec.name, {**attrs.__dict__}, ctx.sg_index, [ref(x)], ref(y, x.shape), len(m.ops)
    )


RULE = Rule(
    "gelu",
    (
        Alternative("geglu", frozenset({"GELU", "LOGISTIC", "TANH", "SdGelu"}), _geglu_pattern, _geglu_check,
                    _geglu_rewrite),
        Alternative("builtin", frozenset({"GELU"}), _builtin_pattern, _builtin_check, _rewrite),
        Alternative("quick", frozenset({"LOGISTIC"}), _quick_pattern, _chain_check("quick"), _rewrite),
        Alternative("tanh_chain", frozenset({"TANH"}), _tanh_pattern, _chain_check("tanh"), _rewrite),
    ),
    __doc__ or "",
)

__all__ = ["RULE"]
