"""Single-op GEMM-shaped .tflite models (FULLY_CONNECTED, BATCH_MATMUL, CONV_2D, SdConv2DWinograd) and their
float64 NumPy references, for the GPU GEMM/conv tests and bench/opencl_gemm_bench.py."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from ai_edge_litert import schema_py_generated as S

from tflite_models import GraphBuilder

ACTIVATIONS = {"none": S.ActivationFunctionType.NONE, "relu": S.ActivationFunctionType.RELU,
               "relu6": S.ActivationFunctionType.RELU6, "relu_n1_to_1": S.ActivationFunctionType.RELU_N1_TO_1,
               "tanh": S.ActivationFunctionType.TANH}


class OpGraphBuilder(GraphBuilder):
    """GraphBuilder plus the builtin GEMM-shaped ops; constants are packed from numpy (fast for large weights)."""

    def const(self, name: str, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array)
        buf = S.BufferT()
        buf.data = np.frombuffer(array.tobytes(), np.uint8)  # the object API packs ndarrays in one call
        self._buffers.append(buf)
        return self._add_tensor(name, array.shape, array.dtype, buffer=len(self._buffers) - 1)

    def builtin(self, code: int, options_type: int, options, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        op = S.OperatorT()
        op.opcodeIndex = self._opcode(code, None, 1)
        op.inputs = list(inputs)
        op.outputs = list(outputs)
        op.builtinOptionsType = options_type
        op.builtinOptions = options
        self._operators.append(op)


def activate(y: np.ndarray, activation: str) -> np.ndarray:
    return {"none": lambda v: v, "relu": lambda v: np.maximum(v, 0.0), "relu6": lambda v: np.clip(v, 0.0, 6.0),
            "relu_n1_to_1": lambda v: np.clip(v, -1.0, 1.0), "tanh": np.tanh}[activation](y)


def add_mul_model(shape: Sequence[int], c: np.ndarray, d: np.ndarray) -> bytes:
    """y = (x + c) * d, c and d constants broadcast against x: two elementwise kernel launches."""
    g = OpGraphBuilder()
    x = g.input("x", tuple(shape))
    s = g.tensor("s", tuple(shape))
    y = g.tensor("y", tuple(shape))
    g.add(x, g.const("c", c), s)
    g.mul(s, g.const("d", d), y)
    g.output(y)
    return g.build()


def fully_connected_model(x_shape: Sequence[int], w: np.ndarray, b: np.ndarray | None, activation: str = "none",
                          const_weights: bool = True) -> bytes:
    """x [..., K] . w[N, K]^T (+ b) -> y [..., N]; ``const_weights=False`` makes w a graph input ``w``."""
    g = OpGraphBuilder()
    x = g.input("x", x_shape)
    wt = g.const("w", w.astype(np.float32)) if const_weights else g.input("w", w.shape)
    ins = [x, wt] + ([g.const("b", b.astype(np.float32))] if b is not None else [-1])
    y = g.tensor("y", [*x_shape[:-1], w.shape[0]])
    opts = S.FullyConnectedOptionsT()
    opts.fusedActivationFunction = ACTIVATIONS[activation]
    opts.keepNumDims = True
    g.builtin(S.BuiltinOperator.FULLY_CONNECTED, S.BuiltinOptions.FullyConnectedOptions, opts, ins, [y])
    g.output(y)
    return g.build()


def fully_connected_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, activation: str = "none") -> np.ndarray:
    y = x.astype(np.float64) @ w.astype(np.float64).T
    if b is not None:
        y = y + b.astype(np.float64)
    return activate(y, activation).astype(np.float32)


def batch_matmul_model(a_shape: Sequence[int], b_shape: Sequence[int], out_shape: Sequence[int], adj_x: bool,
                       adj_y: bool) -> bytes:
    g = OpGraphBuilder()
    a = g.input("a", a_shape)
    b = g.input("b", b_shape)
    y = g.tensor("y", out_shape)
    opts = S.BatchMatMulOptionsT()
    opts.adjX, opts.adjY = adj_x, adj_y
    g.builtin(S.BuiltinOperator.BATCH_MATMUL, S.BuiltinOptions.BatchMatMulOptions, opts, [a, b], [y])
    g.output(y)
    return g.build()


def batch_matmul_ref(a: np.ndarray, b: np.ndarray, adj_x: bool, adj_y: bool) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if adj_x:
        a64 = np.swapaxes(a64, -1, -2)
    if adj_y:
        b64 = np.swapaxes(b64, -1, -2)
    return np.matmul(a64, b64).astype(np.float32)


def conv_out_size(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
    eff = (k - 1) * dilation + 1
    return (size + stride - 1) // stride if padding == "SAME" else (size - eff + stride) // stride


def conv2d_model(x_shape: Sequence[int], w: np.ndarray, b: np.ndarray | None, stride: int = 1, dilation: int = 1,
                 padding: str = "SAME", activation: str = "none", const_weights: bool = True) -> bytes:
    """NHWC x, OHWI w -> CONV_2D -> y; ``const_weights=False`` makes w a graph input ``w``."""
    n, h, wd, _ = x_shape
    co, kh, kw, _ = w.shape
    g = OpGraphBuilder()
    x = g.input("x", x_shape)
    wt = g.const("w", w.astype(np.float32)) if const_weights else g.input("w", w.shape)
    ins = [x, wt] + ([g.const("b", b.astype(np.float32))] if b is not None else [-1])
    oh, ow = conv_out_size(h, kh, stride, dilation, padding), conv_out_size(wd, kw, stride, dilation, padding)
    y = g.tensor("y", [n, oh, ow, co])
    opts = S.Conv2DOptionsT()
    opts.padding = S.Padding.SAME if padding == "SAME" else S.Padding.VALID
    opts.strideH = opts.strideW = stride
    opts.dilationHFactor = opts.dilationWFactor = dilation
    opts.fusedActivationFunction = ACTIVATIONS[activation]
    g.builtin(S.BuiltinOperator.CONV_2D, S.BuiltinOptions.Conv2DOptions, opts, ins, [y])
    g.output(y)
    return g.build()


def conv2d_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int = 1, dilation: int = 1,
               padding: str = "SAME", activation: str = "none") -> np.ndarray:
    """float64 NHWC x OHWI convolution with TFLite's padding rule (SAME: extra padding bottom/right)."""
    n, h, wd, ci = x.shape
    co, kh, kw, _ = w.shape
    oh, ow = conv_out_size(h, kh, stride, dilation, padding), conv_out_size(wd, kw, stride, dilation, padding)
    pt = pl = 0
    if padding == "SAME":
        pt = max(0, (oh - 1) * stride + (kh - 1) * dilation + 1 - h) // 2
        pl = max(0, (ow - 1) * stride + (kw - 1) * dilation + 1 - wd) // 2
    xp = np.zeros((n, h + 2 * (kh * dilation) + stride * oh, wd + 2 * (kw * dilation) + stride * ow, ci))
    xp[:, :h, :wd] = x
    y = np.zeros((n, oh, ow, co))
    w64 = w.astype(np.float64)
    for ky in range(kh):
        for kx in range(kw):
            iy = np.arange(oh) * stride - pt + ky * dilation
            ix = np.arange(ow) * stride - pl + kx * dilation
            patch = xp[:, np.where(iy < 0, xp.shape[1] - 1, iy)][:, :, np.where(ix < 0, xp.shape[2] - 1, ix)]
            y += patch @ w64[:, ky, kx, :].T  # rows/cols < 0 read the zero border at the far end
    if b is not None:
        y += b.astype(np.float64)
    return activate(y, activation).astype(np.float32)


def winograd_model(x_shape: Sequence[int], w: np.ndarray, b: np.ndarray, options: bytes, padding: str = "SAME") -> bytes:
    n, h, wd, _ = x_shape
    ho, wo = (h, wd) if padding == "SAME" else (h - 2, wd - 2)
    g = OpGraphBuilder()
    x = g.input("x", x_shape)
    y = g.tensor("y", [n, ho, wo, w.shape[0]])
    g.custom("SdConv2DWinograd", [x, g.const("w", w.astype(np.float32)), g.const("b", b.astype(np.float32))], [y],
             options)
    g.output(y)
    return g.build()
