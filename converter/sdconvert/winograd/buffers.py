"""Buffer sizes and operation counts of OUR kernels, per conv and tile size.

The native CPU kernels (``custom_ops/ops/conv2d_winograd``) and :func:`reference.winograd_conv2d` allocate
exactly these buffers, so the planner's memory accounting and the paper table are computed from real sizes:

* ``transformed_weights``: ``U[a*a][Cin][Cout]``, built once at load time (the file keeps the 3x3 filter);
* ``transformed_input``:   ``V[a*a][T][Cin]``  with ``T = N * ceil(Ho/m) * ceil(Wo/m)`` tiles;
* ``gemm_output``:         ``M[a*a][T][Cout]``, inverse-transformed (+bias, activation) into the output.
The input transform reads the unpadded input with bounds checks (no padded copy); the direct path keeps no
scratch at all (no im2col). Whole-tensor V and M (not tile-blocked) mirror a 3-dispatch GPU
implementation -- the design the paper's memory ratios describe -- at the cost of CPU cache locality.
"""
from __future__ import annotations

from dataclasses import dataclass

from sdconvert.winograd.convspec import ConvSpec
from sdconvert.winograd.transforms import get_transform, transform_op_counts


@dataclass(frozen=True)
class KernelBuffers:
    """Element counts (not bytes) of one conv executed with ``tile`` (0 = direct)."""

    tile: int
    tiles_h: int
    tiles_w: int
    num_tiles: int
    input: int
    output: int
    weights: int
    transformed_weights: int
    transformed_input: int
    gemm_output: int

    @property
    def scratch(self) -> int:
        """Transient elements alive during the op (V and M; 0 for direct)."""
        return self.transformed_input + self.gemm_output


def kernel_buffers(spec: ConvSpec, tile: int) -> KernelBuffers:
    """Buffers of ``spec`` run directly (``tile=0``) or with F(tile x tile, 3 x 3)."""
    inp = spec.batch * spec.in_h * spec.in_w * spec.in_c
    out = spec.batch * spec.out_h * spec.out_w * spec.out_c
    wts = spec.out_c * spec.kernel_h * spec.kernel_w * (spec.in_c // spec.groups)
    if tile == 0:
        return KernelBuffers(0, 0, 0, 0, inp, out, wts, 0, 0, 0)
    a = get_transform(tile).alpha
    th, tw = -(-spec.out_h // tile), -(-spec.out_w // tile)
    t = spec.batch * th * tw
    return KernelBuffers(tile, th, tw, t, inp, out, wts, a * a * spec.in_c * spec.out_c,
                         a * a * t * spec.in_c, a * a * t * spec.out_c)


@dataclass(frozen=True)
class KernelFlops:
    """Floating-point operations (a multiply-add counts 2) per stage of one conv execution."""

    input_transform: float
    gemm: float
    output_transform: float

    @property
    def total(self) -> float:
        return self.input_transform + self.gemm + self.output_transform


def kernel_flops(spec: ConvSpec, tile: int) -> KernelFlops:
    """FLOPs of our kernels; transform costs count only nonzero matrix entries (what the kernels execute)."""
    epilogue = 2.0 * spec.batch * spec.out_h * spec.out_w * spec.out_c          # bias + activation
    if tile == 0:
        return KernelFlops(0.0, 2.0 * spec.macs, epilogue)
    t = get_transform(tile)
    a, m = t.alpha, t.m
    nnz = transform_op_counts(t)
    b = kernel_buffers(spec, tile)
    inp = 2.0 * (2 * a * nnz["bt"]) * b.num_tiles * spec.in_c                 # BT d, then (.) B
    gemm = 2.0 * a * a * b.num_tiles * spec.in_c * spec.out_c
    out = 2.0 * ((a + m) * nnz["at"]) * b.num_tiles * spec.out_c + epilogue  # AT M, then (.) A
    return KernelFlops(inp, gemm, out)
