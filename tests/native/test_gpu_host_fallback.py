"""A node a GPU backend cannot take runs on the delegate's CPU kernels inside the same model: the model loads and
runs, the reason is in the stats (issue #32: the fused VAE's head-dim-512 attention failed the whole GL load)."""
from __future__ import annotations

import numpy as np
import pytest

from harness import assert_close, run
from sdconvert.ops import attention as A
from tflite_models import GraphBuilder


def _attention_between_adds(n: int, sq: int, sk: int, heads: int, head_dim: int, options: bytes) -> bytes:
    """q2 = q + q -> SdAttention(q2, k, v) -> o2 = o + o: GPU work on both sides of the attention."""
    g = GraphBuilder()
    hd = heads * head_dim
    q = g.input("q", [n, sq, hd])
    k, v = (g.input(name, [n, sk, hd]) for name in ("k", "v"))
    q2, o, o2 = (g.tensor(name, [n, sq, hd]) for name in ("q2", "o", "o2"))
    g.add(q, q, q2)
    g.custom("SdAttention", [q2, k, v], [o], options)
    g.add(o, o, o2)
    g.output(o2)
    return g.build()


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_declined_attention_runs_on_the_cpu_kernels(backend, rng):
    # head dim 1024 with more keys than the one-pass short kernels take: above every GPU attention kernel's limit
    # (the CPU kernel takes any)
    head_dim, sq, sk = 1024, 6, 300
    attrs = A.AttentionAttrs(heads=1, head_dim=head_dim, scale=head_dim**-0.5, causal=False, variant="flash")
    q = rng.standard_normal((1, sq, head_dim)).astype(np.float32)
    k, v = (rng.standard_normal((1, sk, head_dim)).astype(np.float32) for _ in range(2))
    result = run(_attention_between_adds(1, sq, sk, 1, head_dim, A.SPEC.encode(attrs)), {"q": q, "k": k, "v": v},
                 backend=backend)
    stats = result.stats
    assert stats["backend"] == backend
    assert stats["claimed_nodes"] == 2 and stats["declined_nodes"] == 1 and stats["host_fallback_nodes"] == 1
    assert stats["declined"][0]["op"] == "SdAttention" and "head_dim 1024" in stats["declined"][0]["reason"]
    want = 2.0 * A.reference([2.0 * q, k, v], attrs)
    assert_close(result.outputs["o2"], want, rtol=1e-5)
