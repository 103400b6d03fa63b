"""SdGroupNorm CPU kernel vs the shared numpy reference (sdconvert.ops.group_norm)."""
from __future__ import annotations

import numpy as np
import pytest

from cpu_isa import ENV as ISA_ENV
from cpu_isa import available_isas
from harness import assert_close, run
from sdconvert.ops import group_norm as GN
from tflite_models import group_norm_model


def _check(rng, shape, groups, channel_axis, activation, eps=1e-5, offset=0.0):
    attrs = GN.GroupNormAttrs(groups=groups, eps=eps, activation=activation, channel_axis=channel_axis)
    c = shape[channel_axis]
    x = (rng.standard_normal(shape) * 2.0 + offset).astype(np.float32)
    gamma = rng.standard_normal(c).astype(np.float32)
    beta = rng.standard_normal(c).astype(np.float32)
    result = run(group_norm_model(shape, gamma, beta, GN.SPEC.encode(attrs)), {"x": x}, num_threads=2)
    assert result.stats["claimed_by_op"] == {"SdGroupNorm": 1}
    assert_close(result.outputs["y"], GN.reference([x, gamma, beta], attrs))


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize(
    "shape, groups, channel_axis",
    [
        ((1, 320, 16, 16), 32, 1),    # NCHW, SD ResNet block
        ((2, 16, 16, 320), 32, -1),   # NHWC (channels last, how litert-torch lays out convs)
        ((2, 16, 16, 320), 32, 3),    # same, positive axis
        ((1, 8, 64, 5), 4, 2),        # rank 4, channels on axis 2 (A and B both > 1)
        ((2, 4096, 64), 32, -1),      # rank 3 [N, HW, C]
        ((2, 64, 77), 8, 1),          # rank 3 [N, C, L]
        ((3, 12, 5, 7), 1, 1),        # one group = LayerNorm over C,H,W
        ((1, 12, 5, 7), 12, 1),       # groups == channels = InstanceNorm
    ],
)
def test_matches_reference(rng, shape, groups, channel_axis, activation):
    _check(rng, shape, groups, channel_axis, activation)


def test_large_mean_is_accurate(rng):
    # One-pass E[x^2]-E[x]^2 in float32 loses everything at mean 1e3; the kernel must not.
    _check(rng, (1, 64, 8, 8), 8, 1, "none", offset=1000.0)


def test_eps_is_applied(rng):
    # A constant group has variance 0: y = beta exactly, only because eps keeps rstd finite.
    attrs = GN.GroupNormAttrs(groups=2, eps=0.5, channel_axis=1)
    x = np.full((1, 4, 3, 3), 7.0, np.float32)
    gamma = np.array([1, 2, 3, 4], np.float32)
    beta = np.array([0.5, -1, 2, 0], np.float32)
    y = run(group_norm_model(x.shape, gamma, beta, GN.SPEC.encode(attrs)), {"x": x}).outputs["y"]
    assert np.array_equal(y, np.broadcast_to(beta[None, :, None, None], x.shape))


def test_default_attrs_from_minimal_options(rng):
    # Only `groups` is required; eps=1e-5, activation=none, channel_axis=-1 are defaults on both sides.
    from tflite_models import flex

    shape = (1, 6, 6, 8)
    x = rng.standard_normal(shape).astype(np.float32)
    gamma, beta = np.ones(8, np.float32), np.zeros(8, np.float32)
    y = run(group_norm_model(shape, gamma, beta, flex({"groups": 2})), {"x": x}).outputs["y"]
    assert_close(y, GN.reference([x, gamma, beta], GN.GroupNormAttrs(groups=2)))


@pytest.mark.parametrize("isa", available_isas())
@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize(
    "shape, groups, channel_axis",
    [
        ((2, 8, 8, 320), 32, -1),     # channels-last, 10-channel groups: slices of 8 groups = 80 channels
        ((1, 6, 5, 306), 9, -1),      # 34-channel groups: lcm(34, 16) > 256, slices of 7 groups + a last of 2
        ((1, 4, 4, 600), 2, -1),      # 300-channel groups: too wide for a slice, per-group runs of 300
        ((2, 96, 5, 7), 32, 1),       # NCHW, runs of 3 x 35 (not a multiple of any vector width)
        ((1, 8, 64, 5), 4, 2),        # A and B both > 1
    ],
)
def test_every_instruction_set(monkeypatch, rng, isa, shape, groups, channel_axis, activation):
    monkeypatch.setenv(ISA_ENV, isa)
    _check(rng, shape, groups, channel_axis, activation, offset=50.0)


def test_thread_count_does_not_change_bits(rng):
    attrs = GN.GroupNormAttrs(groups=32, activation="silu", channel_axis=-1)
    x = rng.standard_normal((2, 12, 12, 640)).astype(np.float32)
    gamma, beta = rng.standard_normal(640).astype(np.float32), rng.standard_normal(640).astype(np.float32)
    model = group_norm_model(x.shape, gamma, beta, GN.SPEC.encode(attrs))
    outs = [run(model, {"x": x}, num_threads=t).outputs["y"] for t in (1, 2, 3)]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
