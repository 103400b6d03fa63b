"""A small numpy interpreter for the builtin ops that fusion patterns are made of.

Used for two things: constant folding (e.g. the CLIP causal mask is ``SELECT_V2(const_bool, 0, -inf)``, evaluated
to check it really is causal) and numerically verifying a matched subgraph against the fused op's reference
(:func:`evaluate_region`). It computes in float64 by default, which makes verification exact enough to recover
folded constants (GroupNorm's gamma/beta) to well below float32 precision.

Only ops with unambiguous static semantics are supported; anything else raises :class:`Unsupported`, which
callers turn into a rejection reason. Shapes come from the graph's static output shapes (RESHAPE, SQUEEZE, ...).

Cost: the numeric checks run whole SD1.5 activations through here (the VAE decoder's GroupNorms see 512x512x256
float64 tensors, 537 MB each), so :func:`evaluate_region` avoids copies: float inputs already in ``dtype`` are used
as they are (no ``astype`` copy), RESHAPEs are views, and an elementwise op writes its result into an input buffer
that the region allocated itself and no longer needs (its last use, not fed, not wanted, not shared with a live
view) instead of a fresh array -- a fresh 537 MB array costs more in page faults than the arithmetic on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .ir import Op, Tensor, numpy_dtype


class Unsupported(Exception):
    """The op (or one of its options) has no numpy implementation here."""


def _arr(y: Any) -> np.ndarray:
    """A ufunc result as an array we may write into (ufuncs return numpy scalars for 0-d operands)."""
    return y if isinstance(y, np.ndarray) else np.array(y)


def _act(x: np.ndarray, code: int) -> np.ndarray:
    """The fused activation, in place (``x`` is always a result the caller owns)."""
    if code == 0:
        return x
    if code == 1:
        return np.maximum(x, 0, out=x)
    if code == 2:
        return np.clip(x, -1, 1, out=x)
    if code == 3:
        return np.clip(x, 0, 6, out=x)
    if code == 4:
        return np.tanh(x, out=x) if np.issubdtype(x.dtype, np.floating) else np.tanh(x)
    raise Unsupported(f"fused activation {code}")


def _opt(op: Op, name: str, default: object = None) -> object:
    return getattr(op.options, name, default) if op.options is not None else default


# Elementwise kernels take ``out`` (None: a fresh array); evaluate_region may pass a dead input's buffer as ``out``.
Elementwise = Callable[..., np.ndarray]


def _binary(fn: Elementwise) -> Callable[..., np.ndarray]:
    def run(op: Op, a: list, out: np.ndarray | None = None) -> np.ndarray:
        return _act(_arr(fn(a[0], a[1], out=out)), int(_opt(op, "fusedActivationFunction", 0) or 0))

    return run


def _unary(fn: Elementwise) -> Callable[..., np.ndarray]:
    return lambda op, a, out=None: fn(a[0], out=out)


def _squared_difference(x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    d = _arr(np.subtract(x, y, out=out))
    return np.square(d, out=d)


def _rsqrt(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    r = _arr(np.sqrt(x, out=out))
    return np.divide(1.0, r, out=r)


def _logistic(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    e = _arr(np.negative(x, out=out))
    if not np.issubdtype(e.dtype, np.floating):
        return 1.0 / (1.0 + np.exp(e))
    np.exp(e, out=e)
    np.add(e, 1.0, out=e)
    return np.divide(1.0, e, out=e)


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

# ops whose result may be written into an input's buffer (same shape, float, elementwise)
_ELEMENTWISE: dict[str, Callable[[Op, list, Any], np.ndarray]] = {
    "ADD": _binary(np.add),
    "SUB": _binary(np.subtract),
    "MUL": _binary(np.multiply),
    "DIV": _binary(np.divide),
    "POW": _binary(np.power),
    "MAXIMUM": _binary(np.maximum),
    "MINIMUM": _binary(np.minimum),
    "SQUARED_DIFFERENCE": _binary(_squared_difference),
    "RSQRT": _unary(_rsqrt),
    "SQRT": _unary(np.sqrt),
    "EXP": _unary(np.exp),
    "LOG": _unary(np.log),
    "NEG": _unary(np.negative),
    "ABS": _unary(np.abs),
    "SQUARE": _unary(np.square),
    "TANH": _unary(np.tanh),
    "LOGISTIC": _unary(_logistic),
}

_IMPL: dict[str, Callable[[Op, list], np.ndarray]] = {
    **_ELEMENTWISE,
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


def _promote(x: np.ndarray | None, dtype: type) -> np.ndarray | None:
    """Float inputs in ``dtype`` (no copy when they already are); other dtypes as they are."""
    if x is None or not np.issubdtype(np.asarray(x).dtype, np.floating):
        return x
    return np.asarray(x).astype(dtype, copy=False)


def evaluate_op(
    op: Op, inputs: Sequence[np.ndarray | None], dtype: type = np.float64, *, out: np.ndarray | None = None
) -> np.ndarray:
    """Evaluate a single-output op on numpy inputs (float inputs promoted to ``dtype``).

    ``out``: a buffer of the result's shape and ``dtype`` that an elementwise op may write its result into (it may
    be one of ``inputs``); other ops ignore it. The caller guarantees nothing else reads it afterwards.
    """
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
    args = [_promote(x, dtype) for x in inputs]
    with np.errstate(all="ignore"):
        if out is not None and op.type in _ELEMENTWISE:
            y = np.asarray(_ELEMENTWISE[op.type](op, args, out))
        else:
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
            v = v.astype(dtype, copy=False) if np.issubdtype(v.dtype, np.floating) else v
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


class Scratch:
    """Recycled work buffers for :func:`evaluate_region` and its callers.

    A fresh 537 MB array costs its page faults on first touch -- measured here at 1 to 20 ns per float64
    element depending on memory pressure (transparent huge page compaction), i.e. up to 40x the arithmetic of one
    elementwise pass over it. A numeric check that evaluates the same region on several samples, and keeps its own
    work arrays of the same size, allocates each buffer once and recycles it through here. Only arrays of at least
    :attr:`MIN_ELEMENTS` are kept; dropping the Scratch frees them.
    """

    MIN_ELEMENTS = 1 << 16

    def __init__(self) -> None:
        self._free: dict[tuple[int, str], list[np.ndarray]] = {}

    def take(self, shape: Sequence[int], dtype: Any = np.float64) -> np.ndarray:
        """A writable C-contiguous array of ``shape`` with undefined contents: a recycled buffer or a new one."""
        dt = np.dtype(dtype)
        free = self._free.get((math.prod(shape), dt.str))
        return free.pop().reshape(tuple(shape)) if free else np.empty(tuple(shape), dt)

    def give(self, *arrays: np.ndarray) -> None:
        """Hand back buffers (from :meth:`take` or any other) that nothing reads any more, views of them included."""
        for a in arrays:
            if a.size < self.MIN_ELEMENTS or not (a.flags.writeable and a.flags.c_contiguous):
                continue
            free = self._free.setdefault((a.size, a.dtype.str), [])
            if not any(np.may_share_memory(a, f) for f in free):  # handed back twice: keep it once
                free.append(a.reshape(-1))


def _donor(
    op: Op, i: int, args: list, vals: dict[int, np.ndarray], owned: set[int], last_use: dict[int, int], dtype: type
) -> np.ndarray | None:
    """An input buffer ``op`` (the ``i``-th op) may overwrite with its result, or None.

    Only arrays this region allocated itself (``owned``: op results that are not views of anything), at their last
    use, of the result's exact shape and dtype, and not overlapping any other live value (a RESHAPE view of it
    that is still needed, a feed, a wanted output) qualify. Feeds and constants are never ``owned``.
    """
    if op.type not in _ELEMENTWISE:
        return None
    out_t = op.outputs[0]
    out_np = numpy_dtype(out_t.dtype)
    if out_t.shape is None or (out_np is not None and not np.issubdtype(out_np, np.floating)):
        return None
    try:
        shape = np.broadcast_shapes(*(np.shape(a) for a in args if a is not None))
    except ValueError:
        return None
    if shape != tuple(out_t.shape) or not shape:
        return None
    for t, a in zip(op.inputs, args):
        if t is None or id(t) not in owned or last_use.get(id(t)) != i or a.shape != shape or a.dtype != dtype:
            continue
        if not (a.flags.writeable and a.flags.c_contiguous):
            continue
        if any(k != id(t) and np.may_share_memory(v, a) for k, v in vals.items()):
            continue
        return a
    return None


def _writes_float(op: Op, args: list) -> bool:
    """An elementwise op whose float result is worth a recycled buffer (large, static shape, float output)."""
    out_t = op.outputs[0]
    out_np = numpy_dtype(out_t.dtype)
    if op.type not in _ELEMENTWISE or out_t.shape is None or out_t.numel < Scratch.MIN_ELEMENTS:
        return False
    if out_np is not None and not np.issubdtype(out_np, np.floating):
        return False
    try:
        shape = np.broadcast_shapes(*(np.shape(a) for a in args if a is not None))
    except ValueError:
        return False
    floats = all(np.issubdtype(np.asarray(a).dtype, np.floating) for a in args if a is not None)
    return shape == tuple(out_t.shape) and floats


def _hands_over(t: Tensor | None, i: int, owned: set[int], last_use: dict[int, int]) -> bool:
    """The input of a view op (the ``i``-th op) is an owned buffer at its last use."""
    return t is not None and id(t) in owned and last_use.get(id(t)) == i


def evaluate_region(
    ops: Iterable[Op],
    feeds: dict[int, np.ndarray],
    wanted: Sequence[Tensor],
    *,
    dtype: type = np.float64,
    scratch: Scratch | None = None,
) -> list[np.ndarray]:
    """Run ``ops`` (in the given, topological order) with tensor values ``feeds`` (``id(tensor)`` -> array).

    Inputs that are neither fed nor produced inside the region must be constant-computable; otherwise
    :class:`Unsupported` is raised with the tensor's name. Feeds are only read; intermediates are freed after their
    last use, and elementwise ops reuse a dead intermediate's buffer (see :func:`_donor`). With ``scratch``, an
    elementwise result that has no such buffer takes one from it and dead intermediates go back to it; the wanted
    outputs may then live in its buffers (hand them back when done).
    """
    ops = list(ops)
    vals: dict[int, np.ndarray] = dict(feeds)
    keep = {id(t) for t in wanted} | set(feeds)
    owned: set[int] = set()  # tensors whose value is an array this region allocated (not a view, not an input)
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
        args = [_promote(a, dtype) for a in args]
        out = _donor(op, i, args, vals, owned - keep, last_use, dtype)
        taken = out is None and scratch is not None and _writes_float(op, args)
        if taken:
            out = scratch.take(op.outputs[0].shape or (), dtype)
        y = evaluate_op(op, args, dtype, out=out)
        o = id(op.outputs[0])
        vals[o] = y
        if y is out or (y.base is None and not any(y is a for a in args if a is not None)):
            owned.add(o)
        elif op.type in _SHAPE_FROM_OUTPUT and _hands_over(op.inputs[0], i, owned - keep, last_use):
            owned.add(o)  # a view of a buffer that dies here: the view owns it now (RESHAPE -> MUL gamma in place)
        if taken and y is not out and scratch is not None and out is not None:
            scratch.give(out)  # not used after all
        for t in op.inputs:  # free intermediates nobody needs any more (SD1.5-sized regions are ~20 MB each)
            if t is not None and last_use.get(id(t)) == i and id(t) not in keep:
                v = vals.pop(id(t), None)
                if id(t) in owned and v is not None and v is not y and scratch is not None:
                    if not any(np.may_share_memory(v, w) for w in vals.values()):
                        scratch.give(v)
                owned.discard(id(t))
    missing = [t.name for t in wanted if id(t) not in vals]
    if missing:
        raise Unsupported(f"region does not produce {missing}")
    return [vals[id(t)] for t in wanted]


__all__ = ["SUPPORTED_OPS", "Scratch", "Unsupported", "constant_value", "evaluate_op", "evaluate_region"]
