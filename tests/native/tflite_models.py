"""Build tiny .tflite flatbuffers in memory for the native delegate tests.

Uses the object API of ``ai_edge_litert.schema_py_generated``. Only what the
tests need: float32 graph inputs, constant tensors, custom ops with
flexbuffer options, a few builtin ops (ADD, MUL) and one ``serving_default``
signature.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as S
from flatbuffers import flexbuffers

_TYPES = {np.dtype(np.float32): S.TensorType.FLOAT32, np.dtype(np.int32): S.TensorType.INT32,
          np.dtype(np.float16): S.TensorType.FLOAT16}


def flex(options: dict) -> bytes:
    """Encode a dict as a flexbuffer map (the custom-options format of Sd* ops)."""
    return bytes(flexbuffers.Dumps(options))


@dataclass
class GraphBuilder:
    """Accumulates one subgraph; ``build()`` returns the serialized model."""

    _tensors: list = field(default_factory=list)
    _buffers: list = field(default_factory=lambda: [S.BufferT()])  # buffer 0: the empty sentinel
    _opcodes: list = field(default_factory=list)
    _operators: list = field(default_factory=list)
    _inputs: list = field(default_factory=list)
    _outputs: list = field(default_factory=list)

    def _add_tensor(self, name: str, shape: Sequence[int], dtype, buffer: int = 0) -> int:
        t = S.TensorT()
        t.name = name
        t.shape = [int(d) for d in shape]
        t.type = _TYPES[np.dtype(dtype)]
        t.buffer = buffer
        self._tensors.append(t)
        return len(self._tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype=np.float32) -> int:
        index = self._add_tensor(name, shape, dtype)
        self._inputs.append(index)
        return index

    def const(self, name: str, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        buf = S.BufferT()
        buf.data = list(array.tobytes())
        self._buffers.append(buf)
        return self._add_tensor(name, array.shape, array.dtype, buffer=len(self._buffers) - 1)

    def tensor(self, name: str, shape: Sequence[int], dtype=np.float32) -> int:
        return self._add_tensor(name, shape, dtype)

    def output(self, index: int) -> None:
        self._outputs.append(index)

    def _opcode(self, builtin: int, custom: str | None, version: int) -> int:
        for i, code in enumerate(self._opcodes):
            if (code.builtinCode, code.customCode, code.version) == (builtin, custom, version):
                return i
        code = S.OperatorCodeT()
        code.builtinCode = builtin
        code.deprecatedBuiltinCode = min(builtin, 127)
        code.customCode = custom
        code.version = version
        self._opcodes.append(code)
        return len(self._opcodes) - 1

    def custom(self, name: str, inputs: Sequence[int], outputs: Sequence[int], options: bytes | None,
               version: int = 1) -> None:
        op = S.OperatorT()
        op.opcodeIndex = self._opcode(S.BuiltinOperator.CUSTOM, name, version)
        op.inputs = list(inputs)
        op.outputs = list(outputs)
        if options is not None:
            op.customOptions = list(options)
            op.customOptionsFormat = S.CustomOptionsFormat.FLEXBUFFERS
        self._operators.append(op)

    def add(self, a: int, b: int, out: int) -> None:
        self._binary(S.BuiltinOperator.ADD, S.BuiltinOptions.AddOptions, S.AddOptionsT(), a, b, out)

    def mul(self, a: int, b: int, out: int) -> None:
        self._binary(S.BuiltinOperator.MUL, S.BuiltinOptions.MulOptions, S.MulOptionsT(), a, b, out)

    def _binary(self, code: int, options_type: int, options, a: int, b: int, out: int) -> None:
        op = S.OperatorT()
        op.opcodeIndex = self._opcode(code, None, 1)
        op.inputs = [a, b]
        op.outputs = [out]
        op.builtinOptionsType = options_type
        op.builtinOptions = options
        self._operators.append(op)

    def build(self) -> bytes:
        sub = S.SubGraphT()
        sub.tensors = self._tensors
        sub.inputs = self._inputs
        sub.outputs = self._outputs
        sub.operators = self._operators
        sub.name = "main"
        sig = S.SignatureDefT()
        sig.signatureKey = "serving_default"
        sig.subgraphIndex = 0
        sig.inputs = [_tensor_map(self._tensors[i].name, i) for i in self._inputs]
        sig.outputs = [_tensor_map(self._tensors[i].name, i) for i in self._outputs]
        model = S.ModelT()
        model.version = 3
        model.description = "sdconvert native delegate test model"
        model.operatorCodes = self._opcodes
        model.subgraphs = [sub]
        model.buffers = self._buffers
        model.signatureDefs = [sig]
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())


def _tensor_map(name: str, index: int):
    m = S.TensorMapT()
    m.name = name
    m.tensorIndex = index
    return m


def attention_model(n: int, sq: int, sk: int, heads: int, head_dim: int, options: bytes | None) -> bytes:
    """Q [n,sq,H*D], K/V [n,sk,H*D] -> SdAttention -> O [n,sq,H*D]."""
    g = GraphBuilder()
    hd = heads * head_dim
    q = g.input("q", [n, sq, hd])
    k = g.input("k", [n, sk, hd])
    v = g.input("v", [n, sk, hd])
    o = g.tensor("o", [n, sq, hd])
    g.custom("SdAttention", [q, k, v], [o], options)
    g.output(o)
    return g.build()


def gelu_model(shape: Sequence[int], options: bytes | None) -> bytes:
    g = GraphBuilder()
    x = g.input("x", shape)
    y = g.tensor("y", shape)
    g.custom("SdGelu", [x], [y], options)
    g.output(y)
    return g.build()


def group_norm_model(shape: Sequence[int], gamma: np.ndarray, beta: np.ndarray, options: bytes | None) -> bytes:
    g = GraphBuilder()
    x = g.input("x", shape)
    gm = g.const("gamma", gamma.astype(np.float32))
    bt = g.const("beta", beta.astype(np.float32))
    y = g.tensor("y", shape)
    g.custom("SdGroupNorm", [x, gm, bt], [y], options)
    g.output(y)
    return g.build()
