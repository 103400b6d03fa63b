"""Weight-only precision: store large float32 constants as fp16 or int8 and DEQUANTIZE them to fp32 at load time.

This is the standard TFLite "float16 / weight-only" form: compute stays fp32, the file (and GPU weight upload) shrinks
2x (fp16) or 4x (int8, symmetric, per output channel on axis 0). GPU delegates fold the DEQUANTIZE into the weights.

Why not ai-edge-quantizer: version 0.10 fails on conv weights with more than 2**23 elements (SD1.5's 1280x1280x3x3
convs): on its >32 MiB path the per-channel scale array is broadcast against the wrong axis and it raises a shape
error ("operands could not be broadcast together"). This pass quantizes each tensor in one numpy expression instead.
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MIN_ELEMENTS = 1024  # small constants (biases, norms' gamma/beta, shape vectors) stay fp32


@dataclass(frozen=True)
class PrecisionReport:
    precision: str
    tensors: int
    bytes_before: int
    bytes_after: int


def _buffer_array(model, tensor) -> np.ndarray | None:
    buf = model.buffers[tensor.buffer]
    if buf.data is None or not len(buf.data):
        return None
    data = np.asarray(buf.data, dtype=np.uint8)
    return data.view(np.float32).reshape(tuple(tensor.shape))


def convert_weights(src: Path, dst: Path, precision: str) -> PrecisionReport:
    """Rewrite ``src`` into ``dst`` with weight-only ``precision`` in {"fp16", "int8"} (outputs < 2 GB)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as S

    if precision not in ("fp16", "int8"):
        raise ValueError(precision)
    with open(src, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    # numpy views into the mapping stay alive inside ``model`` until it is packed; the mapping is closed by GC.
    raw = memoryview(mm)
    model = S.ModelT.InitFromPackedBuf(raw, 0)
    _inline_offset_buffers(model, raw)
    deq_index = _opcode_index(model, S.BuiltinOperator.DEQUANTIZE, S)
    count = before = after = 0
    for sg in model.subgraphs:
        done: dict[int, int] = {}
        new_ops = []
        for op in sg.operators:
            for pos, t_idx in enumerate(op.inputs):
                if t_idx < 0:
                    continue
                if t_idx in done:
                    continue
                t = sg.tensors[t_idx]
                if t.type != S.TensorType.FLOAT32 or t.shape is None or int(np.prod(t.shape)) < MIN_ELEMENTS:
                    continue
                arr = _buffer_array(model, t)
                if arr is None:
                    continue
                q_tensor, q_bytes = _quantize(arr, t, precision, S)
                model.buffers.append(_buffer(q_bytes, S))
                q_tensor.buffer = len(model.buffers) - 1
                sg.tensors.append(q_tensor)
                q_idx = len(sg.tensors) - 1
                # the original tensor becomes the DEQUANTIZE output: drop its constant data
                empty = S.BufferT()
                model.buffers[t.buffer] = empty
                deq = S.OperatorT()
                deq.opcodeIndex, deq.inputs, deq.outputs = deq_index, [q_idx], [t_idx]
                new_ops.append(deq)
                done[t_idx] = q_idx
                count += 1
                before += arr.nbytes
                after += len(q_bytes)
        sg.operators = new_ops + list(sg.operators)
    builder = flatbuffers.Builder(1 << 20)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    out = builder.Output()
    del model, raw, mm
    tmp = dst.with_suffix(".part")
    tmp.write_bytes(out)
    tmp.replace(dst)
    return PrecisionReport(precision, count, before, after)


def _inline_offset_buffers(model, raw: memoryview) -> None:
    """Models over 2 GB keep buffer data after the flatbuffer (``offset``/``size``); the output is one flatbuffer,
    so every such buffer becomes inline data (a view into the mapping, copied only when packed)."""
    for buf in model.buffers:
        if getattr(buf, "offset", 0) > 1 and getattr(buf, "size", 0):
            buf.data = np.frombuffer(raw, dtype=np.uint8, count=buf.size, offset=buf.offset)
            buf.offset, buf.size = 0, 0


def _opcode_index(model, code: int, S) -> int:
    for i, oc in enumerate(model.operatorCodes):
        if max(oc.builtinCode, oc.deprecatedBuiltinCode) == code:
            return i
    oc = S.OperatorCodeT()
    oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, min(code, 127), 1
    model.operatorCodes.append(oc)
    return len(model.operatorCodes) - 1


def _buffer(data: bytes, S):
    b = S.BufferT()
    b.data = np.frombuffer(data, dtype=np.uint8)
    return b


def _quantize(arr: np.ndarray, t, precision: str, S):
    q = S.TensorT()
    q.shape = list(t.shape)
    q.name = (t.name or b"weight") + (b"_fp16" if precision == "fp16" else b"_int8")
    if precision == "fp16":
        q.type = S.TensorType.FLOAT16
        return q, arr.astype(np.float16).tobytes()
    q.type = S.TensorType.INT8
    per_channel = arr.ndim >= 2
    flat = arr.reshape(arr.shape[0], -1) if per_channel else arr.reshape(1, -1)
    amax = np.abs(flat).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    qv = np.clip(np.rint(flat / scale[:, None]), -127, 127).astype(np.int8).reshape(arr.shape)
    qp = S.QuantizationParametersT()
    qp.scale = [float(s) for s in scale]
    qp.zeroPoint = [0] * len(scale)
    qp.quantizedDimension = 0
    q.quantization = qp
    return q, qv.tobytes()
