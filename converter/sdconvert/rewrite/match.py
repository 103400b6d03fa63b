"""Helpers shared by the fusion rules: constants, single-use checks, layout index maps, subgraph slices.

Layout questions ("is this chain of RESHAPE/TRANSPOSE exactly the multi-head split of a [N,S,H*D] tensor?") are
answered with *index maps*: push ``arange(numel)`` through the chain with numpy and compare with the expected
permutation. That is exact for any combination of reshapes and transposes litert-torch emits, with no case analysis;
it costs one int32 array per candidate (10 MB for SD1.5's largest attention input).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..graph.evaluate import constant_value
from ..graph.ir import Op, Subgraph, Tensor
from ..graph.schema import S

FLOAT32 = S.TensorType.FLOAT32
ELEMENTWISE_BINARY = frozenset({"ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "POW", "MAXIMUM", "MINIMUM"})


def const_value(t: Tensor | None, max_ops: int = 8) -> np.ndarray | None:
    """Constant (or constant-computable) value of ``t`` in float64, else None."""
    if t is None:
        return None
    if t.producer is None and not t.is_constant:
        return None
    return constant_value(t, max_ops=max_ops)


def is_const(t: Tensor | None) -> bool:
    return const_value(t) is not None


def scalar(t: Tensor | None) -> float | None:
    """Value of a constant with exactly one element."""
    if t is None or (t.shape is not None and t.numel != 1):
        return None
    v = const_value(t, max_ops=4)
    if v is None or v.size != 1:
        return None
    return float(np.asarray(v, np.float64).reshape(-1)[0])


def activation(op: Op) -> int:
    return int(getattr(op.options, "fusedActivationFunction", 0) or 0) if op.options is not None else 0


def data_and_scale(op: Op) -> tuple[Tensor, float] | None:
    """For ``MUL(x, c)``, ``MUL(c, x)`` or ``DIV(x, c)`` with scalar constant c and shape-preserving output."""
    if op.type not in ("MUL", "DIV") or len(op.inputs) != 2 or activation(op):
        return None
    a, b = op.inputs
    if a is None or b is None:
        return None
    out = op.outputs[0]
    if op.type == "MUL":
        for x, c in ((a, b), (b, a)):
            s = scalar(c)
            if s is not None and not is_const(x) and x.shape == out.shape:
                return x, s
        return None
    s = scalar(b)
    if s is not None and s != 0 and not is_const(a) and a.shape == out.shape:
        return a, 1.0 / s
    return None


def perm(op: Op) -> tuple[int, ...] | None:
    if op.type != "TRANSPOSE" or len(op.inputs) < 2:
        return None
    v = const_value(op.inputs[1], max_ops=0)
    return None if v is None else tuple(int(p) for p in np.asarray(v).reshape(-1))


def sole_consumer(sg: Subgraph, t: Tensor) -> Op | None:
    cs = t.consumers
    if len(cs) != 1 or sg.is_output(t):
        return None
    return cs[0]


def used_only_by(sg: Subgraph, t: Tensor, ops: Iterable[Op]) -> bool:
    allowed = {id(o) for o in ops}
    return not sg.is_output(t) and all(id(c) in allowed for c in t.consumers)


# --- chains of layout ops ----------------------------------------------------------------------------------------


@dataclass
class Chain:
    """``root`` transformed by ``ops`` (RESHAPE/TRANSPOSE/scalar MUL, forward order) gives the operand."""

    root: Tensor
    ops: list[Op] = field(default_factory=list)
    scale: float = 1.0


def back_chains(t: Tensor, max_len: int = 8) -> list[Chain]:
    """``t`` itself and each ancestor reachable through layout ops or scalar multiplies, nearest first."""
    chains = [Chain(t)]
    cur, ops, scale = t, [], 1.0
    for _ in range(max_len):
        op = cur.producer
        if op is None:
            break
        if op.type in ("RESHAPE", "TRANSPOSE"):
            if op.type == "TRANSPOSE" and perm(op) is None:
                break
            nxt, s = op.inputs[0], 1.0
        else:
            ds = data_and_scale(op)
            if ds is None:
                break
            nxt, s = ds
        if nxt is None or nxt.shape is None:
            break
        ops = [op] + ops
        scale *= s
        cur = nxt
        chains.append(Chain(cur, list(ops), scale))
    return chains


def apply_layout(values: np.ndarray, ops: Sequence[Op]) -> np.ndarray:
    """Push an array through RESHAPE/TRANSPOSE ops (scalar multiplies leave an index map unchanged)."""
    for op in ops:
        if op.type == "RESHAPE":
            values = values.reshape(op.outputs[0].shape)
        elif op.type == "TRANSPOSE":
            values = np.transpose(values, perm(op))
    return values


def iota(shape: Sequence[int]) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    return np.arange(n, dtype=np.int32 if n < 2**31 else np.int64).reshape(tuple(shape))


# --- slices ------------------------------------------------------------------------------------------------------


def backward_slice(t: Tensor, stop: Sequence[Tensor], max_ops: int = 64) -> list[Op] | None:
    """Ops computing ``t`` from the ``stop`` tensors and constants (None if it needs any other input or is too big)."""
    stop_ids = {id(s) for s in stop}
    seen: dict[int, Op] = {}
    const_cache: dict[int, bool] = {}
    stack = [t]
    while stack:
        x = stack.pop()
        if id(x) in stop_ids:
            continue
        op = x.producer
        if op is None:
            if x.is_constant:
                continue
            return None
        if id(op) in seen:
            continue
        if id(x) not in const_cache:
            const_cache[id(x)] = not op.is_custom and is_const(x)
        if const_cache[id(x)]:
            continue
        seen[id(op)] = op
        if len(seen) > max_ops:
            return None
        stack.extend(i for i in op.inputs if i is not None)
    return list(seen.values())


def is_single_exit(sg: Subgraph, ops: Sequence[Op], exit_tensor: Tensor) -> bool:
    """Every tensor produced inside ``ops`` other than ``exit_tensor`` is consumed only inside ``ops``."""
    inside = {id(o) for o in ops}
    for op in ops:
        for t in op.outputs:
            if t is exit_tensor:
                continue
            if sg.is_output(t) or any(id(c) not in inside for c in t.consumers):
                return False
    return True


def silu_after(sg: Subgraph, t: Tensor) -> tuple[list[Op], Tensor] | None:
    """``t`` feeds exactly ``MUL(t, LOGISTIC(t))``: returns (the two ops, the MUL output)."""
    if sg.is_output(t):
        return None
    cs = t.consumers
    if len(cs) != 2:
        return None
    log = next((c for c in cs if c.type == "LOGISTIC"), None)
    mul = next((c for c in cs if c.type == "MUL"), None)
    if log is None or mul is None or activation(mul):
        return None
    s = log.outputs[0]
    if sorted([id(x) for x in mul.inputs]) != sorted([id(t), id(s)]):
        return None
    if sole_consumer(sg, s) is not mul:
        return None
    return [log, mul], mul.outputs[0]


__all__ = [
    "Chain",
    "ELEMENTWISE_BINARY",
    "FLOAT32",
    "activation",
    "apply_layout",
    "back_chains",
    "backward_slice",
    "const_value",
    "data_and_scale",
    "iota",
    "is_const",
    "is_single_exit",
    "perm",
    "scalar",
    "silu_after",
    "sole_consumer",
    "used_only_by",
]
