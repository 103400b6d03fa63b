"""Read-only facts about a .tflite flatbuffer: ops, tensors, weights, custom ops, activation liveness.

Reads through the flatbuffer *reader* API over an ``mmap`` (no object-API unpacking), so inspecting a
1.7 GB UNet costs neither the copy nor the time of unpacking its weights. Only the main subgraph
(subgraph 0, what ``serving_default`` runs for SD models) is described.
"""
from __future__ import annotations

import mmap
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from sdlite.errors import SdliteError

# TensorType enum value -> numpy dtype name (schema.fbs order).
_TENSOR_TYPES = {
    0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool", 7: "int16",
    8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64", 15: "uint32", 16: "uint16",
    17: "int4", 18: "bfloat16",
}
FUSED_OP_PREFIX = "Sd"


def _builtin_names() -> dict[int, str]:
    from ai_edge_litert import schema_py_generated as S

    return {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


@dataclass(frozen=True)
class TensorInfo:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    constant: bool  # backed by a non-empty buffer (weights, shape constants)

    @property
    def nbytes(self) -> int:
        itemsize = np.dtype(self.dtype).itemsize if self.dtype not in ("string", "int4", "bfloat16") else (
            2 if self.dtype == "bfloat16" else 1
        )
        return int(np.prod(self.shape, dtype=np.int64)) * itemsize if all(d >= 0 for d in self.shape) else 0


@dataclass(frozen=True)
class OpInfo:
    index: int
    op_name: str  # builtin name (e.g. CONV_2D) or the custom code (e.g. SdAttention)
    custom: bool
    inputs: tuple[int, ...]  # tensor indices, -1 = omitted optional input
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    file_bytes: int
    ops: tuple[OpInfo, ...]
    tensors: tuple[TensorInfo, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    weight_bytes: int  # bytes of all non-empty constant buffers
    num_subgraphs: int
    signatures: tuple[str, ...] = field(default=())

    @cached_property
    def op_histogram(self) -> dict[str, int]:
        return dict(Counter(op.op_name for op in self.ops).most_common())

    @cached_property
    def fused_ops(self) -> tuple[str, ...]:
        """Sorted distinct ``Sd*`` custom op names (the ops only our native delegate can run)."""
        return tuple(sorted({op.op_name for op in self.ops if op.custom and op.op_name.startswith(FUSED_OP_PREFIX)}))

    @cached_property
    def custom_ops(self) -> tuple[str, ...]:
        return tuple(sorted({op.op_name for op in self.ops if op.custom}))

    def peak_activation_bytes(self) -> int:
        """Peak of the summed sizes of live non-constant tensors, walking ops in graph order.

        An estimate of what an arena planner needs (no in-place reuse, no alignment padding, no kernel
        scratch): graph inputs live from the start, graph outputs to the end, others from their producer
        to their last consumer.
        """
        n = len(self.ops)
        start: dict[int, int] = {t: 0 for t in self.inputs}
        end: dict[int, int] = {t: n for t in self.outputs}
        for op in self.ops:
            for t in op.outputs:
                if t >= 0:
                    start.setdefault(t, op.index)
            for t in op.inputs:
                if t >= 0 and not self.tensors[t].constant:
                    end[t] = max(end.get(t, 0), op.index)
        delta = np.zeros(n + 2, dtype=np.int64)
        for t, s in start.items():
            if self.tensors[t].constant:
                continue
            e = end.get(t, s)
            delta[s] += self.tensors[t].nbytes
            delta[e + 1] -= self.tensors[t].nbytes
        return int(np.cumsum(delta).max()) if n else 0


def read_model_info(path: Path) -> ModelInfo:
    """Describe the main subgraph of the .tflite at ``path`` (one-line :class:`SdliteError` on bad files)."""
    from ai_edge_litert import schema_py_generated as S

    path = Path(path)
    if not path.is_file():
        raise SdliteError(f"model file not found: {path}")
    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            raise SdliteError(f"{path} is empty, not a .tflite model") from None
    try:
        if len(mm) < 8 or bytes(mm[4:8]) != b"TFL3":
            raise SdliteError(f"{path} is not a .tflite model (no TFL3 identifier)")
        return _describe(S, path, mm)
    finally:
        mm.close()


def model_info_from_bytes(content: bytes, label: str = "<memory>") -> ModelInfo:
    """Like :func:`read_model_info` for an in-memory model (``label`` stands in for the path)."""
    from ai_edge_litert import schema_py_generated as S

    if len(content) < 8 or content[4:8] != b"TFL3":
        raise SdliteError(f"{label} is not a .tflite model (no TFL3 identifier)")
    return _describe(S, Path(label), content)


def _describe(S, path: Path, mm: mmap.mmap | bytes) -> ModelInfo:  # noqa: N803 (schema module)
    model = S.Model.GetRootAs(mm, 0)
    if model.SubgraphsLength() < 1:
        raise SdliteError(f"{path} has no subgraph")
    names = _builtin_names()
    codes: list[tuple[str, bool]] = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        if code == S.BuiltinOperator.CUSTOM:
            codes.append(((oc.CustomCode() or b"").decode("utf-8", "replace"), True))
        else:
            codes.append((names.get(code, f"BUILTIN_{code}"), False))
    buffer_bytes: list[int] = []
    for i in range(model.BuffersLength()):
        buf = model.Buffers(i)
        size = buf.DataLength()
        if size == 0 and buf.Offset() > 1:
            size = buf.Size()
        buffer_bytes.append(int(size))
    sg = model.Subgraphs(0)
    tensors = []
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        b = t.Buffer()
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        const = 0 < b < len(buffer_bytes) and buffer_bytes[b] > 0
        tensors.append(TensorInfo(i, (t.Name() or b"").decode("utf-8", "replace"), shape,
                                  _TENSOR_TYPES.get(t.Type(), f"type{t.Type()}"), b, const))
    ops = []
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        name, custom = codes[op.OpcodeIndex()]
        ins = tuple(int(x) for x in op.InputsAsNumpy()) if op.InputsLength() else ()
        outs = tuple(int(x) for x in op.OutputsAsNumpy()) if op.OutputsLength() else ()
        ops.append(OpInfo(i, name, custom, ins, outs))
    signatures = tuple(
        (model.SignatureDefs(i).SignatureKey() or b"").decode() for i in range(model.SignatureDefsLength())
    )
    return ModelInfo(
        path=path,
        file_bytes=len(mm),
        ops=tuple(ops),
        tensors=tuple(tensors),
        inputs=tuple(int(x) for x in sg.InputsAsNumpy()) if sg.InputsLength() else (),
        outputs=tuple(int(x) for x in sg.OutputsAsNumpy()) if sg.OutputsLength() else (),
        weight_bytes=sum(buffer_bytes),
        num_subgraphs=model.SubgraphsLength(),
        signatures=signatures,
    )
