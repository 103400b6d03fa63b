"""One SdAttention node through the delegate next to the float64 numpy reference (shared by the attention tests)."""
from __future__ import annotations

import numpy as np

from harness import run
from sdconvert.ops import attention as A
from tflite_models import attention_model


def run_attention(rng: np.random.Generator, variant: str, causal: bool, n: int, sq: int, sk: int, heads: int,
                  head_dim: int, scale: float | None = None, spread: float = 1.0, q: np.ndarray | None = None,
                  k: np.ndarray | None = None, v: np.ndarray | None = None,
                  backend: str = "opencl", **delegate_opts) -> tuple[np.ndarray, np.ndarray]:
    """``(delegate output, reference)``; random Q/K/V (``spread`` x N(0, 1)) unless given; asserts 1 claimed node.
    ``delegate_opts``: more :class:`sdlite.native.DelegateOptions` fields (e.g. ``attention_key_splits``)."""
    scale = head_dim**-0.5 if scale is None else scale
    attrs = A.AttentionAttrs(heads=heads, head_dim=head_dim, scale=scale, causal=causal, variant=variant)
    if q is None:
        q, k, v = (spread * rng.standard_normal((n, s, heads * head_dim)).astype(np.float32) for s in (sq, sk, sk))
    result = run(attention_model(n, sq, sk, heads, head_dim, A.SPEC.encode(attrs)), {"q": q, "k": k, "v": v},
                 backend=backend, **delegate_opts)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    return result.outputs["o"], A.reference([q, k, v], attrs)
