"""SdAttention's tiled kernels on both GPU backends (PoCL and llvmpipe in CI) vs the float64 numpy reference.

The tiled kernels work on blocks of queries (32-64 per work-group) and tiles of keys (16-32), so the shapes here
put partial blocks/tiles at both ends: Sq and Sk not multiples of the block/tile, Sq != Sk, causal masks that end
inside a tile, batch > 1 and several heads (the head offset inside the [N, S, H*D] rows). Head dims: the SD1.x
ones with their own instantiations (40/80/160, the VAE's 512) and the any-head-dim kernel (resident Q for
D <= 32, Q/K streamed in 32-wide chunks above, a last partial chunk and D % 4 != 0 included). A device runs a
tiling only where its local memory fits (llvmpipe's 32 KiB takes r40, "dyn" and the short kernels up to 32 queries);
a forced tiling it cannot run is ignored, as one for another head dim.
"""
from __future__ import annotations

import numpy as np
import pytest

from attention_cases import BACKENDS, profile_attention
from attention_cases import run_attention as _run
from harness import HALF_STORAGE_RTOL, assert_close, make_interpreter, relative_error
from sdconvert.ops import attention as A
from sdlite import native
from tflite_models import attention_model


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n,sq,sk,heads,head_dim",
    [
        (2, 97, 77, 2, 40),   # d40: 2 query blocks (64 + 33), 3 key tiles (32, 32, 13)
        (1, 70, 130, 3, 80),  # d80: 3 query blocks (32, 32, 6), Sk > Sq
        (1, 45, 45, 2, 160),  # d160: BK = 16, 3 tiles (16, 16, 13)
        (2, 33, 20, 1, 8),    # dyn, resident Q (D <= 32)
        (1, 40, 77, 2, 50),   # dyn, D % 4 != 0, two chunks (32 + 18)
        (1, 37, 41, 1, 260),  # dyn, 9 chunks (8 x 32 + 4), above the fallback kernels' 256
    ],
)
def test_tiled_attention_matches_reference(rng, backend, variant, causal, n, sq, sk, heads, head_dim):
    # up to 80 keys the op picks attn_short_q* at head dims but 160 (test_opencl_attention_short.py): force the tiling
    forced = {} if sk > 80 or head_dim % 4 or head_dim == 160 else {"attention_tiling": "d40" if head_dim == 40 else "dyn"}
    actual, expected = _run(rng, variant, causal, n, sq, sk, heads, head_dim, backend=backend, **forced)
    assert_close(actual, expected, rtol=1e-5)


# activations_fp16 at SD's head dims, one case per kernel family (where a forced tiling lacks the device's local memory,
# llvmpipe's 32 KiB, the op picks as without it): (variant, causal, n, sq, sk, heads, head_dim, delegate options)
HALF_STORAGE_CASES = [
    ("flash", False, 1, 64, 77, 2, 40, {}),                         # cross-attention: attn_short_q*
    ("flash", True, 1, 77, 77, 2, 64, {}),                          # the text encoder's causal self-attention
    ("flash", True, 2, 40, 77, 2, 40, {"attention_tiling": "d40"}),  # block-tiled flash
    ("partial_softmax", False, 1, 70, 130, 2, 80, {"attention_tiling": "dyn"}),  # block-tiled stats + P.V
    ("flash", False, 1, 300, 300, 2, 40, {}),                       # row-wise r40
    ("flash", False, 1, 300, 300, 2, 40, {"attention_key_splits": 2}),  # key split: float32 partials + attn_merge
    ("partial_softmax", True, 1, 256, 256, 1, 80, {}),              # row-wise stats + P.V (r80 / h80)
    ("flash", False, 1, 64, 64, 2, 160, {}),                        # r160
    ("flash", False, 1, 40, 100, 1, 512, {}),                       # the VAE's single head: d512 / dyn
    ("flash", False, 1, 20, 30, 2, 64, {"attention_tiling": "legacy"}),  # the fallback kernels
    ("partial_softmax", True, 1, 20, 30, 2, 64, {"attention_tiling": "legacy"}),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant,causal,n,sq,sk,heads,head_dim,opts", HALF_STORAGE_CASES)
def test_half_activation_storage_matches_reference(rng, backend, variant, causal, n, sq, sk, heads, head_dim, opts):
    """activations_fp16: Q, K, V and O stored as half (the row stats and key-split partials stay float32), one
    partition (run_attention: the node claimed, none declined), within HALF_STORAGE_RTOL of the float64 reference."""
    actual, expected = _run(rng, variant, causal, n, sq, sk, heads, head_dim, backend=backend, activations_fp16=True,
                            **opts)
    assert relative_error(actual, expected) <= HALF_STORAGE_RTOL


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
def test_sharp_softmax_is_stable(rng, backend, variant):
    # logits with std ~ 40: exp() without the running max would overflow fp32; one key dominates most rows.
    actual, expected = _run(rng, variant, False, 1, 70, 90, 2, 40, scale=1.0, spread=2.5, backend=backend)
    assert np.isfinite(actual).all()
    assert_close(actual, expected, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("sk", [40, 100])
def test_vae_head_dim_512(tmp_path, rng, backend, variant, sk):
    # the VAE's single 512-wide head: up to 80 keys one attn_short_q* launch, above them d512 where its local memory
    # fits the device, else "dyn"
    p = profile_attention(tmp_path, rng, 40, sk, 1, 512, variant=variant, backend=backend)
    tiling = "d512" if p.fits("d512") else "dyn"
    if sk <= 80:
        assert len(p.kernels) == 1 and p.kernels[0].startswith("attn_short_q"), p.kernels
    else:
        assert p.kernels == ([f"attn_flash_{tiling}"] if variant == "flash"
                             else [f"attn_stats_{tiling}", f"attn_pv_{tiling}"])
    actual, expected = _run(rng, variant, False, 1, 40, sk, 1, 512, backend=backend)
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("tiling,head_dim,sq,sk", [
    ("legacy", 40, 66, 66), ("dyn", 40, 130, 77), ("dyn", 80, 37, 77), ("dyn", 160, 37, 45), ("dyn", 512, 37, 45),
    ("dyn128", 40, 130, 77), ("dyn128", 160, 37, 45), ("dyn128", 512, 37, 45),
    ("d40", 80, 37, 45),  # a tiling for another head dim is ignored: the op's own pick runs
])
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_tiling_gives_the_same_answer(rng, backend, tiling, head_dim, sq, sk, variant):
    # attention_tiling (the micro-benchmark's knob) is read when the op is built: the any-head-dim
    # kernels and the fallback kernels agree with the reference at the head dims that have their own.
    actual, expected = _run(rng, variant, True, 1, sq, sk, 2, head_dim, backend=backend, attention_tiling=tiling)
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_head_dim_above_the_tiled_limit_runs_on_the_cpu_kernels_with_the_reason(rng, backend):
    # (up to 80 keys attn_short_q* takes any head dim % 4 == 0: test_opencl_attention_short.py)
    attrs = A.AttentionAttrs(heads=1, head_dim=600, scale=0.1, causal=False, variant="flash")
    q = rng.standard_normal((1, 4, 600)).astype(np.float32)
    kv = rng.standard_normal((1, 100, 600)).astype(np.float32)
    delegate = native.load(backend=backend)
    interpreter = make_interpreter(attention_model(1, 4, 100, 1, 600, A.SPEC.encode(attrs)), delegate)
    (out,) = interpreter.get_signature_runner("serving_default")(q=q, k=kv, v=kv).values()
    assert_close(out, A.reference([q, kv, kv], attrs), rtol=1e-5)
    stats = native.stats(delegate)
    assert stats["claimed_nodes"] == 0 and stats["declined_nodes"] == 1 and stats["host_fallback_nodes"] == 1
    assert stats["declined"][0]["reason"] == "head_dim 600 above the kernel limit 512"
