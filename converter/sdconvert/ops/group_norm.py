"""``SdGroupNorm``: GroupNorm (+ optional SiLU) in one kernel.

Inputs x (rank 3 or 4; channels on ``channel_axis``), gamma [C], beta [C]; output has x's shape. Statistics are over
each group's C/groups channels and all spatial positions, variance is the biased (population) one, as torch.
Fusing the SiLU that follows every SD ResNet GroupNorm saves one more full read + write of the activation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import OpSpec

ACTIVATIONS = ("none", "silu")


@dataclass(frozen=True)
class GroupNormAttrs:
    groups: int
    eps: float = 1e-5
    activation: str = "none"
    channel_axis: int = -1

    def validate(self) -> str | None:
        if self.groups < 1:
            return f"groups must be >= 1, got {self.groups}"
        if not np.isfinite(self.eps) or self.eps < 0:
            return f"eps must be finite and >= 0, got {self.eps}"
        if self.activation not in ACTIVATIONS:
            return f"activation must be one of {ACTIVATIONS}, got {self.activation!r}"
        if self.channel_axis not in (-1, 1, 2, 3):
            return f"channel_axis must be -1, 1, 2 or 3, got {self.channel_axis}"
        return None


def reference(inputs: list[np.ndarray], a: GroupNormAttrs) -> np.ndarray:
    x, gamma, beta = (np.asarray(t, np.float64) for t in inputs)
    if x.ndim not in (3, 4):
        raise ValueError(f"SdGroupNorm expects rank 3 or 4 input, got {x.shape}")
    axis = a.channel_axis % x.ndim
    xc = np.moveaxis(x, axis, -1)  # channels last
    c = xc.shape[-1]
    if c % a.groups or gamma.shape != (c,) or beta.shape != (c,):
        raise ValueError(f"SdGroupNorm: C={c} groups={a.groups} gamma{gamma.shape} beta{beta.shape}")
    g = xc.reshape(xc.shape[0], -1, a.groups, c // a.groups)
    mean = g.mean(axis=(1, 3), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 3), keepdims=True)
    y = ((g - mean) / np.sqrt(var + a.eps)).reshape(xc.shape) * gamma + beta
    if a.activation == "silu":
        y = y / (1.0 + np.exp(-y))
    return np.moveaxis(y, -1, axis).astype(np.float32)


SPEC = OpSpec(name="SdGroupNorm", version=1, attrs_type=GroupNormAttrs, reference=reference, num_inputs=3, doc=__doc__ or "")
