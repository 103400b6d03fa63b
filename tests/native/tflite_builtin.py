"""Builtin TFLite ops on top of :class:`tflite_models.GraphBuilder` (views, reductions, softmax, broadcasting math).

Kept apart from ``tflite_models`` so those shared helpers stay small; every op here is one builtin with its
options table, built the way the converter's graphs have them (constant shape/axes inputs).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from ai_edge_litert import schema_py_generated as S

from tflite_models import GraphBuilder


class BuiltinGraph(GraphBuilder):
    def op(self, code: int, inputs: Sequence[int], out: int, options_type: int = 0, options=None) -> int:
        op = S.OperatorT()
        op.opcodeIndex = self._opcode(code, None, 1)
        op.inputs = list(inputs)
        op.outputs = [out]
        if options is not None:
            op.builtinOptionsType = options_type
            op.builtinOptions = options
        self._operators.append(op)
        return out

    def reshape(self, x: int, shape: Sequence[int], name: str) -> int:
        o = S.ReshapeOptionsT()
        o.newShape = [int(d) for d in shape]
        s = self.const(f"{name}_shape", np.asarray(shape, np.int32))
        return self.op(S.BuiltinOperator.RESHAPE, [x, s], self.tensor(name, shape), S.BuiltinOptions.ReshapeOptions, o)

    def squeeze(self, x: int, dims: Sequence[int], out_shape: Sequence[int], name: str) -> int:
        o = S.SqueezeOptionsT()
        o.squeezeDims = list(dims)
        return self.op(S.BuiltinOperator.SQUEEZE, [x], self.tensor(name, out_shape), S.BuiltinOptions.SqueezeOptions, o)

    def expand_dims(self, x: int, axis: int, out_shape: Sequence[int], name: str) -> int:
        a = self.const(f"{name}_axis", np.asarray([axis], np.int32))
        return self.op(S.BuiltinOperator.EXPAND_DIMS, [x, a], self.tensor(name, out_shape),
                       S.BuiltinOptions.ExpandDimsOptions, S.ExpandDimsOptionsT())

    def binary(self, code: int, a: int, b: int, out_shape: Sequence[int], name: str) -> int:
        options = {S.BuiltinOperator.ADD: (S.BuiltinOptions.AddOptions, S.AddOptionsT),
                   S.BuiltinOperator.MUL: (S.BuiltinOptions.MulOptions, S.MulOptionsT),
                   S.BuiltinOperator.SUB: (S.BuiltinOptions.SubOptions, S.SubOptionsT)}[code]
        return self.op(code, [a, b], self.tensor(name, out_shape), options[0], options[1]())

    def reduce(self, code: int, x: int, axes: Sequence[int], out_shape: Sequence[int], keep_dims: bool,
               name: str) -> int:
        o = S.ReducerOptionsT()
        o.keepDims = keep_dims
        a = self.const(f"{name}_axes", np.asarray(axes, np.int32))
        return self.op(code, [x, a], self.tensor(name, out_shape), S.BuiltinOptions.ReducerOptions, o)

    def softmax(self, x: int, shape: Sequence[int], beta: float, name: str) -> int:
        o = S.SoftmaxOptionsT()
        o.beta = beta
        return self.op(S.BuiltinOperator.SOFTMAX, [x], self.tensor(name, shape), S.BuiltinOptions.SoftmaxOptions, o)

    def transpose(self, x: int, perm: Sequence[int], out_shape: Sequence[int], name: str) -> int:
        p = self.const(f"{name}_perm", np.asarray(perm, np.int32))
        return self.op(S.BuiltinOperator.TRANSPOSE, [x, p], self.tensor(name, out_shape),
                       S.BuiltinOptions.TransposeOptions, S.TransposeOptionsT())

    def slice(self, x: int, begin: Sequence[int], size: Sequence[int], name: str) -> int:
        b = self.const(f"{name}_begin", np.asarray(begin, np.int32))
        s = self.const(f"{name}_size", np.asarray(size, np.int32))
        return self.op(S.BuiltinOperator.SLICE, [x, b, s], self.tensor(name, size), S.BuiltinOptions.SliceOptions,
                       S.SliceOptionsT())

    def concat(self, xs: Sequence[int], axis: int, out_shape: Sequence[int], name: str) -> int:
        o = S.ConcatenationOptionsT()
        o.axis = axis
        return self.op(S.BuiltinOperator.CONCATENATION, list(xs), self.tensor(name, out_shape),
                       S.BuiltinOptions.ConcatenationOptions, o)

    def pad(self, x: int, pads: Sequence[Sequence[int]], out_shape: Sequence[int], name: str) -> int:
        p = self.const(f"{name}_pads", np.asarray(pads, np.int32))
        return self.op(S.BuiltinOperator.PAD, [x, p], self.tensor(name, out_shape), S.BuiltinOptions.PadOptions,
                       S.PadOptionsT())

    def resize_nearest(self, x: int, size: Sequence[int], out_shape: Sequence[int], name: str) -> int:
        s = self.const(f"{name}_size", np.asarray(size, np.int32))
        return self.op(S.BuiltinOperator.RESIZE_NEAREST_NEIGHBOR, [x, s], self.tensor(name, out_shape),
                       S.BuiltinOptions.ResizeNearestNeighborOptions, S.ResizeNearestNeighborOptionsT())
