"""Read-only facts about a .tflite flatbuffer: ops, tensors, weights, custom ops, activation liveness.

Reads through :mod:`sdlite.flatbuffer_verify`'s verifying parser over an ``mmap`` (no object-API unpacking, weights
never read), so inspecting a 1.7 GB UNet costs neither the copy nor the time of unpacking its weights. Only the main subgraph
(subgraph 0, what ``serving_default`` runs for SD models) is described.
"""
from __future__ import annotations

import mmap
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np

from sdlite.errors import SdliteError
from sdlite.flatbuffer_verify import Table

# TensorType enum value -> numpy dtype name (schema.fbs order).
_TENSOR_TYPES = {
    0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool", 7: "int16",
    8: "complex64", 9: "int8", 10: "float64", 11: "complex128", 12: "uint64", 15: "uint32", 16: "uint16",
    17: "int4", 18: "bfloat16",
}
FUSED_OP_PREFIX = "Sd"
CUSTOM_CODE = 32  # BuiltinOperator.CUSTOM


@lru_cache(maxsize=1)
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
    """Describe the main subgraph of the .tflite at ``path`` (one-line :class:`SdliteError` on bad files).

    The flatbuffer is verified as it is read (:mod:`sdlite.flatbuffer_verify`), so a truncated or corrupt file is an
    error here, never an exception from a reader; the full validation (indices, shapes, fused ops) is
    :mod:`sdlite.model_check`.
    """
    path = Path(path)
    if not path.is_file():
        raise SdliteError(f"model file not found: {path}")
    with open(path, "rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:
            raise SdliteError(f"{path} is empty, not a .tflite model") from None
    try:
        return _describe_checked(path, mm)
    finally:
        mm.close()


def model_info_from_bytes(content: bytes, label: str = "<memory>") -> ModelInfo:
    """Like :func:`read_model_info` for an in-memory model (``label`` stands in for the path)."""
    return _describe_checked(Path(label), content)


def _describe_checked(path: Path, buf: mmap.mmap | bytes) -> ModelInfo:
    from sdlite.flatbuffer_verify import FlatbufferError, parse_model_buffer

    try:
        model = parse_model_buffer(buf)
    except FlatbufferError as exc:
        raise SdliteError(exc.about(path)) from None
    try:
        return describe(model, path, len(buf))
    except (IndexError, KeyError) as exc:  # indices a well-formed flatbuffer may still get wrong
        raise SdliteError(f"{path}: inconsistent model ({type(exc).__name__}: {exc})") from None


def describe(model: Table, path: Path, file_bytes: int) -> ModelInfo:
    """:class:`ModelInfo` of a verified ``Model`` table (:func:`sdlite.flatbuffer_verify.parse_model_buffer`)."""
    subgraphs = model.get(8, [])
    if not subgraphs:
        raise SdliteError(f"{path} has no subgraph")
    names = _builtin_names()
    codes: list[tuple[str, bool]] = []
    for oc in model.get(6, []):
        code = max(oc.get(10, 0), oc.get(4, 0))
        if code == CUSTOM_CODE:
            codes.append((oc.get(6, ""), True))
        else:
            codes.append((names.get(code, f"BUILTIN_{code}"), False))
    buffer_bytes = [buffer_size(b) for b in model.get(12, [])]
    sg = subgraphs[0]
    tensors = []
    for i, t in enumerate(sg.get(4, [])):
        b = t.get(8, 0)
        const = 0 < b < len(buffer_bytes) and buffer_bytes[b] > 0
        ttype = t.get(6, 0)
        tensors.append(TensorInfo(i, t.get(10, ""), tuple(t.get(4, ())), _TENSOR_TYPES.get(ttype, f"type{ttype}"), b,
                                  const))
    ops = []
    for i, op in enumerate(sg.get(10, [])):
        name, custom = codes[op.get(4, 0)]
        ops.append(OpInfo(i, name, custom, tuple(op.get(6, ())), tuple(op.get(8, ()))))
    return ModelInfo(
        path=path,
        file_bytes=file_bytes,
        ops=tuple(ops),
        tensors=tuple(tensors),
        inputs=tuple(sg.get(6, ())),
        outputs=tuple(sg.get(8, ())),
        weight_bytes=sum(buffer_bytes),
        num_subgraphs=len(subgraphs),
        signatures=tuple(sd.get(8, "") for sd in model.get(18, [])),
    )


def buffer_size(b: Table) -> int:
    """Bytes of data of a ``Buffer`` table: inline, or at (offset, size) after the flatbuffer (large models)."""
    start, n = b.get(4, (0, 0))
    if n == 0 and b.get(6, 0) > 1:
        return int(b.get(8, 0))
    return int(n)
