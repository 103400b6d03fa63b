"""SdGroupNorm's two-stage OpenCL path (PoCL in CI): groups above 4096 elements go partial sums per chunk ->
exact chunk combination -> one normalise(+SiLU) pass (float4 when four neighbours share a channel or are four
channels), instead of one work-group per group. The small-group (one-kernel) cases are in gpu_cases.py."""
from __future__ import annotations

import pytest

import gpu_cases

# (shape, groups, channel axis, activation). Data is N(3, 2^2): a single-pass E[x^2] - E[x]^2 would lose
# digits here, the chunked mean / centred M2 combination must not.
LARGE_GROUP_NORM_CASES = [
    ((1, 64, 64, 128), 32, -1, "silu"),  # NHWC, 4 channels per group: 4 chunks, float4 apply across channels
    ((2, 64, 48, 48), 32, 1, "none"),    # NCHW: 2 chunks per group (the last one partial), float4 within a channel
    ((1, 30, 45, 45), 3, 1, "silu"),     # B = 2025, C = 30: scalar apply
    ((1, 128, 128, 64), 32, 3, "silu"),  # 32 groups x 32768 elements: the VAE's large-group case, scaled down
]


@pytest.mark.parametrize("shape,groups,axis,act", LARGE_GROUP_NORM_CASES)
def test_large_group_norm_two_stage_matches_reference(rng, shape, groups, axis, act):
    gpu_cases.check_group_norm("opencl", rng, shape, groups, axis, act)
