"""The model validator: what every entry point (``sdconvert inspect`` / ``optimize``, ``sdlite bench`` / ``generate``,
the library's ``open_runner``) runs on a .tflite before anything else reads it.

1. Flatbuffer verification (:mod:`sdlite.flatbuffer_verify`): every offset, vector and string inside the file.
2. Bounds: opcode, buffer, tensor and subgraph indices in range (-1 only for an input the op may omit); buffer
   data inside the file and of the size its tensor's shape and type need; known tensor types; shapes with
   non-negative dims, at most 16 of them and at most 2^40 elements, no empty (zero-sized) activations; every tensor an
   op reads is a constant, a graph input or written by an earlier op; no op writes a constant or a tensor another
   op writes; graph outputs that something produces; signatures whose tensors are their subgraph's inputs and
   outputs; no custom op but the delegate's ``Sd*`` ops (nothing else has a kernel in sdlite). TFLite reads some of
   these unchecked (a graph output of -1, a SLICE without its begin crash it), so they are refused here.
3. Shapes and types of the builtin ops the GPU backends run (:mod:`sdlite.shape_rules`): the output each op's inputs
   imply must be the one written in the file, as TFLite's CPU kernels recompute it while the GPU backends read it.
4. Fused ``Sd*`` ops: their opcode version, input/output counts, options, shape rule and output, judged by the
   delegate's own C++ check (:func:`sdlite.native.check_node`, the code that decides whether the running delegate
   claims a node), so what passes here runs on every backend and what fails is refused everywhere, with the same
   reason.

Structural problems raise :class:`InvalidModelError` (one line); fused-op problems are listed per op in the
returned :class:`ModelCheck` (``sdconvert inspect`` shows them all), and :meth:`ModelCheck.raise_for_fused` turns the
first into the same error.
"""
from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sdlite.errors import SdliteError
from sdlite.flatbuffer_verify import FlatbufferError, Table, parse_model_buffer
from sdlite.shape_rules import ShapeError, TensorView, check_op, infer_op
from sdlite.tflite_info import CUSTOM_CODE, FUSED_OP_PREFIX, ModelInfo, buffer_size, describe

MAX_RANK = 16
MAX_ELEMENTS = 2**40
# bytes per element of the schema's TensorType values (0 = not a fixed-size type: string, resource, variant)
_ITEMSIZE = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 5: 0, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 11: 16, 12: 8, 13: 0, 14: 0, 15: 4,
             16: 2, 17: 0, 18: 2, 19: 0, 20: 0, 21: 1, 22: 1}
# builtin op -> inputs TFLite lets a model omit (index -1): the bias of FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D
# and TRANSPOSE_CONV; any input of the LSTM family and SVDF. Elsewhere a kernel reads tensor -1 (TFLite's SLICE
# crashes on it), so the validator refuses it.
_OMITTABLE = {9: (2,), 3: (2,), 4: (2,), 67: (3,)}
_ANY_OMITTABLE = {16, 44, 52, 27}
_INDEX_DTYPES = {2: "<i4", 4: "<i8"}  # int32, int64: the shape operands the shape rules read
# builtin code -> (its options table, the vtable slots of its subgraph indices): WHILE, IF, CALL_ONCE
_CONTROL_FLOW = {119: ("WhileOptions", (4, 6)), 118: ("IfOptions", (4, 6)), 129: ("CallOnceOptions", (4,))}


class InvalidModelError(SdliteError):
    """The file is not a model every backend would run the same way; the message is one line naming the file."""


@dataclass(frozen=True)
class FusedOp:
    """One ``Sd*`` op as the file describes it, and the delegate's verdict (``error`` None = it would be claimed)."""

    subgraph: int
    index: int
    op: str
    version: int
    inputs: tuple[tuple[int, ...] | None, ...]  # shapes; None = omitted optional input
    outputs: tuple[tuple[int, ...], ...]
    options: bytes | None
    error: str | None


# (op name, version, options, inputs, outputs) -> (ok, reason); inputs/outputs as sdlite.native.NodeTensor
OpChecker = Callable[[str, int, "bytes | None", list, list], "tuple[bool, str]"]


@dataclass(frozen=True)
class SignatureShapes:
    key: str
    inputs: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape)
    outputs: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class ModelCheck:
    label: str
    info: ModelInfo  # facts about the main subgraph (sdlite.tflite_info)
    fused: tuple[FusedOp, ...]
    checked_by: str  # who judged the fused ops: "sdgpu delegate" or why nobody did
    op_histogram: dict[str, int]  # every subgraph's ops by name, most frequent first
    num_ops: int
    signatures: tuple[SignatureShapes, ...]

    @property
    def invalid_fused(self) -> tuple[FusedOp, ...]:
        return tuple(f for f in self.fused if f.error is not None)

    def raise_for_fused(self) -> None:
        bad = self.invalid_fused
        if bad:
            f = bad[0]
            more = f" (and {len(bad) - 1} more fused op(s))" if len(bad) > 1 else ""
            raise InvalidModelError(f"{self.label}: op {f.index} ({f.op}): {f.error}{more}")


def native_op_checker() -> tuple[OpChecker | None, str]:
    """The delegate's node check when the library is built, else ``(None, why not)``."""
    from sdlite import native

    try:
        native.version()
    except native.NativeDelegateError as exc:
        return None, f"not checked: {exc}"

    def check(name: str, version: int, options: bytes | None, inputs: list, outputs: list) -> tuple[bool, str]:
        try:
            return native.check_node(name, version, options, inputs, outputs)
        except native.NativeDelegateError:
            return False, "unknown Sd* custom op"

    return check, "sdgpu delegate"


def check_model(path: Path | str | None = None, *, content: bytes | None = None, label: str | None = None,
                op_checker: OpChecker | None = None, checked_by: str | None = None,
                build: bool = False) -> ModelCheck:
    """Validate the .tflite at ``path`` (or the in-memory ``content``). Raises :class:`InvalidModelError`.

    ``op_checker`` judges the fused ops; by default the delegate's own check (:func:`native_op_checker`), or none when
    the library is not built (``checked_by`` then says so and no fused op is marked invalid). ``build``: also let
    TFLite build its interpreter from the file (its own flatbuffer verifier, and a kernel for every builtin op at its
    version), without allocating or running anything -- what a caller that builds no interpreter itself needs
    (``sdconvert inspect``); the runtime builds its interpreter right after this check anyway.
    """
    if content is None:
        if path is None:
            raise ValueError("check_model needs a path or content")
        path = Path(path)
        label = label or str(path)
        if not path.is_file():
            raise InvalidModelError(f"model file not found: {path}")
        try:
            with open(path, "rb") as fh:
                if path.stat().st_size == 0:
                    raise InvalidModelError(f"{label} is empty, not a .tflite model")
                buf: Any = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise InvalidModelError(f"cannot read {label}: {exc.strerror or exc}") from None
    else:
        buf, label = content, label or "<memory>"
    if op_checker is None and checked_by is None:
        op_checker, checked_by = native_op_checker()
    try:
        try:
            model = parse_model_buffer(buf)
        except FlatbufferError as exc:
            raise InvalidModelError(exc.about(label)) from None
        result = _Checker(buf, label, op_checker, checked_by or "").run(model, Path(path if path is not None else label))
        if build:
            _tflite_build(path, content, label)
        return result
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _tflite_build(path: Path | str | None, content: bytes | None, label: str) -> None:
    """TFLite's interpreter built from the file, no delegate, nothing allocated; its refusal as one line."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from sdlite._native_stderr import capture_native_stderr

    source = {"model_content": content} if content is not None else {"model_path": str(path)}
    with capture_native_stderr() as log:
        try:
            Interpreter(**source, experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
            failure = None
        except (ValueError, RuntimeError) as exc:
            failure = str(exc).strip() or type(exc).__name__
    if failure is not None:
        raise InvalidModelError(f"{label}: TFLite cannot build it: {log.summary(failure)}")


def validate_model(path: Path | str | None = None, *, content: bytes | None = None,
                   label: str | None = None) -> ModelInfo:
    """:func:`check_model`, refusing a model with an invalid fused op too; returns the model's facts."""
    result = check_model(path, content=content, label=label)
    result.raise_for_fused()
    return result.info


class _Checker:
    """One pass over a verified ``Model`` table. Messages name subgraphs, ops and tensors by index."""

    def __init__(self, buf: Any, label: str, op_checker: OpChecker | None, checked_by: str) -> None:
        self.buf, self.label, self.op_checker, self.checked_by = buf, label, op_checker, checked_by
        self.model: Table | None = None
        self.histogram: dict[str, int] = {}  # op name -> count over every subgraph

    def fail(self, message: str) -> InvalidModelError:
        return InvalidModelError(f"{self.label}: {message}")

    def run(self, model: Table, path: Path) -> ModelCheck:
        self.model = model
        subgraphs = model.get(8, [])
        if not subgraphs:
            raise self.fail("model has no subgraph")
        codes = self._opcodes(model)
        buffer_bytes = self._buffers(model)
        fused: list[FusedOp] = []
        for gi, sg in enumerate(subgraphs):
            fused += self._subgraph(gi, sg, codes, buffer_bytes, len(subgraphs))
        signatures = self._signatures(model, subgraphs)
        for i, m in enumerate(model.get(16, [])):
            if m.get(6, 0) >= len(buffer_bytes):
                raise self.fail(f"metadata {i} refers to buffer {m.get(6, 0)} of {len(buffer_bytes)}")
        for i in model.get(14, ()):
            if not 0 <= i < len(buffer_bytes):
                raise self.fail(f"metadata buffer {i} out of range ({len(buffer_bytes)} buffers)")
        histogram = dict(sorted(self.histogram.items(), key=lambda kv: (-kv[1], kv[0])))
        return ModelCheck(self.label, describe(model, path, len(self.buf)), tuple(fused), self.checked_by, histogram,
                          sum(histogram.values()), signatures)

    def _opcodes(self, model: Table) -> list[tuple[int, str | None, int]]:
        codes = []
        for i, oc in enumerate(model.get(6, [])):
            builtin = max(oc.get(10, 0), oc.get(4, 0))
            if builtin < 0:
                raise self.fail(f"operator code {i} has builtin code {builtin}")
            custom = None
            if builtin == CUSTOM_CODE:
                custom = oc.get(6, "")
                if not custom:
                    raise self.fail(f"operator code {i} is a custom op without a name")
            codes.append((builtin, custom, oc.get(8, 1)))
        return codes

    def _buffers(self, model: Table) -> list[int]:
        """Data bytes of each buffer (0 = none); offset-layout buffers must lie inside the file."""
        size = len(self.buf)
        for i, b in enumerate(model.get(12, [])):
            if b.get(4, (0, 0))[1] == 0 and b.get(6, 0) > 1 and b.get(6, 0) + b.get(8, 0) > size:
                raise self.fail(f"buffer {i} [{b.get(6, 0)}, +{b.get(8, 0)}) lies outside the {size}-byte file")
        return [buffer_size(b) for b in model.get(12, [])]

    def _subgraph(self, gi: int, sg: Table, codes: list[tuple[int, str | None, int]], buffer_bytes: list[int],
                  n_sub: int) -> list[FusedOp]:
        where = f"subgraph {gi}"
        shapes: list[tuple[int, ...]] = []
        types: list[int] = []
        constant: list[bool] = []
        variable: list[bool] = []
        for ti, t in enumerate(sg.get(4, [])):
            shape = tuple(t.get(4, ()))
            ttype = t.get(6, 0)
            name = t.get(10, "")
            if len(name) > 60:  # converters write whole module paths; the end names the tensor
                name = "..." + name[-57:]
            if ttype not in _ITEMSIZE:
                raise self.fail(f"{where} tensor {ti} ({name}): unknown type {ttype}")
            if len(shape) > MAX_RANK or any(d < 0 for d in shape):
                raise self.fail(f"{where} tensor {ti} ({name}): invalid shape {list(shape)}")
            elements = 1
            for d in shape:
                elements *= d
            if elements > MAX_ELEMENTS:
                raise self.fail(f"{where} tensor {ti} ({name}): shape {list(shape)} has more than 2^40 elements")
            b = t.get(8, 0)
            if b >= len(buffer_bytes):
                raise self.fail(f"{where} tensor {ti} ({name}): buffer index {b} out of range "
                                f"({len(buffer_bytes)} buffers)")
            is_const = b > 0 and buffer_bytes[b] > 0
            itemsize = _ITEMSIZE[ttype]
            if is_const and itemsize and t.get(16) is None and buffer_bytes[b] != elements * itemsize:
                raise self.fail(f"{where} tensor {ti} ({name}): {buffer_bytes[b]} bytes of data for shape "
                                f"{list(shape)} ({elements * itemsize} expected)")
            shapes.append(shape)
            types.append(ttype)
            # an empty tensor without data (e.g. the shape operand of a RESHAPE to a scalar) is a constant too
            constant.append(is_const or (elements == 0 and bool(shape)))
            variable.append(bool(t.get(14, False)))
        n_t = len(shapes)
        tensors = sg.get(4, [])

        def index(i: int, what: str, optional: bool = False) -> int:
            if (optional and i == -1) or 0 <= i < n_t:
                return i
            raise self.fail(f"{where} {what}: tensor index {i} out of range ({n_t} tensors)")

        def activation(i: int, what: str) -> int:
            if 0 in shapes[i]:
                raise self.fail(f"{where} {what}: tensor {i} has the empty shape {list(shapes[i])} (a zero-sized "
                                "activation, which the backends do not run alike)")
            return i

        inputs = [activation(index(i, "inputs"), "input") for i in sg.get(6, ())]
        outputs = [activation(index(i, "outputs"), "output") for i in sg.get(8, ())]
        written = set(inputs)
        writer: dict[int, int] = {}
        fused: list[FusedOp] = []
        for oi, op in enumerate(sg.get(10, [])):
            ci = op.get(4, 0)
            if ci >= len(codes):
                raise self.fail(f"{where} op {oi}: opcode index {ci} out of range ({len(codes)} opcodes)")
            builtin, custom, version = codes[ci]
            op_name = custom or _builtin_name(builtin)
            self.histogram[op_name] = self.histogram.get(op_name, 0) + 1
            what = f"op {oi} ({op_name})"
            ins = [index(i, what, optional=True) for i in op.get(6, ())]
            outs = [index(i, what) for i in op.get(8, ())]
            for i in op.get(20, ()):
                index(i, what)
            for k, i in enumerate(ins):
                if i == -1 and custom is None and k not in _OMITTABLE.get(builtin, ()) and builtin not in _ANY_OMITTABLE:
                    raise self.fail(f"{where} {what}: input {k} is missing (-1), which this op does not allow")
                if i >= 0 and not (constant[i] or variable[i] or i in written):
                    raise self.fail(f"{where} {what} reads tensor {i} before any op writes it")
            for i in outs:
                activation(i, what)
                if constant[i]:
                    raise self.fail(f"{where} {what} writes constant tensor {i}")
                if i in writer or i in inputs:
                    by = f"op {writer[i]}" if i in writer else "the graph input"
                    raise self.fail(f"{where} {what} writes tensor {i}, which {by} already writes")
                writer[i] = oi
                written.add(i)
            if custom is None:
                self._shape_rule(where, what, builtin, op, ins, outs, shapes, types, constant, tensors)
            large = (op.get(22, 0), op.get(24, 0))
            if large[0] > 1 and large[0] + large[1] > len(self.buf):
                raise self.fail(f"{where} {what}: custom options lie outside the file")
            if builtin in _CONTROL_FLOW:
                self._subgraph_refs(op, builtin, where, what, n_sub)
            if custom is not None and custom.startswith(FUSED_OP_PREFIX):
                fused.append(self._fused(gi, oi, op, custom, version, ins, outs, shapes, types))
            elif custom is not None:
                raise self.fail(f"{where} {what}: custom op {custom!r} has no kernel here (sdlite runs the Sd* custom "
                                "ops of its delegate and TFLite's builtin ops)")
        for i in outputs:
            if i not in written and not constant[i] and not variable[i]:
                raise self.fail(f"{where} output tensor {i} is never written")
        return fused

    def _const(self, t: Table, ttype: int) -> np.ndarray | None:
        """The values of a constant int32 / int64 tensor (None for anything else)."""
        dtype = _INDEX_DTYPES.get(ttype)
        buffers = self.model.get(12, []) if self.model is not None else []
        b = t.get(8, 0)
        if dtype is None or not 0 < b < len(buffers):
            return None
        start, n = buffers[b].get(4, (0, 0))
        if n == 0 and buffers[b].get(6, 0) > 1:
            start, n = buffers[b].get(6, 0), buffers[b].get(8, 0)
        if n == 0 or n % np.dtype(dtype).itemsize:
            return None
        # a copy: no array may keep the file's mapping exported when check_model closes it
        return np.frombuffer(self.buf, dtype=dtype, count=n // np.dtype(dtype).itemsize, offset=start).copy()

    def _shape_rule(self, where: str, what: str, builtin: int, op: Table, ins: list[int], outs: list[int],
                    shapes: list[tuple[int, ...]], types: list[int], constant: list[bool], tensors: list[Table]) -> None:
        def view(i: int) -> TensorView | None:
            if i < 0:
                return None
            data = (lambda: self._const(tensors[i], types[i])) if constant[i] else (lambda: None)
            return TensorView(shapes[i], types[i], data)

        in_views, out_views = [view(i) for i in ins], [view(i) for i in outs]
        problem = check_op(builtin, in_views, out_views)
        if problem is None:
            try:
                inferred = infer_op(builtin, in_views, op.get(12))
            except ShapeError as e:
                problem = str(e)
            else:
                if inferred is not None:
                    shape, ttype = inferred
                    if shapes[outs[0]] != tuple(shape):
                        problem = (f"output tensor {outs[0]} is written as {list(shapes[outs[0]])}, but the inputs "
                                   f"{[list(v.shape) if v else None for v in in_views]} give {list(shape)}")
                    elif types[outs[0]] != ttype:
                        problem = f"output tensor {outs[0]} has type {types[outs[0]]}, the inputs give {ttype}"
        if problem is not None:
            raise self.fail(f"{where} {what}: {problem}")

    def _subgraph_refs(self, op: Table, builtin: int, where: str, what: str, n_sub: int) -> None:
        table_name, slots = _CONTROL_FLOW[builtin]
        options = op.get(12)
        if options is None or options.name != table_name:
            raise self.fail(f"{where} {what} has no {table_name}")
        for slot in slots:
            idx = options.get(slot, 0)
            if not 0 <= idx < n_sub:
                raise self.fail(f"{where} {what} refers to subgraph {idx} of {n_sub}")

    def _fused(self, gi: int, oi: int, op: Table, name: str, version: int, ins: list[int], outs: list[int],
               shapes: list[tuple[int, ...]], types: list[int]) -> FusedOp:
        from sdlite.native import NodeTensor

        start, n = op.get(14, (0, 0))
        large_at, large_n = op.get(22, 0), op.get(24, 0)
        options = None
        if n:
            options = bytes(self.buf[start : start + n])
        elif large_at > 1 and large_n > 0:
            options = bytes(self.buf[large_at : large_at + large_n])
        error = None
        if self.op_checker is not None:
            node_in = [NodeTensor(i, types[i] if i >= 0 else 0, shapes[i] if i >= 0 else ()) for i in ins]
            node_out = [NodeTensor(i, types[i], shapes[i]) for i in outs]
            ok, reason = self.op_checker(name, version, options, node_in, node_out)
            error = None if ok else reason
        return FusedOp(gi, oi, name, version, tuple(shapes[i] if i >= 0 else None for i in ins),
                       tuple(shapes[i] for i in outs), options, error)

    def _signatures(self, model: Table, subgraphs: list[Table]) -> tuple[SignatureShapes, ...]:
        out = []
        for sd in model.get(18, []):
            key = sd.get(8, "")
            gi = sd.get(12, 0)
            if gi >= len(subgraphs):
                raise self.fail(f"signature {key!r} refers to subgraph {gi} of {len(subgraphs)}")
            sg = subgraphs[gi]
            tensors = sg.get(4, [])
            io = []
            for kind, maps, allowed in (("input", sd.get(4, []), set(sg.get(6, ()))),
                                        ("output", sd.get(6, []), set(sg.get(8, ())))):
                names: list[tuple[str, tuple[int, ...]]] = []
                for m in maps:
                    tname, t = m.get(4, ""), m.get(6, 0)
                    if any(tname == n for n, _ in names):
                        raise self.fail(f"signature {key!r} lists {kind} {tname!r} twice")
                    if t not in allowed:
                        raise self.fail(f"signature {key!r} {kind} {tname!r} is tensor {t}, "
                                        f"not an {kind} of subgraph {gi}")
                    names.append((tname, tuple(tensors[t].get(4, ()))))
                io.append(tuple(names))
            out.append(SignatureShapes(key, io[0], io[1]))
        return tuple(out)


def _builtin_name(code: int) -> str:
    from sdlite.tflite_info import _builtin_names

    return _builtin_names().get(code, f"BUILTIN_{code}")


__all__ = ["FusedOp", "InvalidModelError", "ModelCheck", "SignatureShapes", "check_model", "native_op_checker",
           "validate_model"]
