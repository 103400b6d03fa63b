"""Static shape and type rules of the builtin ops the delegate's GPU backends run, for the model validator.

TFLite's CPU kernels recompute every output shape when the interpreter is prepared (and refuse inconsistent ones);
the GPU backends build their kernels from the shapes written in the file. A model whose written shapes disagree with
what its ops compute would therefore fail on the CPU and run (on made-up shapes) on the GPU. The validator refuses it
up front instead: for each op below, the output shape and type the inputs imply (the rules of TFLite's reference
kernels, ``tensorflow/lite/kernels/*.cc`` ``Prepare``) must be the one the file states. An op not listed here is not
judged (TFLite and the backends decide), and nor is one whose shape operand (RESHAPE's new shape...) is not a
constant.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

FLOAT32, FLOAT16, INT32, UINT8, INT64, BOOL, INT16, INT8 = 0, 1, 2, 3, 4, 6, 7, 9
INDEX_TYPES = (INT32, INT64)
_NP = {INT32: "<i4", INT64: "<i8"}


class ShapeError(ValueError):
    """The op's inputs and outputs do not fit its rules (one-line reason)."""


@dataclass(frozen=True)
class TensorView:
    shape: tuple[int, ...]
    type: int
    data: Callable[[], np.ndarray | None]  # constant values (None: not a constant)


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def _const_ints(t: TensorView, what: str) -> list[int] | None:
    if t.type not in INDEX_TYPES:
        raise ShapeError(f"{what} must be int32 or int64")
    values = t.data()
    return None if values is None else [int(v) for v in values.reshape(-1)]


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0} - {1}
        if len(dims) > 1:
            raise ShapeError(f"shapes {' and '.join(_shape(s) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def _same_type(ins: list[TensorView], what: str = "inputs") -> int:
    types = {t.type for t in ins}
    if len(types) > 1:
        raise ShapeError(f"{what} have different types {sorted(types)}")
    return types.pop()


# -- the rules: (inputs, options) -> (output shape, output type), or None when it cannot be known statically -------

Rule = Callable[[list[TensorView], Any], "tuple[tuple[int, ...], int] | None"]


def _unary(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    return ins[0].shape, ins[0].type


def _binary(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    return _broadcast(ins[0].shape, ins[1].shape), _same_type(ins)


def _select(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    if ins[0].type != BOOL:
        raise ShapeError("condition must be bool")
    return _broadcast(*(t.shape for t in ins)), _same_type(ins[1:], "values")


def _dequantize(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    if ins[0].type not in (INT8, UINT8, INT16, FLOAT16):
        raise ShapeError(f"input type {ins[0].type} cannot be dequantized")
    return ins[0].shape, FLOAT32


def _reshape(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int] | None:
    if len(ins) > 1:
        new = _const_ints(ins[1], "the new shape")
    elif opts is not None and opts.get(4) is not None:
        new = list(opts.get(4))
    else:
        return None
    if new is None:
        return None
    n = int(np.prod(ins[0].shape, dtype=np.int64))
    if new.count(-1) > 1 or any(d < -1 for d in new):
        raise ShapeError(f"invalid new shape {new}")
    if -1 in new:
        rest = int(np.prod([d for d in new if d != -1], dtype=np.int64))
        if rest == 0 or n % rest:
            raise ShapeError(f"cannot reshape {_shape(ins[0].shape)} to {new}")
        new = [n // rest if d == -1 else d for d in new]
    if int(np.prod(new, dtype=np.int64)) != n:
        raise ShapeError(f"cannot reshape {_shape(ins[0].shape)} ({n} elements) to {_shape(tuple(new))}")
    return tuple(new), ins[0].type


def _transpose(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int] | None:
    perm = _const_ints(ins[1], "the permutation")
    if perm is None:
        return None
    if sorted(perm) != list(range(len(ins[0].shape))):
        raise ShapeError(f"{perm} is not a permutation of the axes of {_shape(ins[0].shape)}")
    return tuple(ins[0].shape[p] for p in perm), ins[0].type


def _broadcast_to(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int] | None:
    shape = _const_ints(ins[1], "the shape")
    if shape is None:
        return None
    out = _broadcast(ins[0].shape, tuple(shape))
    if out != tuple(shape):
        raise ShapeError(f"{_shape(ins[0].shape)} does not broadcast to {_shape(tuple(shape))}")
    return out, ins[0].type


def _slice(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int] | None:
    begin, size = _const_ints(ins[1], "begin"), _const_ints(ins[2], "size")
    if begin is None or size is None:
        return None
    x = ins[0].shape
    if len(begin) != len(x) or len(size) != len(x):
        raise ShapeError(f"begin {begin} / size {size} do not match the rank of {_shape(x)}")
    out = []
    for b, s, d in zip(begin, size, x):
        s = d - b if s == -1 else s
        if b < 0 or s < 0 or b + s > d:
            raise ShapeError(f"slice begin {begin} size {size} is outside {_shape(x)}")
        out.append(s)
    return tuple(out), ins[0].type


def _pad(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int] | None:
    pads = _const_ints(ins[1], "the paddings")
    if pads is None:
        return None
    x = ins[0].shape
    if len(pads) != 2 * len(x) or any(p < 0 for p in pads):
        raise ShapeError(f"paddings {pads} do not fit {_shape(x)}")
    return tuple(d + pads[2 * k] + pads[2 * k + 1] for k, d in enumerate(x)), ins[0].type


def _concat(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    rank = len(ins[0].shape)
    axis = _axis(opts.get(4, 0) if opts is not None else 0, rank)
    for t in ins[1:]:
        if len(t.shape) != rank or any(a != b for k, (a, b) in enumerate(zip(t.shape, ins[0].shape)) if k != axis):
            raise ShapeError(f"{_shape(t.shape)} cannot be concatenated with {_shape(ins[0].shape)} on axis {axis}")
    out = list(ins[0].shape)
    out[axis] = sum(t.shape[axis] for t in ins)
    return tuple(out), _same_type(ins)


def _gather(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    params, indices = ins
    if indices.type not in INDEX_TYPES:
        raise ShapeError("indices must be int32 or int64")
    if opts is not None and opts.get(6, 0):
        return None  # batch_dims: not judged
    axis = _axis(opts.get(4, 0) if opts is not None else 0, len(params.shape))
    return params.shape[:axis] + indices.shape + params.shape[axis + 1 :], params.type


def _embedding_lookup(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    ids, params = ins
    if ids.type != INT32 or len(ids.shape) != 1:
        raise ShapeError(f"ids must be a rank-1 int32 tensor, got {_shape(ids.shape)}")
    if len(params.shape) < 2:
        raise ShapeError(f"the table must have rank >= 2, got {_shape(params.shape)}")
    return ids.shape + params.shape[1:], params.type


def _resize_nearest(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int] | None:
    x = ins[0].shape
    size = _const_ints(ins[1], "the size")
    if len(x) != 4:
        raise ShapeError(f"input must be rank 4, got {_shape(x)}")
    if size is None:
        return None
    if len(size) != 2 or min(size) < 1:
        raise ShapeError(f"size {size} is not two positive dims")
    return (x[0], size[0], size[1], x[3]), ins[0].type


def _reduce(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int] | None:
    axes = _const_ints(ins[1], "the axes")
    if axes is None:
        return None
    x = ins[0].shape
    norm = {_axis(a, len(x)) for a in axes}
    keep = bool(opts.get(4, False)) if opts is not None else False
    out = tuple(1 if k in norm else d for k, d in enumerate(x)) if keep else tuple(
        d for k, d in enumerate(x) if k not in norm)
    return out, ins[0].type


def _fully_connected(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    x, w = ins[0], ins[1]
    if len(w.shape) != 2:
        raise ShapeError(f"weights must be rank 2, got {_shape(w.shape)}")
    n, k = w.shape
    if not x.shape or k == 0 or int(np.prod(x.shape, dtype=np.int64)) % k:
        raise ShapeError(f"input {_shape(x.shape)} does not split into rows of {k}")
    if len(ins) > 2 and ins[2] is not None and ins[2].shape not in ((n,), (1, n)):
        raise ShapeError(f"bias {_shape(ins[2].shape)} does not match {n} outputs")
    keep = bool(opts.get(8, False)) if opts is not None else False
    if keep:
        if x.shape[-1] != k:
            raise ShapeError(f"input {_shape(x.shape)} does not end in {k}")
        return x.shape[:-1] + (n,), x.type
    return (int(np.prod(x.shape, dtype=np.int64)) // k, n), x.type


def _batch_matmul(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    a, b = ins[0].shape, ins[1].shape
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"operands {_shape(a)} and {_shape(b)} must have rank >= 2")
    adj_x = bool(opts.get(4, False)) if opts is not None else False
    adj_y = bool(opts.get(6, False)) if opts is not None else False
    m, ka = (a[-1], a[-2]) if adj_x else (a[-2], a[-1])
    kb, n = (b[-1], b[-2]) if adj_y else (b[-2], b[-1])
    if ka != kb:
        raise ShapeError(f"{_shape(a)} x {_shape(b)}: inner dims {ka} and {kb} differ")
    return _broadcast(a[:-2], b[:-2]) + (m, n), _same_type(ins[:2])


def _conv2d(ins: list[TensorView], opts: Any) -> tuple[tuple[int, ...], int]:
    x, f = ins[0].shape, ins[1].shape
    if len(x) != 4 or len(f) != 4:
        raise ShapeError(f"input {_shape(x)} and filter {_shape(f)} must be rank 4")
    if f[3] == 0 or x[3] % f[3]:
        raise ShapeError(f"input channels {x[3]} are not a multiple of the filter's {f[3]}")
    if len(ins) > 2 and ins[2] is not None and ins[2].shape != (f[0],):
        raise ShapeError(f"bias {_shape(ins[2].shape)} does not match {f[0]} filters")
    get = (lambda slot, default: opts.get(slot, default)) if opts is not None else (lambda slot, default: default)
    valid, sw, sh, dw, dh = get(4, 0) == 1, get(6, 0), get(8, 0), get(12, 1), get(14, 1)
    if min(sw, sh, dw, dh) < 1:
        raise ShapeError(f"strides ({sh}, {sw}) and dilations ({dh}, {dw}) must be >= 1")

    def out(size: int, k: int, s: int, d: int) -> int:
        span = (k - 1) * d + 1
        n = (size - span + s) // s if valid else (size + s - 1) // s
        if n < 1:
            raise ShapeError(f"input {_shape(x)} is smaller than the filter {_shape(f)}")
        return n

    return (x[0], out(x[1], f[1], sh, dh), out(x[2], f[2], sw, dw), f[0]), ins[0].type


# builtin code -> (name, (min inputs, max inputs), outputs, rule)
RULES: dict[int, tuple[str, tuple[int, int], int, Rule]] = {
    0: ("ADD", (2, 2), 1, _binary), 41: ("SUB", (2, 2), 1, _binary), 18: ("MUL", (2, 2), 1, _binary),
    42: ("DIV", (2, 2), 1, _binary), 99: ("SQUARED_DIFFERENCE", (2, 2), 1, _binary),
    55: ("MAXIMUM", (2, 2), 1, _binary), 57: ("MINIMUM", (2, 2), 1, _binary), 78: ("POW", (2, 2), 1, _binary),
    14: ("LOGISTIC", (1, 1), 1, _unary), 76: ("RSQRT", (1, 1), 1, _unary), 66: ("SIN", (1, 1), 1, _unary),
    108: ("COS", (1, 1), 1, _unary), 47: ("EXP", (1, 1), 1, _unary), 73: ("LOG", (1, 1), 1, _unary),
    75: ("SQRT", (1, 1), 1, _unary), 59: ("NEG", (1, 1), 1, _unary), 101: ("ABS", (1, 1), 1, _unary),
    28: ("TANH", (1, 1), 1, _unary), 92: ("SQUARE", (1, 1), 1, _unary), 19: ("RELU", (1, 1), 1, _unary),
    150: ("GELU", (1, 1), 1, _unary), 25: ("SOFTMAX", (1, 1), 1, _unary), 6: ("DEQUANTIZE", (1, 1), 1, _dequantize),
    123: ("SELECT_V2", (3, 3), 1, _select), 22: ("RESHAPE", (1, 2), 1, _reshape),
    39: ("TRANSPOSE", (2, 2), 1, _transpose), 130: ("BROADCAST_TO", (2, 2), 1, _broadcast_to),
    65: ("SLICE", (3, 3), 1, _slice), 34: ("PAD", (2, 2), 1, _pad), 2: ("CONCATENATION", (1, 64), 1, _concat),
    36: ("GATHER", (2, 2), 1, _gather), 7: ("EMBEDDING_LOOKUP", (2, 2), 1, _embedding_lookup),
    97: ("RESIZE_NEAREST_NEIGHBOR", (2, 2), 1, _resize_nearest), 40: ("MEAN", (2, 2), 1, _reduce),
    74: ("SUM", (2, 2), 1, _reduce), 82: ("REDUCE_MAX", (2, 2), 1, _reduce),
    9: ("FULLY_CONNECTED", (2, 3), 1, _fully_connected), 126: ("BATCH_MATMUL", (2, 2), 1, _batch_matmul),
    3: ("CONV_2D", (2, 3), 1, _conv2d),
}
# the options table each rule reads (another table type in the file means the defaults, as in TFLite)
OPTIONS_TABLE = {3: "Conv2DOptions", 9: "FullyConnectedOptions", 2: "ConcatenationOptions", 40: "ReducerOptions",
                 74: "ReducerOptions", 82: "ReducerOptions", 126: "BatchMatMulOptions", 36: "GatherOptions",
                 22: "ReshapeOptions"}
# inputs that may be omitted (-1): FULLY_CONNECTED's and CONV_2D's bias
OPTIONAL_INPUTS = {9: {2}, 3: {2}}
# ops whose float inputs the backends compute in float32 only (weights may be quantized: DEQUANTIZE folds them)
_FLOAT_OPS = {9, 126, 3}


def check_op(builtin: int, ins: list[TensorView | None], outs: list[TensorView]) -> str | None:
    """``None`` when the op fits its rule (or has none), else the one-line reason."""
    rule = RULES.get(builtin)
    if rule is None:
        return None
    name, (lo, hi), n_out, infer = rule
    if not lo <= len(ins) <= hi or len(outs) != n_out:
        return f"{name} takes {lo}{'' if lo == hi else f'..{hi}'} inputs and {n_out} output, got {len(ins)} and {len(outs)}"
    optional = OPTIONAL_INPUTS.get(builtin, set())
    for k, t in enumerate(ins):
        if t is None and k not in optional:
            return f"{name} input {k} is missing"
    return None


def infer_op(builtin: int, ins: list[TensorView | None], options: Any) -> tuple[tuple[int, ...], int] | None:
    """The (shape, type) of the op's output by its rule; None when not judged. Raises :class:`ShapeError`."""
    rule = RULES.get(builtin)
    if rule is None:
        return None
    if options is not None and getattr(options, "name", None) != OPTIONS_TABLE.get(builtin):
        options = None
    if builtin in _FLOAT_OPS and ins[0] is not None and ins[0].type != FLOAT32:
        raise ShapeError(f"input must be float32, got type {ins[0].type}")
    return rule[3]([t for t in ins], options)


__all__ = ["OPTIONS_TABLE", "RULES", "ShapeError", "TensorView", "check_op", "infer_op"]
