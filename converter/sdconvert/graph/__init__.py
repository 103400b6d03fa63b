"""Mutable graph IR for .tflite models: read, edit (tensors and ops by reference), toposort, clean up, write."""

from __future__ import annotations

from .io import ModelFormatError, parse_model, read_model, write_model
from .ir import Buffer, Model, Op, OpCode, SignatureDef, Subgraph, Tensor

__all__ = [
    "Buffer",
    "Model",
    "ModelFormatError",
    "Op",
    "OpCode",
    "SignatureDef",
    "Subgraph",
    "Tensor",
    "parse_model",
    "read_model",
    "write_model",
]
