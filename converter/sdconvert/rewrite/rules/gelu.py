"""GELU -> ``SdGelu`` (one read + one write instead of up to 8 elementwise ops).

Alternatives:
- ``builtin``: the ``GELU`` builtin (litert-torch's lowering of ``F.gelu``: SD's GEGLU feed-forward); its
  ``approximate`` option selects ``"tanh"`` or ``"none"`` (erf). TFLite has no ERF builtin, so the exact form only
  ever arrives this way.
- ``quick``: ``x * LOGISTIC(1.702 * x)`` (CLIP's ``quick_gelu``). SiLU (``x * LOGISTIC(x)``) has no scaling MUL and
  does not match.
- ``tanh_chain``: the decomposed tanh approximation ``0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`` in any
  arrangement of MUL/ADD/POW (anchor ``TANH``).

Chains are verified numerically: the matched ops are evaluated in float64 on a grid over [-8, 8] and must equal the
reference of the chosen ``approximate`` mode within 1e-6 (relative to max(1, |y|)); otherwise the site is rejected.
"""

from __future__ import annotations

import math

import numpy as np

from ... import ops as sdops
from ...graph.evaluate import Unsupported, evaluate_region
from ...graph.ir import Op, Tensor
from ...ops.gelu import GeluAttrs
from ..edit import custom_op, emit_to
from ..engine import Alternative, Check, Context, FusedOp, Match, Rule, ref
from ..match import FLOAT32, backward_slice, data_and_scale, is_const, is_single_exit, scalar

TOLERANCE = 1e-6
_POINTWISE = frozenset({"MUL", "ADD", "SUB", "DIV", "POW", "SQUARE", "TANH", "LOGISTIC", "NEG"})
_GRID = np.concatenate([np.linspace(-8.0, 8.0, 4001), [-1e-3, 1e-3, 0.0]])


def _reference(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if mode == "quick":
        return x / (1.0 + np.exp(-1.702 * x))
    return 0.5 * x * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2.0)))


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
    ref_y = _reference(_GRID, mode)
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
        Alternative("builtin", frozenset({"GELU"}), _builtin_pattern, _builtin_check, _rewrite),
        Alternative("quick", frozenset({"LOGISTIC"}), _quick_pattern, _chain_check("quick"), _rewrite),
        Alternative("tanh_chain", frozenset({"TANH"}), _tanh_pattern, _chain_check("tanh"), _rewrite),
    ),
    __doc__ or "",
)

__all__ = ["RULE"]
