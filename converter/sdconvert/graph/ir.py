"""Mutable in-memory graph of a .tflite model (onnx-graphsurgeon style).

Ops hold :class:`Tensor` objects, never indices; each tensor knows its producer and consumers, kept in sync by the
op's input/output lists, so rewrite rules edit the graph with plain Python (``op.inputs[1] = t``,
``sg.replace_uses(old, new)``) and never touch raw flatbuffer indices. Indices exist only in :mod:`.io`.

Trade-offs:
- Constant data is a read-only ``numpy.uint8`` view (zero-copy into the mmap of the source file), so a 3.3 GB UNet
  costs no extra memory until written; rules that make new constants allocate only those.
- Builtin options stay as the flatbuffer object-API ``*T`` objects (``ai_edge_litert.schema_py_generated``): every
  field of every op survives a round trip without a hand-written table, at the price of schema-shaped options.
- Empty per-tensor buffers (litert-torch gives each activation its own empty buffer) are dropped: an activation
  tensor has ``buffer is None`` and is written with the sentinel buffer 0, which TFLite treats identically.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .schema import S

# TFLite TensorType -> numpy dtype (types without a numpy equivalent map to None).
_NP_DTYPES: dict[int, Any] = {
    S.TensorType.FLOAT32: np.float32,
    S.TensorType.FLOAT16: np.float16,
    S.TensorType.INT32: np.int32,
    S.TensorType.UINT8: np.uint8,
    S.TensorType.INT64: np.int64,
    S.TensorType.BOOL: np.bool_,
    S.TensorType.INT16: np.int16,
    S.TensorType.INT8: np.int8,
    S.TensorType.FLOAT64: np.float64,
    S.TensorType.UINT64: np.uint64,
    S.TensorType.UINT32: np.uint32,
    S.TensorType.UINT16: np.uint16,
    S.TensorType.COMPLEX64: np.complex64,
    S.TensorType.COMPLEX128: np.complex128,
}
_FROM_NP: dict[Any, int] = {np.dtype(v): k for k, v in _NP_DTYPES.items()}


def numpy_dtype(tflite_type: int) -> np.dtype | None:
    t = _NP_DTYPES.get(tflite_type)
    return None if t is None else np.dtype(t)


def tflite_type(dtype: Any) -> int:
    try:
        return _FROM_NP[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"no TFLite tensor type for numpy dtype {dtype}") from None


BUILTIN_NAMES: dict[int, str] = {
    v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)
}
BUILTIN_CODES: dict[str, int] = {v: k for k, v in BUILTIN_NAMES.items()}
CUSTOM = S.BuiltinOperator.CUSTOM


@dataclass(frozen=True)
class OpCode:
    """An operator code: builtin enum value (``CUSTOM`` for custom ops), custom code string, op version."""

    builtin: int
    custom: str | None = None
    version: int = 1

    @property
    def name(self) -> str:
        if self.builtin == CUSTOM:
            return self.custom or "CUSTOM"
        return BUILTIN_NAMES.get(self.builtin, f"BUILTIN_{self.builtin}")

    @staticmethod
    def of(name: str, version: int = 1) -> OpCode:
        """``OpCode.of("RESHAPE")`` for builtins; any other name is a custom op code."""
        if name in BUILTIN_CODES and name != "CUSTOM":
            return OpCode(BUILTIN_CODES[name], None, version)
        return OpCode(CUSTOM, name, version)


class Buffer:
    """Constant bytes. ``data`` is a 1-D uint8 array (often a read-only view into the source file's mmap)."""

    __slots__ = ("data", "__weakref__")

    def __init__(self, data: np.ndarray | bytes | bytearray | memoryview) -> None:
        if isinstance(data, np.ndarray):
            arr = data.reshape(-1).view(np.uint8) if data.dtype != np.uint8 else data.reshape(-1)
        else:
            arr = np.frombuffer(data, dtype=np.uint8)
        self.data: np.ndarray = arr

    @property
    def nbytes(self) -> int:
        return int(self.data.size)

    def __repr__(self) -> str:
        return f"Buffer({self.nbytes} bytes)"


class Tensor:
    """A tensor of one subgraph. ``producer``/``consumers`` are maintained by :class:`Op`'s tensor lists."""

    def __init__(
        self,
        name: str,
        shape: Sequence[int] | None,
        dtype: int = S.TensorType.FLOAT32,
        buffer: Buffer | None = None,
        *,
        shape_signature: Sequence[int] | None = None,
        quantization: Any = None,
        is_variable: bool = False,
        has_rank: bool = True,
        sparsity: Any = None,
        variant_tensors: Any = None,
        source_index: int | None = None,
    ) -> None:
        self.name = name
        self.shape: tuple[int, ...] | None = None if shape is None else tuple(int(d) for d in shape)
        self.dtype = int(dtype)
        self.buffer = buffer
        self.shape_signature = None if shape_signature is None else tuple(int(d) for d in shape_signature)
        self.quantization = quantization
        self.is_variable = is_variable
        self.has_rank = has_rank
        self.sparsity = sparsity
        self.variant_tensors = variant_tensors
        self.source_index = source_index  # index in the subgraph as read from the file (None for new tensors)
        self._producer: Op | None = None
        self._consumers: list[Op] = []

    # --- graph links -------------------------------------------------------------------------------------------
    @property
    def producer(self) -> Op | None:
        return self._producer

    @property
    def consumers(self) -> list[Op]:
        """Ops reading this tensor, each once (an op reading it twice, e.g. ``MUL(d, d)``, is listed once)."""
        seen: list[Op] = []
        for op in self._consumers:
            if not any(op is s for s in seen):
                seen.append(op)
        return seen

    # --- data --------------------------------------------------------------------------------------------------
    @property
    def is_constant(self) -> bool:
        return self.buffer is not None and self.buffer.nbytes > 0 and not self.is_variable

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape is not None else -1

    def numpy(self) -> np.ndarray:
        """The constant value (read-only view, no copy). Raises ``ValueError`` for non-constant tensors."""
        if not self.is_constant:
            raise ValueError(f"tensor {self.name!r} is not a constant")
        dt = numpy_dtype(self.dtype)
        if dt is None:
            raise ValueError(f"tensor {self.name!r} has type {self.dtype} with no numpy equivalent")
        assert self.buffer is not None
        raw = self.buffer.data
        count = raw.size // dt.itemsize
        arr = np.frombuffer(raw, dtype=dt, count=count)
        shape = self.shape if self.shape is not None else (count,)
        if int(np.prod(shape, dtype=np.int64)) != count:
            raise ValueError(
                f"tensor {self.name!r}: buffer holds {count} elements, shape {shape} needs {int(np.prod(shape))}"
            )
        return arr.reshape(shape)

    def __repr__(self) -> str:
        c = " const" if self.is_constant else ""
        return f"Tensor({self.name!r}, {list(self.shape) if self.shape is not None else '?'}{c})"


class _TensorList(list):
    """A list of tensors (or None for omitted optional inputs) that keeps tensor<->op links in sync."""

    __slots__ = ("_op", "_is_output")

    def __init__(self, op: Op, is_output: bool, items: Iterable[Tensor | None] = ()) -> None:
        super().__init__()
        self._op = op
        self._is_output = is_output
        for t in items:
            self.append(t)

    def _link(self, t: Tensor | None) -> None:
        if t is None:
            if self._is_output:
                raise ValueError("op outputs cannot be None")
            return
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor, got {type(t).__name__}")
        if self._is_output:
            if t._producer is not None and t._producer is not self._op:
                raise ValueError(f"tensor {t.name!r} already produced by {t._producer}")
            t._producer = self._op
        else:
            t._consumers.append(self._op)

    def _unlink(self, t: Tensor | None) -> None:
        if t is None:
            return
        if self._is_output:
            if t._producer is self._op:
                t._producer = None
        else:
            for i, o in enumerate(t._consumers):
                if o is self._op:
                    del t._consumers[i]
                    break

    def append(self, t: Tensor | None) -> None:  # type: ignore[override]
        self._link(t)
        super().append(t)

    def extend(self, ts: Iterable[Tensor | None]) -> None:  # type: ignore[override]
        for t in ts:
            self.append(t)

    def insert(self, i: int, t: Tensor | None) -> None:  # type: ignore[override]
        self._link(t)
        super().insert(i, t)

    def __setitem__(self, i: Any, t: Any) -> None:
        if isinstance(i, slice):
            old = list(super().__getitem__(i))
            new = list(t)
            for o in old:
                self._unlink(o)
            for n in new:
                self._link(n)
            super().__setitem__(i, new)
            return
        old_t = super().__getitem__(i)
        self._unlink(old_t)
        self._link(t)
        super().__setitem__(i, t)

    def __delitem__(self, i: Any) -> None:
        old = super().__getitem__(i)
        for o in old if isinstance(i, slice) else [old]:
            self._unlink(o)
        super().__delitem__(i)

    def pop(self, i: int = -1) -> Tensor | None:  # type: ignore[override]
        t = super().pop(i)
        self._unlink(t)
        return t

    def remove(self, t: Tensor | None) -> None:  # type: ignore[override]
        for i, x in enumerate(self):
            if x is t:
                del self[i]
                return
        raise ValueError("tensor not in list")

    def clear(self) -> None:  # type: ignore[override]
        for t in list(self):
            self._unlink(t)
        super().clear()

    def __iadd__(self, ts: Iterable[Tensor | None]) -> _TensorList:  # type: ignore[override]
        self.extend(ts)
        return self


class Op:
    """One operator. ``options`` is the builtin options ``*T`` object (or None), ``custom_options`` raw bytes."""

    _ids = itertools.count()

    def __init__(
        self,
        opcode: OpCode,
        inputs: Iterable[Tensor | None] = (),
        outputs: Iterable[Tensor] = (),
        *,
        options_type: int = 0,
        options: Any = None,
        options2_type: int = 0,
        options2: Any = None,
        custom_options: bytes | None = None,
        custom_options_format: int = 0,
        mutating_variable_inputs: Sequence[bool] | None = None,
        intermediates: Sequence[Tensor] | None = None,
        debug_metadata_index: int = -1,
    ) -> None:
        self.uid = next(Op._ids)
        self.opcode = opcode
        self._inputs = _TensorList(self, False, inputs)
        self._outputs = _TensorList(self, True, outputs)
        self.options_type = options_type
        self.options = options
        self.options2_type = options2_type
        self.options2 = options2
        self.custom_options = custom_options
        self.custom_options_format = custom_options_format
        self.mutating_variable_inputs = list(mutating_variable_inputs) if mutating_variable_inputs else None
        self.intermediates: list[Tensor] = list(intermediates or [])
        self.debug_metadata_index = debug_metadata_index
        # options fields that hold subgraph indices, resolved to objects (see SUBGRAPH_FIELDS)
        self.subgraph_refs: dict[tuple[str, str], Subgraph] = {}

    @property
    def inputs(self) -> _TensorList:
        return self._inputs

    @inputs.setter
    def inputs(self, ts: Iterable[Tensor | None]) -> None:
        self._inputs.clear()
        self._inputs.extend(ts)

    @property
    def outputs(self) -> _TensorList:
        return self._outputs

    @outputs.setter
    def outputs(self, ts: Iterable[Tensor]) -> None:
        self._outputs.clear()
        self._outputs.extend(ts)

    @property
    def type(self) -> str:
        """``"CONV_2D"`` for builtins, the custom code (``"SdAttention"``) for custom ops."""
        return self.opcode.name

    @property
    def is_custom(self) -> bool:
        return self.opcode.builtin == CUSTOM

    def detach(self) -> None:
        """Drop all tensor links (the op must also be removed from its subgraph's op list)."""
        self._inputs.clear()
        self._outputs.clear()

    def __repr__(self) -> str:
        ins = ", ".join("-" if t is None else t.name[-30:] for t in self._inputs)
        return f"Op#{self.uid}({self.type}: {ins})"


# Option classes whose fields are subgraph indices (remapped when subgraphs are removed or reordered).
SUBGRAPH_FIELDS: dict[str, tuple[str, ...]] = {
    "IfOptionsT": ("thenSubgraphIndex", "elseSubgraphIndex"),
    "WhileOptionsT": ("condSubgraphIndex", "bodySubgraphIndex"),
    "CallOnceOptionsT": ("initSubgraphIndex",),
    "CallOptionsT": ("subgraph",),
    "StablehloWhileOptionsT": ("condSubgraphIndex", "bodySubgraphIndex"),
    "StablehloSortOptionsT": ("comparatorSubgraphIndex",),
    "StablehloReduceOptionsT": ("bodySubgraphIndex",),
    "StablehloReduceWindowOptionsT": ("bodySubgraphIndex",),
    "StablehloScatterOptionsT": ("updateComputationSubgraphIndex",),
    "StableHLOCompositeOptionsT": ("decompositionSubgraphIndex",),
}

# Ops kept by dead-code elimination even when their outputs are unused.
SIDE_EFFECT_OPS = frozenset(
    {"ASSIGN_VARIABLE", "CALL_ONCE", "VAR_HANDLE", "HASHTABLE_IMPORT", "WHILE", "IF", "CALL", "STABLEHLO_WHILE"}
)


class Subgraph:
    """Tensors + ops in execution order. ``inputs``/``outputs`` are the subgraph's interface tensors."""

    def __init__(self, name: str = "") -> None:
        self.name = name
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.debug_metadata_index = -1
        self._names: itertools.count = itertools.count()

    # --- construction ------------------------------------------------------------------------------------------
    def add_tensor(self, t: Tensor) -> Tensor:
        self.tensors.append(t)
        return t

    def new_tensor(self, name: str, shape: Sequence[int], dtype: int = S.TensorType.FLOAT32) -> Tensor:
        """A fresh activation tensor with a unique-ish name."""
        return self.add_tensor(Tensor(f"{name};sd{next(self._names)}", shape, dtype))

    def new_constant(self, name: str, value: np.ndarray) -> Tensor:
        value = np.ascontiguousarray(value)
        buf = Buffer(np.frombuffer(value.tobytes(), dtype=np.uint8))
        return self.add_tensor(Tensor(f"{name};sd{next(self._names)}", value.shape, tflite_type(value.dtype), buf))

    def insert_op(self, op: Op, *, before: Op | None = None, after: Op | None = None) -> Op:
        """Insert ``op`` before/after an existing op (appended when neither is given)."""
        if before is not None:
            self.ops.insert(self._index(before), op)
        elif after is not None:
            self.ops.insert(self._index(after) + 1, op)
        else:
            self.ops.append(op)
        return op

    def _index(self, op: Op) -> int:
        for i, o in enumerate(self.ops):
            if o is op:
                return i
        raise ValueError(f"{op} is not in subgraph {self.name!r}")

    def remove_ops(self, ops: Iterable[Op]) -> None:
        dead = {id(o) for o in ops}
        keep = []
        for o in self.ops:
            if id(o) in dead:
                o.detach()
            else:
                keep.append(o)
        self.ops = keep

    def replace_uses(self, old: Tensor, new: Tensor, *, keep: Iterable[Op] = ()) -> int:
        """Point every consumer of ``old`` (except ops in ``keep``) and the subgraph outputs at ``new``."""
        skip = {id(o) for o in keep}
        n = 0
        for op in old.consumers:
            if id(op) in skip:
                continue
            for i, t in enumerate(op.inputs):
                if t is old:
                    op.inputs[i] = new
                    n += 1
        for i, t in enumerate(self.outputs):
            if t is old:
                self.outputs[i] = new
                n += 1
        return n

    def is_output(self, t: Tensor) -> bool:
        return any(o is t for o in self.outputs)

    # --- order and cleanup ---------------------------------------------------------------------------------------
    def toposort(self) -> None:
        """Stable topological sort (keeps the current order where it is already valid). Raises on cycles."""
        pos = {id(o): i for i, o in enumerate(self.ops)}
        indeg: dict[int, int] = {}
        users: dict[int, list[Op]] = {}
        for op in self.ops:
            deps = {
                id(t.producer) for t in op.inputs if t is not None and t.producer is not None and id(t.producer) in pos
            }
            indeg[id(op)] = len(deps)
            for d in deps:
                users.setdefault(d, []).append(op)
        heap = [(pos[id(o)], o.uid, o) for o in self.ops if indeg[id(o)] == 0]
        heapq.heapify(heap)
        out: list[Op] = []
        while heap:
            _, _, op = heapq.heappop(heap)
            out.append(op)
            for u in users.get(id(op), ()):
                indeg[id(u)] -= 1
                if indeg[id(u)] == 0:
                    heapq.heappush(heap, (pos[id(u)], u.uid, u))
        if len(out) != len(self.ops):
            raise ValueError(f"subgraph {self.name!r} has a cycle ({len(self.ops) - len(out)} ops unreachable)")
        self.ops = out

    def remove_dead(self, extra_live: Iterable[Tensor] = ()) -> int:
        """Remove ops whose outputs are unused (no side effects) and tensors nobody references. Returns ops removed."""
        live_t: set[int] = {id(t) for t in self.outputs}
        live_t.update(id(t) for t in extra_live)
        live_ops: list[Op] = []
        for op in reversed(self.ops):
            needed = op.type in SIDE_EFFECT_OPS or not op.outputs or any(id(t) in live_t for t in op.outputs)
            if needed:
                live_ops.append(op)
                live_t.update(id(t) for t in op.inputs if t is not None)
                live_t.update(id(t) for t in op.intermediates)
        live_ops.reverse()
        removed = len(self.ops) - len(live_ops)
        if removed:
            live_ids = {id(o) for o in live_ops}
            self.remove_ops([o for o in self.ops if id(o) not in live_ids])
        referenced: set[int] = {id(t) for t in self.inputs} | {id(t) for t in self.outputs} | set(live_t)
        for op in self.ops:
            referenced.update(id(t) for t in op.outputs)
        self.tensors = [t for t in self.tensors if id(t) in referenced]
        return removed

    def validate(self) -> list[str]:
        """Structural problems (dangling tensors, ops out of order); empty when the subgraph is consistent."""
        problems = []
        known = {id(t) for t in self.tensors}
        seen: set[int] = {id(t) for t in self.inputs}
        for op in self.ops:
            for t in op.inputs:
                if t is None:
                    continue
                if id(t) not in known:
                    problems.append(f"{op}: input {t.name!r} not in subgraph tensors")
                if t.producer is not None and id(t) not in seen:
                    problems.append(f"{op}: input {t.name!r} used before it is produced")
            for t in op.outputs:
                if id(t) not in known:
                    problems.append(f"{op}: output {t.name!r} not in subgraph tensors")
                seen.add(id(t))
        return problems


@dataclass(eq=False)
class SignatureDef:
    key: str
    subgraph: Subgraph
    inputs: list[tuple[str, Tensor]] = field(default_factory=list)
    outputs: list[tuple[str, Tensor]] = field(default_factory=list)


@dataclass(eq=False)
class Model:
    """A whole .tflite: subgraphs (0 = main), signatures, metadata, plus the buffers that are not tensor data."""

    subgraphs: list[Subgraph] = field(default_factory=list)
    signatures: list[SignatureDef] = field(default_factory=list)
    metadata: list[tuple[str, Buffer | None]] = field(default_factory=list)
    metadata_buffer: list[Buffer | None] = field(default_factory=list)  # deprecated Model.metadata_buffer
    version: int = 3
    description: str = ""
    # Buffer order as read (kept when writing so an unmodified model keeps its layout); new buffers are appended.
    buffer_order: list[Buffer] = field(default_factory=list)
    opcode_order: list[OpCode] = field(default_factory=list)
    source: Any = None  # keeps the source mmap alive while tensors view into it

    @property
    def main(self) -> Subgraph:
        return self.subgraphs[0]

    def iter_ops(self) -> Iterator[tuple[Subgraph, Op]]:
        for sg in self.subgraphs:
            for op in sg.ops:
                yield sg, op

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for _, op in self.iter_ops():
            hist[op.type] = hist.get(op.type, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    def num_ops(self) -> int:
        return sum(len(sg.ops) for sg in self.subgraphs)

    def referenced_subgraphs(self) -> list[Subgraph]:
        """Subgraph 0, signature subgraphs and everything reachable from their ops' subgraph references."""
        keep: list[Subgraph] = []
        stack = [self.subgraphs[0]] + [s.subgraph for s in self.signatures] if self.subgraphs else []
        while stack:
            sg = stack.pop()
            if any(sg is k for k in keep):
                continue
            keep.append(sg)
            for op in sg.ops:
                stack.extend(op.subgraph_refs.values())
        return keep

    def cleanup(self) -> int:
        """Dead-code elimination in every subgraph, then drop unreferenced subgraphs. Returns ops removed."""
        removed = 0
        for sg in self.subgraphs:
            sig_outs = [t for s in self.signatures if s.subgraph is sg for _, t in s.outputs]
            removed += sg.remove_dead(extra_live=sig_outs)
        live = self.referenced_subgraphs()
        self.subgraphs = [sg for sg in self.subgraphs if any(sg is k for k in live)]
        return removed


def clone_options(obj: Any) -> Any:
    """Shallow-copy an options ``*T`` object (lists copied) so an inlined/duplicated op can be edited safely."""
    if obj is None:
        return None
    new = obj.__class__.__new__(obj.__class__)
    for k, v in vars(obj).items():
        setattr(new, k, list(v) if isinstance(v, list) else v)
    return new


__all__ = [
    "BUILTIN_CODES",
    "BUILTIN_NAMES",
    "Buffer",
    "Model",
    "Op",
    "OpCode",
    "SignatureDef",
    "Subgraph",
    "Tensor",
    "clone_options",
    "numpy_dtype",
    "tflite_type",
]
