"""``SdAttention``: multi-head scaled-dot-product attention in one op.

Inputs Q [N,Sq,H*D], K [N,Sk,H*D], V [N,Sk,H*D] (heads packed on the last axis, the layout before litert-torch's
head-split reshapes), output [N,Sq,H*D]. ``heads=1`` covers graphs already split into [N*H,S,D].

Variants (same maths, different memory traffic; the paper's Sec. 3.1):
- ``partial_softmax``: pass 1 stores only the row max m and row sum s of the logits; pass 2 recomputes
  exp(logit - m) / s inside the matmul with V. Reads K twice but never stores the Sq x Sk matrix; best when
  Sk x D is small enough that re-reading K is cheap (cross-attention, short sequences).
- ``flash``: one pass with an online (running max / rescale) softmax over K/V tiles; reads K and V once; best for
  long self-attention (4096 tokens at 64x64 latents) where the Sq x Sk matrix would be 64 MiB per head.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .base import OpSpec

VARIANTS = ("partial_softmax", "flash")


@dataclass(frozen=True)
class AttentionAttrs:
    heads: int
    head_dim: int
    scale: float
    causal: bool = False
    variant: str = "partial_softmax"

    def validate(self) -> str | None:
        if self.heads < 1:
            return f"heads must be >= 1, got {self.heads}"
        if self.head_dim < 1:
            return f"head_dim must be >= 1, got {self.head_dim}"
        if not np.isfinite(self.scale) or self.scale <= 0:
            return f"scale must be finite and > 0, got {self.scale}"
        if self.variant not in VARIANTS:
            return f"variant must be one of {VARIANTS}, got {self.variant!r}"
        return None


def reference(inputs: list[np.ndarray], a: AttentionAttrs) -> np.ndarray:
    q, k, v = (np.asarray(x, np.float64) for x in inputs)
    n, sq, hd = q.shape
    sk = k.shape[1]
    if hd != a.heads * a.head_dim or k.shape != (n, sk, hd) or v.shape != (n, sk, hd):
        raise ValueError(f"SdAttention shapes q{q.shape} k{k.shape} v{v.shape} do not match heads={a.heads} head_dim={a.head_dim}")
    split = lambda x: x.reshape(n, x.shape[1], a.heads, a.head_dim).transpose(0, 2, 1, 3)  # noqa: E731
    logits = a.scale * np.einsum("nhqd,nhkd->nhqk", split(q), split(k))
    if a.causal:
        logits = logits + np.triu(np.full((sq, sk), -np.inf), k=1)
    logits -= logits.max(axis=-1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=-1, keepdims=True)
    out = np.einsum("nhqk,nhkd->nhqd", p, split(v))
    return out.transpose(0, 2, 1, 3).reshape(n, sq, hd).astype(np.float32)


SPEC = OpSpec(name="SdAttention", version=1, attrs_type=AttentionAttrs, reference=reference, num_inputs=3, doc=__doc__ or "")
