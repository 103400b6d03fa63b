"""The op-case file that the native (C++, no Python) delegate test reads: small graphs of fused ``Sd*`` ops with
their reference outputs. tests/native_cc/op_cases.cc reads the same format; make_tiny_unet_ops.py writes it.

Inputs are not stored: every input and constant is regenerated from a seed by :func:`uniform` (a splitmix64 hash of
``(seed, index)``, exactly reproducible in C++). Outputs are stored as a sample, to keep the file small: the values
at ``SAMPLES`` indices ``(k * SAMPLE_STRIDE) % n`` (all of them when n <= SAMPLES; the stride is a prime, so the
indices are distinct and spread over every channel and SIMD lane) plus the float64 sum and sum of magnitudes of all
n values. Layout (little-endian; ``str`` / ``bytes`` = u32 length + data):

    b"SDOPCASE" u32 version(1) u32 num_cases
    case:   str name, u32 num_tensors, tensor*, u32 num_nodes, node*
    tensor: u8 kind (0 graph input, 1 constant, 2 intermediate, 3 graph output), u8 rank, i32 dims[rank],
            kind 0/1: u64 seed, f32 offset, f32 scale  (value[i] = float32(offset + scale * uniform(seed, i)))
            kind 3:   f64 sum, f64 abs_sum, f32 max_abs, u32 m, f32 sample[m]
    node:   str op (custom name), bytes options (flexbuffer), u32 n, i32 inputs[n], u32 m, i32 outputs[m]
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

MAGIC = b"SDOPCASE"
VERSION = 1
INPUT, CONST, INTERMEDIATE, OUTPUT = range(4)
SAMPLES = 256
SAMPLE_STRIDE = 7919


def sample_indices(n: int) -> np.ndarray:
    """The flat indices of an n-element output that the file stores."""
    m = min(n, SAMPLES)
    return (np.arange(m, dtype=np.int64) * SAMPLE_STRIDE) % n


def uniform(seed: int, n: int) -> np.ndarray:
    """n values in [-1, 1), exact float32 multiples of 2^-23: ``(splitmix64(seed * G + i) >> 40) * 2^-23 - 1``."""
    with np.errstate(over="ignore"):
        z = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.arange(n, dtype=np.uint64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return ((z >> np.uint64(40)).astype(np.float64) * 2.0**-23 - 1.0).astype(np.float32)


@dataclass
class TensorSpec:
    kind: int
    dims: tuple[int, ...]
    seed: int = 0
    offset: float = 0.0
    scale: float = 1.0
    # OUTPUT only: the full reference (when generated) or what the file keeps of it (sample_indices, sums, max |x|)
    reference: np.ndarray | None = None
    sample: np.ndarray | None = None
    sum: float = 0.0
    abs_sum: float = 0.0
    max_abs: float = 0.0

    def set_reference(self, ref: np.ndarray) -> None:
        assert ref.shape == self.dims and ref.dtype == np.float32, (ref.shape, ref.dtype, self.dims)
        flat = ref.reshape(-1).astype(np.float64)
        self.reference = ref
        self.sample = ref.reshape(-1)[sample_indices(ref.size)]
        self.sum, self.abs_sum, self.max_abs = float(flat.sum()), float(np.abs(flat).sum()), float(np.abs(flat).max())

    def values(self) -> np.ndarray:
        """The generated data of an INPUT / CONST tensor (float64 math, one rounding to float32, as the C++)."""
        u = uniform(self.seed, int(np.prod(self.dims, dtype=np.int64))).astype(np.float64)
        f32 = np.float32
        return (float(f32(self.offset)) + float(f32(self.scale)) * u).astype(np.float32).reshape(self.dims)


@dataclass
class NodeSpec:
    op: str
    options: bytes
    inputs: list[int]
    outputs: list[int]


@dataclass
class Case:
    name: str
    tensors: list[TensorSpec] = field(default_factory=list)
    nodes: list[NodeSpec] = field(default_factory=list)


def _put_str(f: BinaryIO, data: bytes) -> None:
    f.write(struct.pack("<I", len(data)))
    f.write(data)


def write_cases(path: Path, cases: list[Case]) -> None:
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<II", VERSION, len(cases)))
        for case in cases:
            _put_str(f, case.name.encode())
            f.write(struct.pack("<I", len(case.tensors)))
            for t in case.tensors:
                f.write(struct.pack("<BB", t.kind, len(t.dims)) + struct.pack(f"<{len(t.dims)}i", *t.dims))
                if t.kind in (INPUT, CONST):
                    f.write(struct.pack("<Qff", t.seed, t.offset, t.scale))
                elif t.kind == OUTPUT:
                    assert t.sample is not None, t
                    f.write(struct.pack("<ddfI", t.sum, t.abs_sum, t.max_abs, t.sample.size))
                    f.write(np.ascontiguousarray(t.sample, "<f4").tobytes())
            f.write(struct.pack("<I", len(case.nodes)))
            for n in case.nodes:
                _put_str(f, n.op.encode())
                _put_str(f, n.options)
                f.write(struct.pack(f"<I{len(n.inputs)}i", len(n.inputs), *n.inputs))
                f.write(struct.pack(f"<I{len(n.outputs)}i", len(n.outputs), *n.outputs))


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError("op-case file is truncated")
        out = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return out

    def str(self) -> bytes:
        (n,) = self.take("<I")
        return bytes(self.take(f"<{n}s")[0])


def read_cases(path: Path) -> list[Case]:
    r = _Reader(Path(path).read_bytes())
    magic, version, count = r.take("<8sII")
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"{path}: not an op-case file of version {VERSION}")
    cases = []
    for _ in range(count):
        case = Case(r.str().decode())
        (num_tensors,) = r.take("<I")
        for _ in range(num_tensors):
            kind, rank = r.take("<BB")
            dims = tuple(r.take(f"<{rank}i"))
            t = TensorSpec(kind, dims)
            if kind in (INPUT, CONST):
                t.seed, t.offset, t.scale = r.take("<Qff")
            elif kind == OUTPUT:
                t.sum, t.abs_sum, t.max_abs, m = r.take("<ddfI")
                if m != len(sample_indices(int(np.prod(dims, dtype=np.int64)))):
                    raise ValueError(f"{path}: output of {case.name} has {m} samples")
                t.sample = np.array(r.take(f"<{m}f"), np.float32)
            case.tensors.append(t)
        (num_nodes,) = r.take("<I")
        for _ in range(num_nodes):
            op, options = r.str().decode(), r.str()
            (ni,) = r.take("<I")
            inputs = list(r.take(f"<{ni}i"))
            (no,) = r.take("<I")
            outputs = list(r.take(f"<{no}i"))
            case.nodes.append(NodeSpec(op, options, inputs, outputs))
        cases.append(case)
    if r.pos != len(r.data):
        raise ValueError(f"{path}: {len(r.data) - r.pos} trailing bytes")
    return cases
