"""Tiny hand-built .tflite models for runtime tests (no converter needed).

``fused_gelu_model``: y = SdGelu(x + a) * b - a builtin ADD and MUL around one fused ``SdGelu`` custom op,
so a run shows both XNNPACK and our native delegate in the placement report.
"""
from __future__ import annotations

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as S
from flatbuffers import flexbuffers

SHAPE = (1, 16)
ADD_CONST = np.linspace(-2.0, 2.0, SHAPE[1], dtype=np.float32).reshape(SHAPE)
MUL_CONST = np.full(SHAPE, 0.5, dtype=np.float32)


def _tensor(name: str, buffer: int = 0):
    t = S.TensorT()
    t.name, t.shape, t.type, t.buffer = name.encode(), list(SHAPE), S.TensorType.FLOAT32, buffer
    return t


def _buffer(data: np.ndarray | None):
    b = S.BufferT()
    if data is not None:
        b.data = np.frombuffer(np.ascontiguousarray(data).tobytes(), dtype=np.uint8)
    return b


def _code(builtin: int, custom: str | None = None):
    c = S.OperatorCodeT()
    c.builtinCode, c.deprecatedBuiltinCode, c.version = builtin, min(builtin, 127), 1
    if custom is not None:
        c.customCode = custom.encode()
    return c


def _op(code: int, inputs: list[int], outputs: list[int], options_type: int = 0, options=None,
        custom_options: bytes | None = None):
    op = S.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = code, inputs, outputs
    if options is not None:
        op.builtinOptionsType, op.builtinOptions = options_type, options
    if custom_options is not None:
        op.customOptions = np.frombuffer(custom_options, dtype=np.uint8)
        op.customOptionsFormat = S.CustomOptionsFormat.FLEXBUFFERS
    return op


def fused_gelu_model(approximate: str = "none") -> bytes:
    tensors = [_tensor("x"), _tensor("a", 1), _tensor("x_plus_a"), _tensor("gelu"), _tensor("b", 2), _tensor("y")]
    codes = [_code(S.BuiltinOperator.ADD), _code(S.BuiltinOperator.CUSTOM, "SdGelu"), _code(S.BuiltinOperator.MUL)]
    gelu_opts = bytes(flexbuffers.Dumps({"approximate": approximate}))
    ops = [
        _op(0, [0, 1], [2], S.BuiltinOptions.AddOptions, S.AddOptionsT()),
        _op(1, [2], [3], custom_options=gelu_opts),
        _op(2, [3, 4], [5], S.BuiltinOptions.MulOptions, S.MulOptionsT()),
    ]
    sub = S.SubGraphT()
    sub.tensors, sub.operators, sub.inputs, sub.outputs = tensors, ops, [0], [5]
    sig = S.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = "serving_default", 0
    tin, tout = S.TensorMapT(), S.TensorMapT()
    tin.name, tin.tensorIndex, tout.name, tout.tensorIndex = "x", 0, "y", 5
    sig.inputs, sig.outputs = [tin], [tout]
    model = S.ModelT()
    model.version, model.operatorCodes, model.subgraphs, model.signatureDefs = 3, codes, [sub], [sig]
    model.buffers = [_buffer(None), _buffer(ADD_CONST), _buffer(MUL_CONST)]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def fused_gelu_reference(x: np.ndarray) -> np.ndarray:
    """float64 erf-GELU reference of :func:`fused_gelu_model` (approximate="none")."""
    from math import erf, sqrt

    z = x.astype(np.float64) + ADD_CONST
    g = 0.5 * z * (1.0 + np.vectorize(erf)(z / sqrt(2.0)))
    return g * MUL_CONST
