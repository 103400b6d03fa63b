"""``SdGelu``: GELU in one kernel (1 read + 1 write instead of the ~8 elementwise ops of the decomposed chain).

``approximate``: ``none`` = exact erf form (PyTorch default, SD's GEGLU); ``tanh`` = tanh approximation;
``quick`` = x * sigmoid(1.702 x) (CLIP's quick_gelu).

``gated`` (GEGLU, the feed-forward of every SD transformer block): input x [..., 2F] (last dim even), output
[..., F], ``y = x[..., :F] * gelu(x[..., F:])`` -- the first half is the value, the second the gate, as diffusers'
``GEGLU`` (``hidden, gate = proj(x).chunk(2, -1)``). One kernel reads the projection output once instead of
SLICE + SLICE + GELU + MUL (4 launches, 3 intermediate tensors).

Compatibility: the op stays version 1. A custom op's opcode version is not visible to a delegate through the
TFLite C ABI (the runtime's placeholder registration always says 1), so a version bump could not be checked.
A delegate that predates ``gated`` ignores the key but infers output shape == input shape, which never equals a
gated node's [..., F] output: it declines the node ("output shape ... does not match the inferred ...") and the
interpreter fails on the unresolved custom op instead of computing plain GELU.
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
    gated: bool = False

    def validate(self) -> str | None:
        if self.approximate not in MODES:
            return f"approximate must be one of {MODES}, got {self.approximate!r}"
        return None


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    """GELU of ``approximate`` in float64 (no gating), in forms without cancellation, so the result is relatively
    exact in the negative tail too (the textbook 1 + erf(u) / 1 + tanh(u) round to 0 below x ~ -8 even in float64):
    0.5 x (1 + erf(x/sqrt2)) = 0.5 x erfc(-x/sqrt2) and 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)).
    Overflow of exp for x -> -inf is benign (x / inf = -0)."""
    x = np.asarray(x, np.float64)
    if approximate == "none":
        erfc = np.vectorize(math.erfc, otypes=[np.float64])
        return 0.5 * x * erfc(-x / math.sqrt(2.0))
    with np.errstate(over="ignore"):
        if approximate == "tanh":
            return x / (1.0 + np.exp(-2.0 * math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
        return x / (1.0 + np.exp(-1.702 * x))


def reference(inputs: list[np.ndarray], a: GeluAttrs) -> np.ndarray:
    x = np.asarray(inputs[0], np.float64)
    if not a.gated:
        return gelu(x, a.approximate).astype(np.float32)
    if x.ndim == 0 or x.shape[-1] % 2:
        raise ValueError(f"SdGelu(gated) expects an even last dimension, got shape {x.shape}")
    f = x.shape[-1] // 2
    return (x[..., :f] * gelu(x[..., f:], a.approximate)).astype(np.float32)


SPEC = OpSpec(name="SdGelu", version=1, attrs_type=GeluAttrs, reference=reference, num_inputs=1, doc=__doc__ or "")
