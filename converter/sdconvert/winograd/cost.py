"""Roofline cost model for direct vs Winograd F(2/4/6) convolution on a device profile.

Each candidate is split into the dispatches our kernels issue (direct: 1; Winograd: input transform,
``a*a`` batched GEMM, output transform = 3) and every dispatch costs
``max(flops / rate, bytes / bandwidth) + dispatch_s``. Byte traffic uses the real buffer sizes from
:mod:`sdconvert.winograd.buffers`, so the model sees every effect the issue lists:

* FLOPs saved in the GEMM stage: ``9 m^2 / a^2`` (a = m + 2), less the transforms' own FLOPs;
* transformed input/output traffic: ``a^2 / m^2`` times the activations, written and read back once each;
* weight growth ``a^2 / 9`` (read by the GEMM every run, and held in memory: see ``memory_bytes``);
* tile padding: ``T = ceil(Ho/m) * ceil(Wo/m)`` -- F(6,3) on an 8x8 map computes 12x12 outputs (2.25x);
* GEMM row tiles (GPU profiles): the batched GEMM computes ``ceil(T / gemm_tile_m)`` whole row tiles (16
  rows: the GPU delegate's skinny GEMM takes T < 64), and the delegate does not run Winograd at all below
  ``min_tiles`` tiles (it falls back to the direct conv; ``ops/conv2d_winograd/gpu.cc`` kMinTiles): F(4x4) on an
  8x8 map (T = 4) would pay for 4x its rows. :func:`runs_winograd` tells the planner which tiles a profile
  can really use.

Trade-offs: the model assumes perfect on-chip reuse inside a dispatch (so direct convs of small maps look
better than they are) and one sustained GEMM rate for every shape; the profiles are order-of-magnitude
figures, not measurements. ``--tune`` replaces predictions with timings measured on the target.
"""
from __future__ import annotations

from dataclasses import dataclass

from sdconvert.winograd.buffers import kernel_buffers, kernel_flops
from sdconvert.winograd.convspec import ConvSpec

GiB = 1024 ** 3
MiB = 1024 ** 2


@dataclass(frozen=True)
class DeviceProfile:
    """Throughput and memory figures of a target backend.

    ``gemm_flops``: sustained FLOP/s of a well-shaped GEMM (also used for the direct conv, run as an
    implicit GEMM). ``transform_flops``: sustained FLOP/s of the transform dispatches (adds with little data
    reuse; typically a small fraction of peak). ``bandwidth``: DRAM bytes/s. ``dispatch_s``: fixed cost per
    kernel launch. ``memory_budget``: default bytes allowed for transformed weights (persistent, summed over
    convs) plus Winograd scratch (transient, max over convs). ``element_bytes``: storage size of
    activations and weights on this backend (2 for fp16 GPU delegates). ``direct_flops``: sustained
    FLOP/s of the direct conv when it runs in a different implementation than the Winograd GEMM (on CPU:
    XNNPACK's builtin CONV_2D vs our portable reference kernels); defaults to ``gemm_flops``.
    ``gemm_tile_m``: rows of one work-group tile of the Winograd GEMM (M = T tiles; padding is paid for).
    ``min_tiles``: fewest tiles T with which the backend runs a conv in the Winograd domain at all (the GPU
    delegate runs smaller ones direct: each of the a*a GEMMs would fill a fraction of one row tile while
    reading a*a/9 x the filter bytes). H200, 1280 channels, skinny GEMM: 8x8 map F2 (16 tiles) 0.071 ms
    vs direct 0.093 ms; 16x16 map F4 (16 tiles) 0.132 ms vs F2 0.154 ms vs direct 0.314 ms.

    The fusion pass reads two attention figures (``sdconvert.rewrite.rules.attention.choose_attention_variant``):
    ``flash_scores_bytes``, the per-head fp32 score-matrix size above which FlashAttention beats the partially
    fused softmax, and ``flash_max_head_dim``, the largest head dim at which flash is worth it. Mobile default:
    2 MiB and 128 (what fits on chip; the accumulator of a wide head does not). H200, our OpenCL kernels
    (``bench/opencl_attn_bench.py``, BENCHMARKS.md): flash wins at every SD1.5 shape, e.g. UNet 16x16 self
    (256 x 256, 8 heads of 160) 0.054 vs 0.101 ms, 64x64 cross (4096 x 77, D 40) 0.028 vs 0.044 ms, and the VAE's
    one 512-wide head (4096 x 4096) 2.89 vs 4.42 ms, hence 0 and 512 (the kernels' head-dim limit).

    ``max_buffer_bytes``: the most bytes one device buffer holds (OpenCL's ``CL_DEVICE_MAX_MEM_ALLOC_SIZE``; Adreno
    drivers report ~1 GB), None for no limit. The delegate keeps a Winograd conv's transformed input and output
    (float32 whatever the storage) in one scratch buffer and runs the conv direct where they would not fit.
    """

    name: str
    description: str
    gemm_flops: float
    transform_flops: float
    bandwidth: float
    dispatch_s: float
    memory_budget: int
    element_bytes: int = 4
    direct_flops: float | None = None
    gemm_tile_m: int = 1
    min_tiles: int = 1
    flash_scores_bytes: int = 2 * MiB
    flash_max_head_dim: int = 128
    max_buffer_bytes: int | None = None

    @property
    def direct_rate(self) -> float:
        return self.gemm_flops if self.direct_flops is None else self.direct_flops


PROFILES: dict[str, DeviceProfile] = {
    p.name: p for p in (
        # The budget keeps the phone preset's whole UNet (fp16 weights, the plan's U, the half-storage arena) under
        # the paper's 2,200 MB: with 1 GiB it held 2,272 MB on the H200 (BENCHMARKS.md, the phone preset); each
        # 16x16-level F2 conv the planner gives up saves its U and holds its fp16 filter instead (~22 MiB net).
        DeviceProfile("adreno740", "Snapdragon 8 Gen 2 GPU (the paper's S23 Ultra), fp16 storage, LPDDR5X",
                      gemm_flops=1.6e12, transform_flops=0.3e12, bandwidth=50e9, dispatch_s=15e-6,
                      memory_budget=768 * MiB, element_bytes=2, gemm_tile_m=16, min_tiles=16,
                      max_buffer_bytes=GiB),
        DeviceProfile("h200", "NVIDIA H200 (fp32 CUDA cores, no TF32), HBM3e",
                      gemm_flops=45e12, transform_flops=8e12, bandwidth=4.0e12, dispatch_s=5e-6,
                      memory_budget=16 * GiB, element_bytes=4, gemm_tile_m=16, min_tiles=16,
                      flash_scores_bytes=0, flash_max_head_dim=512),
        # Calibrated with --tune on 2 x86 cores: XNNPACK CONV_2D ~230 GFLOP/s, our portable Winograd
        # kernels ~25 GFLOP/s in the GEMM stage -- on CPU the honest answer is mostly "direct".
        DeviceProfile("cpu", "sdgpu reference CPU delegate (portable C++) vs XNNPACK CONV_2D, fp32",
                      gemm_flops=25e9, transform_flops=5e9, bandwidth=15e9, dispatch_s=2e-6,
                      memory_budget=2 * GiB, element_bytes=4, direct_flops=200e9),
    )
}


_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": MiB, "mb": 1000 ** 2, "mib": MiB,
          "g": GiB, "gb": 1000 ** 3, "gib": GiB}


def parse_bytes(text: str | int) -> int:
    """``--memory-budget`` values: ``1073741824``, ``512MiB``, ``1.5GiB``, ``2GB`` (one-line user error)."""
    s = str(text).strip().lower().replace(" ", "")
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num):]
    try:
        value = float(num) * _UNITS[unit]
        if value < 0:
            raise ValueError
    except (KeyError, ValueError):
        from sdconvert.errors import UserError

        raise UserError(f"--memory-budget: cannot parse {text!r}; use e.g. 512MiB, 1.5GiB or a byte count") from None
    return int(value)


def get_profile(name: str) -> DeviceProfile:
    try:
        return PROFILES[name]
    except KeyError:
        from sdconvert.errors import UserError

        raise UserError(f"unknown device profile {name!r}; choose one of {sorted(PROFILES)}") from None


@dataclass(frozen=True)
class CostEstimate:
    """Predicted cost of one conv with ``tile`` (0 = direct) on a profile."""

    tile: int
    flops: float
    bytes_moved: float
    time_s: float
    weight_bytes: int
    scratch_bytes: int

    @property
    def memory_bytes(self) -> int:
        """Winograd-only memory: transformed weights + scratch (0 for direct, whose filter is in the file)."""
        return self.weight_bytes + self.scratch_bytes


def num_tiles(spec: ConvSpec, tile: int) -> int:
    """T = N * ceil(Ho/m) * ceil(Wo/m): the rows of each of the a*a Winograd GEMMs."""
    return spec.batch * -(-spec.out_h // tile) * -(-spec.out_w // tile)


def runs_winograd(spec: ConvSpec, tile: int, profile: DeviceProfile) -> bool:
    """Whether ``profile``'s backend runs ``spec`` at ``tile`` in the Winograd domain (``min_tiles``, and its
    float32 transformed input and output within one buffer: ``max_buffer_bytes``); tile 0 (direct) always runs."""
    if tile == 0:
        return True
    if num_tiles(spec, tile) < profile.min_tiles:
        return False
    b = kernel_buffers(spec, tile)
    return profile.max_buffer_bytes is None or 4 * (b.transformed_input + b.gemm_output) <= profile.max_buffer_bytes


def _stage(flops: float, nbytes: float, rate: float, p: DeviceProfile) -> float:
    return max(flops / rate, nbytes / p.bandwidth) + p.dispatch_s


def estimate(spec: ConvSpec, tile: int, profile: DeviceProfile) -> CostEstimate:
    """Roofline estimate (module docstring) of ``spec`` on ``profile``; ``tile`` 0 means direct."""
    eb = profile.element_bytes
    b = kernel_buffers(spec, tile)
    f = kernel_flops(spec, tile)
    bias = spec.out_c
    if tile == 0:
        nbytes = eb * (b.input + b.weights + b.output + bias)
        return CostEstimate(0, f.total, nbytes, _stage(f.total, nbytes, profile.direct_rate, profile), 0, 0)
    tiles = num_tiles(spec, tile)
    row_padding = -(-tiles // profile.gemm_tile_m) * profile.gemm_tile_m / tiles  # whole GEMM row tiles
    in_bytes = eb * (b.input + b.transformed_input)
    gemm_bytes = eb * (b.transformed_input + b.transformed_weights + b.gemm_output)
    out_bytes = eb * (b.gemm_output + b.output + bias)
    time = (_stage(f.input_transform, in_bytes, profile.transform_flops, profile)
            + _stage(f.gemm * row_padding, gemm_bytes, profile.gemm_flops, profile)
            + _stage(f.output_transform, out_bytes, profile.transform_flops, profile))
    # Memory as our delegate holds it: with fp16 storage (weights_fp16, activations_fp16) only F(2x2)'s U is half;
    # F4 / F6 keep U and every tile keeps V and M in float32, whose transforms amplify half rounding past 1e-2
    # (custom_ops/ops/conv2d_winograd/gpu.cc). The time model keeps `eb`: it prices traffic, not residency.
    held_u = eb if tile == 2 else max(eb, 4)
    return CostEstimate(tile, f.total, in_bytes + gemm_bytes + out_bytes, time,
                        held_u * b.transformed_weights, max(eb, 4) * b.scratch)
