"""``SdConv2DWinograd``: a 3x3 stride-1 CONV_2D computed with Winograd F(m x m, 3 x 3), m = ``tile``.

Inputs: x [N,H,W,Cin] f32 (NHWC), filter [Cout,3,3,Cin] f32 (the original TFLite CONV_2D filter, *not*
pre-transformed: kernels transform it at load time, so the file does not grow by a^2/9), bias [Cout] f32.
Output [N,Ho,Wo,Cout]; SAME keeps H x W, VALID gives (H-2) x (W-2). attrs: ``tile`` in {2, 4, 6} (chosen per
conv by the planner, :mod:`sdconvert.winograd.plan`), ``padding`` SAME|VALID, ``activation`` one of the
TFLite fused activations (none, relu, relu6, relu_n1_to_1, tanh). The reference is the float64 *direct*
convolution: the tile size changes rounding error only (:mod:`.conv2d_reference`; bounds in :mod:`sdconvert.winograd.reference`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import OpSpec
from .conv2d_reference import ACTIVATIONS, direct_conv2d

PADDINGS = ("SAME", "VALID")
#: Output tile sizes the native kernels implement (F(8,3) exists only as reference math for the tables).
KERNEL_TILES: tuple[int, ...] = (2, 4, 6)


@dataclass(frozen=True)
class Conv2DWinogradAttrs:
    tile: int
    padding: str = "SAME"
    activation: str = "none"

    def validate(self) -> str | None:
        if self.tile not in KERNEL_TILES:
            return f"tile must be one of {KERNEL_TILES}, got {self.tile}"
        if self.padding not in PADDINGS:
            return f"padding must be one of {PADDINGS}, got {self.padding!r}"
        if self.activation not in ACTIVATIONS:
            return f"activation must be one of {ACTIVATIONS}, got {self.activation!r}"
        return None


def reference(inputs: list[np.ndarray], a: Conv2DWinogradAttrs) -> np.ndarray:
    x, w, b = (np.asarray(t, np.float64) for t in inputs)
    if x.ndim != 4 or w.ndim != 4 or w.shape[1:3] != (3, 3) or w.shape[3] != x.shape[3] or b.shape != (w.shape[0],):
        raise ValueError(f"SdConv2DWinograd: x{x.shape} filter{w.shape} bias{b.shape}")
    return direct_conv2d(x, w, b, a.padding, a.activation).astype(np.float32)


SPEC = OpSpec(name="SdConv2DWinograd", version=1, attrs_type=Conv2DWinogradAttrs, reference=reference,
              num_inputs=3, doc=__doc__ or "")
