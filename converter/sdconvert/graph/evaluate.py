"""A small numpy interpreter for the builtin ops that fusion patterns are made of.

Used for two things: constant folding (e.g. the CLIP causal mask is ``SELECT_V2(const_bool, 0, -inf)``, evaluated
to check it really is causal) and numerically verifying a matched subgraph against the fused op's reference
(:func:`evaluate_region`). It computes in float64 by default, which makes verification exact enough to recover
folded constants (GroupNorm's gamma/beta) to well below float32 precision.

Only ops with unambiguous static semantics are supported; anything else raises :class:`Unsupported`, which
callers turn into a rejection reason. Shapes come from the graph's static output shapes (RESHAPE, SQUEEZE, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from .ir import Op, Tensor, numpy_dtype


class Unsupported(Exception):
    """The op (or one of its options) has no numpy implementation here."""


def _act(x: np.ndarray, code: int) -> np.ndarray:
    if code == 0:
        return x
    if code == 1:
        return np.maximum(x, 0)
    if code == 2:
        return np.clip(x, -1, 1)
    if code == 3:
        return np.clip(x, 0, 6)
    if code == 4:
        return np.tanh(x)
    raise Unsupported(f"fused activation {code}")


def _opt(op: Op, name: str, default: object = None) -> object:
    return getattr(op.options, name, default) if op.options is not None else default


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Op, list], np.ndarray]:
    def run(op: Op, a: list) -> np.ndarray:
        return _act(fn(a[0], a[1]), int(_opt(op, "fusedActivationFunction", 0) or 0))

    return run


def _unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Op, list], np.ndarray]:
    return lambda op, a: fn(a[0])


def _axes(a: np.ndarray, rank: int) -> tuple[int, ...]:
    return tuple(sorted({int(x) % rank for x in np.asarray(a).reshape(-1)}))


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[[Op, list], np.ndarray]:
    def run(op: Op, a: list) -> np.ndarray:
        keep = bool(_opt(op, "keepDims", False))
        return fn(a[0], axis=_axes(a[1], a[0].ndim), keepdims=keep)

    return run


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _gelu(op: Op, a: list) -> np.ndarray:
    x = a[0]
    if bool(_opt(op, "approximate", False)):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _softmax(op: Op, a: list) -> np.ndarray:
    beta = float(_opt(op, "beta", 1.0) or 1.0)
    z = a[0] * beta
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _fully_connected(op: Op, a: list) -> np.ndarray:
    x, w = a[0], a[1]
    y = x.reshape(-1, w.shape[-1]) @ w.T
    if len(a) > 2 and a[2] is not None:
        y = y + a[2]
    return _act(y, int(_opt(op, "fusedActivationFunction", 0) or 0))


def _batch_matmul(op: Op, a: list) -> np.ndarray:
    x, y = a[0], a[1]
    if bool(_opt(op, "adjX", False)):
        x = np.swapaxes(x, -1, -2)
    if bool(_opt(op, "adjY", False)):
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x, y)


def _concat(op: Op, a: list) -> np.ndarray:
    return _act(np.concatenate(a, axis=int(_opt(op, "axis", 0) or 0)), int(_opt(op, "fusedActivationFunction", 0) or 0))


def _slice(op: Op, a: list) -> np.ndarray:
    begin = [int(v) for v in np.asarray(a[1]).reshape(-1)]
    size = [int(v) for v in np.asarray(a[2]).reshape(-1)]
    idx = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))
    return a[0][idx]


def _dequantize(op: Op, a: list) -> np.ndarray:
    t = op.inputs[0]
    q = t.quantization if t is not None else None
    scale = getattr(q, "scale", None) if q is not None else None
    if scale is None or len(scale) == 0:  # float16 -> float32
        return a[0].astype(np.float64)
    zp = np.asarray(getattr(q, "zeroPoint", None) or [0] * len(scale), np.float64)
    s = np.asarray(scale, np.float64)
    if len(s) > 1:
        shape = [1] * a[0].ndim
        shape[int(getattr(q, "quantizedDimension", 0) or 0)] = -1
        s, zp = s.reshape(shape), zp.reshape(shape)
    return (a[0].astype(np.float64) - zp) * s


def _select(op: Op, a: list) -> np.ndarray:
    return np.where(a[0].astype(bool), a[1], a[2])


_SHAPE_FROM_OUTPUT = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS"})

_IMPL: dict[str, Callable[[Op, list], np.ndarray]] = {
    "ADD": _binary(np.add),
    "SUB": _binary(np.subtract),
    "MUL": _binary(np.multiply),
    "DIV": _binary(np.divide),
    "POW": _binary(np.power),
    "MAXIMUM": _binary(np.maximum),
    "MINIMUM": _binary(np.minimum),
    "SQUARED_DIFFERENCE": _binary(lambda x, y: (x - y) ** 2),
    "RSQRT": _unary(lambda x: 1.0 / np.sqrt(x)),
    "SQRT": _unary(np.sqrt),
    "EXP": _unary(np.exp),
    "LOG": _unary(np.log),
    "NEG": _unary(np.negative),
    "ABS": _unary(np.abs),
    "SQUARE": _unary(np.square),
    "TANH": _unary(np.tanh),
    "LOGISTIC": _unary(lambda x: 1.0 / (1.0 + np.exp(-x))),
    "GELU": _gelu,
    "SOFTMAX": _softmax,
    "MEAN": _reduce(np.mean),
    "SUM": _reduce(np.sum),
    "REDUCE_MAX": _reduce(np.max),
    "TRANSPOSE": lambda op, a: np.transpose(a[0], [int(p) for p in np.asarray(a[1]).reshape(-1)]),
    "BROADCAST_TO": lambda op, a: np.broadcast_to(a[0], [int(d) for d in np.asarray(a[1]).reshape(-1)]),
    "FULLY_CONNECTED": _fully_connected,
    "BATCH_MATMUL": _batch_matmul,
    "CONCATENATION": _concat,
    "SLICE": _slice,
    "SELECT_V2": _select,
    "SELECT": _select,
    "CAST": lambda op, a: a[0],
    "DEQUANTIZE": _dequantize,
}

SUPPORTED_OPS = frozenset(_IMPL) | _SHAPE_FROM_OUTPUT


def evaluate_op(op: Op, inputs: Sequence[np.ndarray | None], dtype: type = np.float64) -> np.ndarray:
    """Evaluate a single-output op on numpy inputs (float inputs promoted to ``dtype``)."""
    if op.is_custom:
        raise Unsupported(f"custom op {op.type}")
    if len(op.outputs) != 1:
        raise Unsupported(f"{op.type} with {len(op.outputs)} outputs")
    out_t = op.outputs[0]
    if op.type in _SHAPE_FROM_OUTPUT:
        if out_t.shape is None or out_t.shape_signature is not None and any(d < 0 for d in out_t.shape_signature):
            raise Unsupported(f"{op.type} with a dynamic output shape")
        return np.asarray(inputs[0]).reshape(out_t.shape)
    impl = _IMPL.get(op.type)
    if impl is None:
        raise Unsupported(op.type)
    args = [
        None if x is None else (x.astype(dtype) if np.issubdtype(np.asarray(x).dtype, np.floating) else x)
        for x in inputs
    ]
    with np.errstate(all="ignore"):
        y = np.asarray(impl(op, args))
    if out_t.shape is not None and tuple(y.shape) != tuple(out_t.shape) and y.size == out_t.numel:
        y = y.reshape(out_t.shape)  # e.g. FULLY_CONNECTED without keep_num_dims
    out_np = numpy_dtype(out_t.dtype)
    if out_np is not None and not np.issubdtype(out_np, np.floating):
        y = y.astype(out_np)
    return y


def constant_value(t: Tensor | None, *, max_ops: int = 16, dtype: type = np.float64) -> np.ndarray | None:
    """The value of ``t`` if it is a constant or computable from constants alone within ``max_ops`` ops."""
    if t is None:
        return None
    cache: dict[int, np.ndarray] = {}
    budget = [max_ops]

    def value(x: Tensor) -> np.ndarray | None:
        if id(x) in cache:
            return cache[id(x)]
        if x.is_constant:
            try:
                v = x.numpy()
            except ValueError:
                return None
            v = v.astype(dtype) if np.issubdtype(v.dtype, np.floating) else v
        else:
            op = x.producer
            if op is None or budget[0] <= 0 or len(op.outputs) != 1:
                return None
            budget[0] -= 1
            args = []
            for i in op.inputs:
                if i is None:
                    args.append(None)
                    continue
                v_i = value(i)
                if v_i is None:
                    return None
                args.append(v_i)
            try:
                v = evaluate_op(op, args, dtype)
            except (Unsupported, ValueError, IndexError, TypeError):
                return None
        cache[id(x)] = v
        return v

    return value(t)


def evaluate_region(
    ops: Iterable[Op], feeds: dict[int, np.ndarray], wanted: Sequence[Tensor], *, dtype: type = np.float64
) -> list[np.ndarray]:
    """Run ``ops`` (in the given, topological order) with tensor values ``feeds`` (``id(tensor)`` -> array).

    Inputs that are neither fed nor produced inside the region must be constant-computable; otherwise
    :class:`Unsupported` is raised with the tensor's name.
    """
    ops = list(ops)
    vals: dict[int, np.ndarray] = dict(feeds)
    keep = {id(t) for t in wanted} | set(feeds)
    last_use: dict[int, int] = {}
    for i, op in enumerate(ops):
        for t in op.inputs:
            if t is not None:
                last_use[id(t)] = i
    for i, op in enumerate(ops):
        args = []
        for t in op.inputs:
            if t is None:
                args.append(None)
                continue
            if id(t) not in vals:
                c = constant_value(t, dtype=dtype)
                if c is None:
                    raise Unsupported(f"input {t.name!r} of {op.type} is neither fed nor constant")
                vals[id(t)] = c
            args.append(vals[id(t)])
        vals[id(op.outputs[0])] = evaluate_op(op, args, dtype)
        for t in op.inputs:  # free intermediates nobody needs any more (SD1.5-sized regions are ~20 MB each)
            if t is not None and last_use.get(id(t)) == i and id(t) not in keep:
                vals.pop(id(t), None)
    missing = [t.name for t in wanted if id(t) not in vals]
    if missing:
        raise Unsupported(f"region does not produce {missing}")
    return [vals[id(t)] for t in wanted]


__all__ = ["SUPPORTED_OPS", "Unsupported", "constant_value", "evaluate_op", "evaluate_region"]
