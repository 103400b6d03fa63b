"""SdGroupNorm's GPU paths (OpenCL on PoCL, GL on llvmpipe in CI: one kernel source, the same plans) vs the float64
numpy reference, each case checked for the kernels it launches (from the delegate's profile):

- channels last (B == 1) with C/G <= 512 and groups of at most 16384 floats (SD's UNet at 16x16 and 8x8): ONE
  launch of group_norm_nhwc, a work-group per (batch, group);
- larger groups, or channels not last: two stages, partial sums per chunk -> exact chunk combination -> one
  normalise(+SiLU) pass (float4 when four neighbours share a channel or are four channels);
- small groups with channels not last: the one-kernel group_norm_f32 (more cases in gpu_cases.py).

Data is N(3, 2^2) unless stated: a single-pass E[x^2] - E[x]^2 would lose digits here; the centred sums must not.
"""
from __future__ import annotations

import pytest

import gpu_cases

NHWC = ["group_norm_nhwc"]
TWO_STAGE_ROWS = ["group_norm_partial_rows", "group_norm_finalize", "group_norm_apply4"]

# (shape, groups, channel axis, activation, kernels launched)
GROUP_NORM_PATHS = [
    ((1, 16, 16, 320), 32, -1, "silu", NHWC),           # SD's 64x64-level width (10 channels per group), scaled
    ((2, 8, 8, 1280), 32, 3, "none", NHWC),             # 40 channels per group (SD's 8x8 level), batch 2
    ((1, 37, 23, 96), 32, -1, "silu", NHWC),            # 851 positions: the sweeps' ragged tails
    ((1, 3, 5, 1024), 2, -1, "none", NHWC),             # 512 channels per group: one position per sweep
    ((1, 64, 64, 128), 32, -1, "none", NHWC),           # 16384 floats per group: the largest one launch takes
    ((1, 2, 3, 1026), 2, -1, "silu", ["group_norm_f32"]),  # 513 channels per group: wider than the work-group
    ((1, 33, 33, 64), 4, -1, "silu", TWO_STAGE_ROWS),   # 17424 floats per group: two stages, float4 channels
    ((1, 128, 128, 64), 32, 3, "silu", TWO_STAGE_ROWS),  # the VAE's large-group case, scaled down
    ((2, 64, 48, 48), 32, 1, "none", ["group_norm_partial", "group_norm_finalize", "group_norm_apply4"]),  # NCHW
    ((1, 30, 45, 45), 3, 1, "silu", ["group_norm_partial", "group_norm_finalize", "group_norm_apply"]),  # B = 2025
]


@pytest.mark.parametrize("storage", ["float32", "half"])
@pytest.mark.parametrize("backend", gpu_cases.GPU_BACKENDS)
@pytest.mark.parametrize("shape,groups,axis,act,kernels", GROUP_NORM_PATHS)
def test_group_norm_paths_match_reference(rng, tmp_path, backend, shape, groups, axis, act, kernels, storage):
    """storage "half": activations_fp16, the same path with x and y as half (float4 kernels on 8-byte halves)."""
    launched = gpu_cases.check_group_norm(backend, rng, shape, groups, axis, act, profile=tmp_path / "p.json",
                                          half=storage == "half")
    assert launched == kernels


@pytest.mark.parametrize("backend", gpu_cases.GPU_BACKENDS)
def test_one_launch_group_norm_keeps_digits_at_a_large_mean(rng, tmp_path, backend):
    # mean 1e3, spread 2: the variance is taken around the mean (no cancellation); the output is affine in
    # x - mean, so it keeps float32's relative accuracy.
    launched = gpu_cases.check_group_norm(backend, rng, (1, 24, 24, 320), 32, -1, "none",
                                          profile=tmp_path / "p.json", mean=1000.0)
    assert launched == NHWC
