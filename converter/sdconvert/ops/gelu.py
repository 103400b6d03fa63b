"""``SdGelu``: GELU in one kernel (1 read + 1 write instead of the ~8 elementwise ops of the decomposed chain).

``approximate``: ``none`` = exact erf form (PyTorch default, SD's GEGLU); ``tanh`` = tanh approximation;
``quick`` = x * sigmoid(1.702 x) (CLIP's quick_gelu).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .base import OpSpec

MODES = ("none", "tanh", "quick")


@dataclass(frozen=True)
class GeluAttrs:
    approximate: str = "none"

    def validate(self) -> str | None:
        if self.approximate not in MODES:
            return f"approximate must be one of {MODES}, got {self.approximate!r}"
        return None


def reference(inputs: list[np.ndarray], a: GeluAttrs) -> np.ndarray:
    x = np.asarray(inputs[0], np.float64)
    if a.approximate == "none":
        erf = np.vectorize(math.erf, otypes=[np.float64])
        y = 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    elif a.approximate == "tanh":
        y = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    else:
        y = x / (1.0 + np.exp(-1.702 * x))
    return y.astype(np.float32)


SPEC = OpSpec(name="SdGelu", version=1, attrs_type=GeluAttrs, reference=reference, num_inputs=1, doc=__doc__ or "")
