"""Read a .tflite into the mutable IR (:mod:`.ir`) and write it back.

Reading mmaps the file and parses it with the flatbuffer object API; constant data stays a zero-copy view into the
mapping (also for >2 GB files whose buffers live after the flatbuffer, ``Buffer.offset``/``Buffer.size``).

Writing packs a fresh flatbuffer. Buffer data is 16-byte aligned (the schema's ``force_align: 16``, which the Python
object API ignores). When the constants would push the flatbuffer past its 2 GiB limit, the model is written in the
offset-buffer layout TFLite uses for large models: the flatbuffer holds only ``offset``/``size`` per buffer and the
data follows it in the file (offsets are from the start of the file, 64-byte aligned). Packing is done twice in that
case (placeholder offsets, then real ones; the flatbuffer size does not change between the two).
"""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path
from typing import Any

import flatbuffers
import numpy as np

from .ir import SUBGRAPH_FIELDS, Buffer, Model, Op, OpCode, SignatureDef, Subgraph, Tensor, clone_options
from .schema import S

FLATBUFFER_LIMIT = 2**31 - 1
# Switch to the offset-buffer layout when inline data would exceed this (leaves room for the graph itself).
DEFAULT_OFFSET_THRESHOLD = 2**31 - 2**27
_DATA_ALIGN = 64


class ModelFormatError(ValueError):
    """The file is not a readable .tflite (truncated, corrupt, inconsistent indices)."""


def _s(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b.decode("utf-8", errors="replace") if isinstance(b, (bytes, bytearray)) else str(b)


def read_model(path: str | os.PathLike[str]) -> Model:
    """Parse ``path`` into a :class:`Model`. Raises :class:`ModelFormatError` (one-line reason) on bad input."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 16:
                raise ModelFormatError(f"{p}: too small to be a .tflite ({size} bytes)")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise ModelFormatError(f"cannot read {p}: {e.strerror or e}") from None
    return parse_model(mm, name=str(p))


def parse_model(buf: Any, name: str = "<bytes>") -> Model:
    """Parse an in-memory .tflite (bytes, bytearray or mmap)."""
    size = len(buf)
    if size < 16:
        raise ModelFormatError(f"{name}: too small to be a .tflite ({size} bytes)")
    root = int.from_bytes(bytes(buf[0:4]), "little")
    if root < 8 or root >= size:
        raise ModelFormatError(f"{name}: not a flatbuffer (root offset {root} outside the {size}-byte file)")
    try:
        raw = S.ModelT.InitFromPackedBuf(buf, 0)
    except Exception as e:  # noqa: BLE001 - any failure inside the generated parser means a corrupt file
        raise ModelFormatError(f"{name}: corrupt flatbuffer ({type(e).__name__}: {e})") from None
    try:
        model = _from_object_api(raw, buf, size)
    except ModelFormatError as e:
        raise ModelFormatError(f"{name}: {e}") from None
    except Exception as e:  # noqa: BLE001
        raise ModelFormatError(f"{name}: inconsistent model ({type(e).__name__}: {e})") from None
    model.source = buf
    return model


def _buffers(raw: Any, buf: Any, size: int) -> list[Buffer | None]:
    out: list[Buffer | None] = []
    for i, b in enumerate(raw.buffers or []):
        data = None
        if b is not None and b.data is not None and len(b.data):
            data = b.data if isinstance(b.data, np.ndarray) else np.asarray(b.data, dtype=np.uint8)
        elif b is not None and (b.offset or 0) > 1 and (b.size or 0) > 0:
            if b.offset + b.size > size:
                raise ModelFormatError(f"buffer {i} [{b.offset}, +{b.size}) lies outside the {size}-byte file")
            data = np.frombuffer(buf, dtype=np.uint8, count=b.size, offset=b.offset)
        out.append(Buffer(data) if data is not None and i > 0 else None)
    return out


class _Tensors:
    """Bounds-checked tensor lookup for one subgraph while reading."""

    def __init__(self, tensors: list[Tensor], subgraph: int) -> None:
        self.tensors, self.subgraph = tensors, subgraph

    def at(self, i: int, where: str) -> Tensor:
        if not 0 <= i < len(self.tensors):
            raise ModelFormatError(
                f"subgraph {self.subgraph}{where}: tensor index {i} out of range ({len(self.tensors)} tensors)"
            )
        return self.tensors[i]

    def required(self, indices: Any, where: str) -> list[Tensor]:
        return [self.at(int(i), where) for i in (indices if indices is not None else [])]

    def optional(self, indices: Any, where: str) -> list[Tensor | None]:
        return [None if int(i) < 0 else self.at(int(i), where) for i in (indices if indices is not None else [])]


def _from_object_api(raw: Any, buf: Any, size: int) -> Model:
    buffers = _buffers(raw, buf, size)
    codes = []
    for oc in raw.operatorCodes or []:
        builtin = max(int(oc.builtinCode or 0), int(oc.deprecatedBuiltinCode or 0))
        codes.append(OpCode(builtin, _s(oc.customCode) if oc.customCode is not None else None, int(oc.version or 1)))

    def buffer_at(i: int) -> Buffer | None:
        if not 0 <= i < len(buffers):
            raise ModelFormatError(f"buffer index {i} out of range ({len(buffers)} buffers)")
        return buffers[i]

    model = Model(version=int(raw.version or 0), description=_s(raw.description))
    model.opcode_order = list(dict.fromkeys(codes))
    pending_refs: list[tuple[Op, str, str, int]] = []
    for gi, rs in enumerate(raw.subgraphs or []):
        sg = Subgraph(_s(rs.name))
        sg.debug_metadata_index = int(rs.debugMetadataIndex) if rs.debugMetadataIndex is not None else -1
        for ti, rt in enumerate(rs.tensors or []):
            shape = () if rt.shape is None else tuple(int(d) for d in rt.shape)
            sig = None if rt.shapeSignature is None else tuple(int(d) for d in rt.shapeSignature)
            sg.tensors.append(
                Tensor(
                    _s(rt.name),
                    shape,
                    int(rt.type or 0),
                    buffer_at(int(rt.buffer or 0)),
                    shape_signature=sig,
                    quantization=rt.quantization,
                    is_variable=bool(rt.isVariable),
                    has_rank=bool(rt.hasRank),
                    sparsity=rt.sparsity,
                    variant_tensors=rt.variantTensors,
                    source_index=ti,
                )
            )
        ts = _Tensors(sg.tensors, gi)
        for oi, ro in enumerate(rs.operators or []):
            if not 0 <= int(ro.opcodeIndex or 0) < len(codes):
                raise ModelFormatError(f"subgraph {gi} op {oi}: opcode index {ro.opcodeIndex} out of range")
            where = f" op {oi}"
            custom = None
            if ro.customOptions is not None and len(ro.customOptions):
                custom = bytes(np.asarray(ro.customOptions, dtype=np.uint8))
            elif (ro.largeCustomOptionsOffset or 0) > 1 and (ro.largeCustomOptionsSize or 0) > 0:
                off, n = int(ro.largeCustomOptionsOffset), int(ro.largeCustomOptionsSize)
                if off + n > size:
                    raise ModelFormatError(f"subgraph {gi}{where}: custom options outside the file")
                custom = bytes(buf[off : off + n])
            mutating = ro.mutatingVariableInputs
            op = Op(
                codes[int(ro.opcodeIndex or 0)],
                ts.optional(ro.inputs, where),
                ts.required(ro.outputs, where),
                options_type=int(ro.builtinOptionsType or 0),
                options=ro.builtinOptions,
                options2_type=int(ro.builtinOptions2Type or 0),
                options2=ro.builtinOptions2,
                custom_options=custom,
                custom_options_format=int(ro.customOptionsFormat or 0),
                mutating_variable_inputs=[bool(x) for x in mutating] if mutating is not None else None,
                intermediates=ts.required(ro.intermediates, where) if ro.intermediates is not None else None,
                debug_metadata_index=int(ro.debugMetadataIndex) if ro.debugMetadataIndex is not None else -1,
            )
            for which, opts in (("options", ro.builtinOptions), ("options2", ro.builtinOptions2)):
                for fld in SUBGRAPH_FIELDS.get(type(opts).__name__, ()):
                    pending_refs.append((op, which, fld, int(getattr(opts, fld))))
            sg.ops.append(op)
        sg.inputs = ts.required(rs.inputs, " inputs")
        sg.outputs = ts.required(rs.outputs, " outputs")
        model.subgraphs.append(sg)
    if not model.subgraphs:
        raise ModelFormatError("model has no subgraphs")
    for op, which, fld, idx in pending_refs:
        if not 0 <= idx < len(model.subgraphs):
            raise ModelFormatError(f"{op.type} refers to subgraph {idx} of {len(model.subgraphs)}")
        op.subgraph_refs[(which, fld)] = model.subgraphs[idx]
    for sd in raw.signatureDefs or []:
        gi = int(sd.subgraphIndex or 0)
        if not 0 <= gi < len(model.subgraphs):
            raise ModelFormatError(f"signature {_s(sd.signatureKey)!r} refers to subgraph {gi}")
        ts = _Tensors(model.subgraphs[gi].tensors, gi)

        def tmap(maps: Any, ts: _Tensors = ts) -> list[tuple[str, Tensor]]:
            return [(_s(m.name), ts.at(int(m.tensorIndex), " signature")) for m in (maps or [])]

        model.signatures.append(
            SignatureDef(_s(sd.signatureKey), model.subgraphs[gi], tmap(sd.inputs), tmap(sd.outputs))
        )
    model.metadata = [(_s(m.name), buffer_at(int(m.buffer or 0))) for m in (raw.metadata or [])]
    model.metadata_buffer = [buffer_at(int(i)) for i in (raw.metadataBuffer if raw.metadataBuffer is not None else [])]
    model.buffer_order = [b for b in buffers if b is not None]
    return model


# ------------------------------------------------------------------------------------------------------------------
# writing


class _BufferOut(S.BufferT):
    """A buffer packed with 16-byte alignment, either inline data or an (offset, size) reference."""

    def __init__(self, data: np.ndarray | None, offset: int = 0) -> None:
        super().__init__()
        self.payload = data
        self.out_offset = offset

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 - flatbuffers API name
        vec = None
        if self.payload is not None and self.out_offset == 0 and self.payload.size:
            n = int(self.payload.size)
            builder.StartVector(1, n, 16)
            builder.head = builder.head - n
            builder.Bytes[builder.head : builder.head + n] = memoryview(np.ascontiguousarray(self.payload)).cast("B")
            builder.vectorNumElems = n
            vec = builder.EndVector()
        S.BufferStart(builder)
        if vec is not None:
            S.BufferAddData(builder, vec)
        if self.out_offset:
            S.BufferAddOffset(builder, self.out_offset)
            S.BufferAddSize(builder, int(self.payload.size) if self.payload is not None else 0)
        return S.BufferEnd(builder)


def _collect_buffers(model: Model) -> list[Buffer]:
    """Buffers referenced by tensors or metadata, in the model's original order, new ones after."""
    used: dict[int, Buffer] = {}
    for sg in model.subgraphs:
        for t in sg.tensors:
            if t.buffer is not None:
                used.setdefault(id(t.buffer), t.buffer)
    for _, b in model.metadata:
        if b is not None:
            used.setdefault(id(b), b)
    for b in model.metadata_buffer:
        if b is not None:
            used.setdefault(id(b), b)
    ordered = [b for b in model.buffer_order if id(b) in used]
    known = {id(b) for b in ordered}
    ordered += [b for k, b in used.items() if k not in known]
    return ordered


def _opcodes(model: Model) -> list[OpCode]:
    used = {op.opcode for _, op in model.iter_ops()}
    order = [c for c in model.opcode_order if c in used]
    seen = set(order)
    for _, op in model.iter_ops():
        if op.opcode not in seen:
            order.append(op.opcode)
            seen.add(op.opcode)
    return order


def _tensor_t(t: Tensor, buffer_index: int) -> Any:
    rt = S.TensorT()
    rt.shape = list(t.shape) if t.shape is not None else []
    rt.type = t.dtype
    rt.buffer = buffer_index
    rt.name = t.name
    rt.quantization = t.quantization
    rt.isVariable = t.is_variable
    rt.sparsity = t.sparsity
    rt.shapeSignature = list(t.shape_signature) if t.shape_signature is not None else None
    rt.hasRank = t.has_rank
    rt.variantTensors = t.variant_tensors
    return rt


class _TensorTable:
    """Tensor -> index while writing; tensors referenced but missing from ``sg.tensors`` are appended."""

    def __init__(self, tensors: list[Tensor]) -> None:
        self.tensors = list(tensors)
        self._index = {id(t): i for i, t in enumerate(self.tensors)}

    def index(self, t: Tensor | None) -> int:
        if t is None:
            return -1
        i = self._index.get(id(t))
        if i is None:
            self.tensors.append(t)
            i = self._index[id(t)] = len(self.tensors) - 1
        return i


def _tensor_map(name: str, index: int) -> Any:
    x = S.TensorMapT()
    x.name, x.tensorIndex = name, index
    return x


def _operator_t(op: Op, tt: _TensorTable, opcode_index: int, sg_index: dict[int, int]) -> Any:
    ro = S.OperatorT()
    ro.opcodeIndex = opcode_index
    ro.inputs = [tt.index(t) for t in op.inputs]
    ro.outputs = [tt.index(t) for t in op.outputs]
    ro.builtinOptionsType, ro.builtinOptions = op.options_type, op.options
    ro.builtinOptions2Type, ro.builtinOptions2 = op.options2_type, op.options2
    if op.subgraph_refs:  # write the current subgraph indices into copies of the options
        ro.builtinOptions = clone_options(op.options)
        ro.builtinOptions2 = clone_options(op.options2)
        for (which, fld), target in op.subgraph_refs.items():
            if id(target) not in sg_index:
                raise ValueError(f"{op.type} refers to a subgraph that is no longer in the model")
            setattr(ro.builtinOptions if which == "options" else ro.builtinOptions2, fld, sg_index[id(target)])
    if op.custom_options is not None:
        ro.customOptions = np.frombuffer(op.custom_options, dtype=np.uint8)
    ro.customOptionsFormat = op.custom_options_format
    ro.mutatingVariableInputs = op.mutating_variable_inputs
    ro.intermediates = [tt.index(t) for t in op.intermediates] if op.intermediates else None
    ro.debugMetadataIndex = op.debug_metadata_index
    return ro


def _model_t(model: Model, buffers: list[Buffer], offsets: list[int] | None) -> Any:
    buf_index = {id(b): i + 1 for i, b in enumerate(buffers)}
    sg_index = {id(sg): i for i, sg in enumerate(model.subgraphs)}
    codes = _opcodes(model)
    code_index = {c: i for i, c in enumerate(codes)}
    m = S.ModelT()
    m.version = model.version
    m.description = model.description
    m.operatorCodes = []
    for c in codes:
        oc = S.OperatorCodeT()
        oc.builtinCode = c.builtin
        oc.deprecatedBuiltinCode = min(c.builtin, S.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
        oc.customCode = c.custom
        oc.version = c.version
        m.operatorCodes.append(oc)
    m.buffers = [_BufferOut(None)] + [
        _BufferOut(b.data, offsets[i] if offsets is not None else 0) for i, b in enumerate(buffers)
    ]
    m.subgraphs = []
    tables: dict[int, _TensorTable] = {}
    for sg in model.subgraphs:
        tt = tables[id(sg)] = _TensorTable(sg.tensors)
        rs = S.SubGraphT()
        rs.name = sg.name
        rs.operators = [_operator_t(op, tt, code_index[op.opcode], sg_index) for op in sg.ops]
        rs.inputs = [tt.index(t) for t in sg.inputs]
        rs.outputs = [tt.index(t) for t in sg.outputs]
        for s in model.signatures:
            if s.subgraph is sg:
                for _, t in s.inputs + s.outputs:
                    tt.index(t)
        rs.tensors = [_tensor_t(t, buf_index[id(t.buffer)] if t.buffer is not None else 0) for t in tt.tensors]
        rs.debugMetadataIndex = sg.debug_metadata_index
        m.subgraphs.append(rs)
    m.signatureDefs = []
    for s in model.signatures:
        sd = S.SignatureDefT()
        sd.signatureKey = s.key
        sd.subgraphIndex = sg_index[id(s.subgraph)]
        sd.inputs = [_tensor_map(n, tables[id(s.subgraph)].index(t)) for n, t in s.inputs]
        sd.outputs = [_tensor_map(n, tables[id(s.subgraph)].index(t)) for n, t in s.outputs]
        m.signatureDefs.append(sd)
    m.metadata = []
    for name, b in model.metadata:
        md = S.MetadataT()
        md.name, md.buffer = name, (buf_index[id(b)] if b is not None else 0)
        m.metadata.append(md)
    m.metadataBuffer = [buf_index[id(b)] if b is not None else 0 for b in model.metadata_buffer] or None
    return m


def _pack(m: Any, size_hint: int) -> flatbuffers.Builder:
    builder = flatbuffers.Builder(min(max(size_hint, 1 << 16), FLATBUFFER_LIMIT))
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    return builder


def write_model(model: Model, path: str | os.PathLike[str], *, offset_buffers: bool | None = None) -> Path:
    """Write ``model`` to ``path`` atomically (temp file + rename). ``offset_buffers=None`` decides by size."""
    dst = Path(path)
    buffers = _collect_buffers(model)
    data_bytes = sum(b.nbytes for b in buffers)
    if offset_buffers is None:
        offset_buffers = data_bytes > DEFAULT_OFFSET_THRESHOLD
    graph_hint = 256 * sum(len(sg.ops) + len(sg.tensors) for sg in model.subgraphs) + (1 << 20)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=dst.name + ".", suffix=".part", dir=dst.parent)
    # mkstemp creates 0600; give the model the permissions a plain open() would (umask applied).
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    try:
        with os.fdopen(fd, "wb") as f:
            if not offset_buffers:
                builder = _pack(_model_t(model, buffers, None), data_bytes + 16 * len(buffers) + graph_hint)
                f.write(memoryview(builder.Bytes)[builder.Head() :])
            else:
                placeholder = [1 << 40] * len(buffers)
                probe = _pack(_model_t(model, buffers, placeholder), graph_hint)
                fb_len = len(probe.Bytes) - probe.Head()
                del probe
                offsets, pos = [], _align(fb_len)
                for b in buffers:
                    offsets.append(pos)
                    pos = _align(pos + b.nbytes)
                builder = _pack(_model_t(model, buffers, offsets), graph_hint)
                fb = memoryview(builder.Bytes)[builder.Head() :]
                if len(fb) != fb_len:
                    raise RuntimeError(f"flatbuffer size changed between packing passes ({fb_len} -> {len(fb)})")
                f.write(fb)
                written = len(fb)
                for b, off in zip(buffers, offsets):
                    f.write(b"\0" * (off - written))
                    f.write(memoryview(np.ascontiguousarray(b.data)).cast("B"))
                    written = off + b.nbytes
                f.write(b"\0" * (_align(written) - written))
        os.replace(tmp_name, dst)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    return dst


def _align(n: int) -> int:
    return (n + _DATA_ALIGN - 1) // _DATA_ALIGN * _DATA_ALIGN


__all__ = ["DEFAULT_OFFSET_THRESHOLD", "ModelFormatError", "parse_model", "read_model", "write_model"]
