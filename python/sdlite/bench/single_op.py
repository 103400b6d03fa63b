"""Cut one node out of a .tflite model into a standalone one-node model (for isolated per-op timing).

The node keeps its operator code, options and constant inputs (weights, shape constants); its other
inputs become model inputs and its outputs the model outputs. Built from the flatbuffer reader API over an
``mmap`` plus the object API for the few objects copied, so cutting a node out of a 1.7 GB UNet copies only
that node's weights. Only subgraph 0 is supported; control-flow ops (which call other subgraphs) are not.
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sdlite.errors import SdliteError

_ALIGN = 16  # weight buffers 16-byte aligned like the TFLite converter writes them
SIGNATURE = "serving_default"  # inputs input_0.., outputs output_0.. in the node's order


@dataclass(frozen=True)
class SingleOpModel:
    op_index: int
    content: bytes
    key: tuple  # equal keys = same op type, options and shapes: same cost (weights' values aside)
    inputs: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype) of each model input, in order


class ModelCutter:
    """Holds the model mapped in memory; ``cut(i)`` builds the one-node model of op ``i``."""

    def __init__(self, path: Path) -> None:
        from ai_edge_litert import schema_py_generated as S

        self._S = S
        self._fh = open(path, "rb")
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
        self._model = S.Model.GetRootAs(self._mm, 0)
        self._sg = self._model.Subgraphs(0)

    def close(self) -> None:
        self._model = None
        self._sg = None
        try:
            self._mm.close()
        except BufferError:  # numpy views of weights still alive elsewhere; the GC unmaps later
            pass
        self._fh.close()

    def __enter__(self) -> "ModelCutter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _buffer_data(self, index: int) -> np.ndarray | None:
        buf = self._model.Buffers(index)
        if buf.DataLength() > 0:
            return buf.DataAsNumpy()
        if buf.Offset() > 1 and buf.Size() > 0:  # large models keep weights after the flatbuffer
            return np.frombuffer(self._mm, dtype=np.uint8, count=buf.Size(), offset=buf.Offset())
        return None

    def cut(self, op_index: int) -> SingleOpModel:
        S = self._S
        op = self._sg.Operators(op_index)
        op_t = S.OperatorT.InitFromObj(op)
        code_t = S.OperatorCodeT.InitFromObj(self._model.OperatorCodes(op.OpcodeIndex()))
        if code_t.builtinCode in (S.BuiltinOperator.WHILE, S.BuiltinOperator.IF, S.BuiltinOperator.CALL_ONCE):
            raise SdliteError(f"op {op_index} calls subgraphs; it cannot be profiled in isolation")
        op_t.inputs, op_t.outputs = _ints(op_t.inputs), _ints(op_t.outputs)
        op_t.intermediates = _ints(op_t.intermediates) if op_t.intermediates is not None else None
        used = [t for t in [*op_t.inputs, *op_t.outputs, *(op_t.intermediates or [])] if t >= 0]
        remap: dict[int, int] = {}
        tensors, datas = [], []
        model_inputs: list[int] = []
        input_specs = []
        for t in used:
            if t in remap:
                continue
            t_t = S.TensorT.InitFromObj(self._sg.Tensors(t))
            t_t.shape = _ints(t_t.shape)
            data = self._buffer_data(t_t.buffer) if t_t.buffer > 0 else None
            t_t.buffer = len(datas) + 1 if data is not None else 0
            if data is not None:
                datas.append(data)
            remap[t] = len(tensors)
            tensors.append(t_t)
        for t in op_t.inputs:
            if t >= 0 and tensors[remap[t]].buffer == 0 and remap[t] not in model_inputs:
                model_inputs.append(remap[t])
                input_specs.append((tuple(tensors[remap[t]].shape), int(tensors[remap[t]].type)))
        op_t.opcodeIndex = 0
        op_t.inputs = [remap[t] if t >= 0 else -1 for t in op_t.inputs]
        op_t.outputs = [remap[t] for t in op_t.outputs]
        if op_t.intermediates is not None:
            op_t.intermediates = [remap[t] for t in op_t.intermediates]
        sub = S.SubGraphT()
        sub.tensors, sub.operators = tensors, [op_t]
        sub.inputs, sub.outputs = model_inputs, list(op_t.outputs)
        model = S.ModelT()
        model.version, model.operatorCodes, model.subgraphs = 3, [code_t], [sub]
        model.description = f"op {op_index} of {Path(self._fh.name).name}".encode()
        sig = S.SignatureDefT()
        sig.signatureKey, sig.subgraphIndex = SIGNATURE, 0
        sig.inputs = [_tensor_map(S, f"input_{k}", t) for k, t in enumerate(sub.inputs)]
        sig.outputs = [_tensor_map(S, f"output_{k}", t) for k, t in enumerate(sub.outputs)]
        model.signatureDefs = [sig]
        content = _pack(S, model, datas)
        key = (
            code_t.builtinCode, code_t.customCode, op.BuiltinOptionsType(),
            _options_key(op_t),
            b"" if op_t.customOptions is None else np.asarray(op_t.customOptions, dtype=np.uint8).tobytes(),
            tuple((tuple(t.shape), t.type, t.buffer > 0) for t in tensors),
        )
        from sdlite.tflite_info import _TENSOR_TYPES

        specs = tuple((shape, _TENSOR_TYPES.get(tp, "float32")) for shape, tp in input_specs)
        return SingleOpModel(op_index, content, key, specs)


def _tensor_map(S, name: str, index: int):  # noqa: N803
    m = S.TensorMapT()
    m.name, m.tensorIndex = name, index
    return m


def _ints(values) -> list[int]:
    return [] if values is None else [int(v) for v in values]


def _options_key(op_t) -> tuple:
    opts = op_t.builtinOptions
    if opts is None:
        return ()
    return tuple(sorted((k, repr(v)) for k, v in vars(opts).items()))


def _pack(S, model, datas: list[np.ndarray]) -> bytes:  # noqa: N803
    """Serialize ``model`` with ``datas`` as buffers 1..n (buffer 0 is the empty sentinel), 16-byte aligned.

    The object API's ``BufferT.Pack`` aligns data only to its element size, so buffers are written by hand
    and the model table is assembled here around the object-API-packed opcodes and subgraph.
    """
    import flatbuffers

    builder = flatbuffers.Builder(1024 + sum(int(d.size) for d in datas) + _ALIGN * len(datas))
    data_offsets = []
    for d in datas:
        raw = np.ascontiguousarray(d, dtype=np.uint8).reshape(-1)
        builder.StartVector(1, raw.size, _ALIGN)
        builder.head -= raw.size
        builder.Bytes[builder.head : builder.head + raw.size] = raw.tobytes()
        data_offsets.append(_end_vector(builder, raw.size))
    buffer_offsets = []
    for off in [None, *data_offsets]:
        S.BufferStart(builder)
        if off is not None:
            S.BufferAddData(builder, off)
        buffer_offsets.append(S.BufferEnd(builder))
    codes = [c.Pack(builder) for c in model.operatorCodes]
    subgraphs = [sg.Pack(builder) for sg in model.subgraphs]
    desc = builder.CreateString(model.description)
    sigs = [sd.Pack(builder) for sd in model.signatureDefs]

    def vec(start_fn, items: list[int]) -> int:
        start_fn(builder, len(items))
        for item in reversed(items):
            builder.PrependUOffsetTRelative(item)
        return _end_vector(builder, len(items))

    codes_vec = vec(S.ModelStartOperatorCodesVector, codes)
    subgraphs_vec = vec(S.ModelStartSubgraphsVector, subgraphs)
    buffers_vec = vec(S.ModelStartBuffersVector, buffer_offsets)
    sigs_vec = vec(S.ModelStartSignatureDefsVector, sigs)
    S.ModelStart(builder)
    S.ModelAddVersion(builder, model.version)
    S.ModelAddOperatorCodes(builder, codes_vec)
    S.ModelAddSubgraphs(builder, subgraphs_vec)
    S.ModelAddDescription(builder, desc)
    S.ModelAddBuffers(builder, buffers_vec)
    S.ModelAddSignatureDefs(builder, sigs_vec)
    builder.Finish(S.ModelEnd(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _end_vector(builder, length: int) -> int:
    """``Builder.EndVector`` across flatbuffers versions (older ones take the length)."""
    try:
        return builder.EndVector()
    except TypeError:
        return builder.EndVector(length)


def trivial_model() -> bytes:
    """A one-node model adding two 1-element float tensors: its invoke time is the per-invoke overhead."""
    from ai_edge_litert import schema_py_generated as S

    def tensor(name: str):
        t = S.TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), [1], S.TensorType.FLOAT32, 0
        return t

    code = S.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = S.BuiltinOperator.ADD, S.BuiltinOperator.ADD, 1
    op = S.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, [0, 1], [2]
    op.builtinOptionsType, op.builtinOptions = S.BuiltinOptions.AddOptions, S.AddOptionsT()
    sub = S.SubGraphT()
    sub.tensors, sub.operators, sub.inputs, sub.outputs = [tensor("a"), tensor("b"), tensor("sum")], [op], [0, 1], [2]
    sig = S.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = SIGNATURE, 0
    sig.inputs = [_tensor_map(S, "input_0", 0), _tensor_map(S, "input_1", 1)]
    sig.outputs = [_tensor_map(S, "output_0", 2)]
    model = S.ModelT()
    model.version, model.operatorCodes, model.subgraphs = 3, [code], [sub]
    model.description, model.signatureDefs = b"invoke overhead probe", [sig]
    return _pack(S, model, [])
