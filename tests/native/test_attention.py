"""SdAttention CPU kernel vs the shared numpy reference (sdconvert.ops.attention), both variants."""
from __future__ import annotations

import numpy as np
import pytest

from cpu_isa import ENV as ISA_ENV
from cpu_isa import available_isas
from harness import assert_close, run
from sdconvert.ops import attention as A
from tflite_models import attention_model

VARIANTS = ("partial_softmax", "flash")


def _inputs(rng, n, sq, sk, hd, spread=1.0):
    q = (spread * rng.standard_normal((n, sq, hd))).astype(np.float32)
    k = (spread * rng.standard_normal((n, sk, hd))).astype(np.float32)
    v = rng.standard_normal((n, sk, hd)).astype(np.float32)
    return q, k, v


def _check(rng, n, sq, sk, heads, head_dim, variant, causal, spread=1.0, **opts):
    attrs = A.AttentionAttrs(heads=heads, head_dim=head_dim, scale=head_dim**-0.5, causal=causal, variant=variant)
    q, k, v = _inputs(rng, n, sq, sk, heads * head_dim, spread)
    result = run(attention_model(n, sq, sk, heads, head_dim, A.SPEC.encode(attrs)), {"q": q, "k": k, "v": v}, **opts)
    assert result.stats["claimed_by_op"] == {"SdAttention": 1}
    assert_close(result.outputs["o"], A.reference([q, k, v], attrs))
    return result


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n, sq, sk, heads, head_dim",
    [
        (1, 1, 1, 1, 1),
        (2, 7, 13, 3, 5),      # Sq < Sk, odd sizes
        (1, 77, 77, 8, 40),    # CLIP text self-attention (causal in the text encoder)
        (2, 64, 77, 4, 16),    # UNet cross-attention shape (CFG batch 2)
        (3, 130, 20, 1, 64),   # heads=1: pre-split [N*H, S, D] graphs; Sq > Sk
    ],
)
def test_matches_reference(rng, n, sq, sk, heads, head_dim, variant, causal):
    _check(rng, n, sq, sk, heads, head_dim, variant, causal, num_threads=2)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_q, block_k", [(1, 1), (5, 7), (64, 3), (3, 200)])
def test_tile_sizes_and_remainders(rng, variant, causal, block_q, block_k):
    # 37 x 41 is not a multiple of any tile size: every path through partial tiles is exercised.
    _check(rng, 2, 37, 41, 2, 8, variant, causal, attention_block_q=block_q, attention_block_k=block_k, num_threads=3)


@pytest.mark.parametrize("variant", VARIANTS)
def test_peaky_softmax_is_stable(rng, variant):
    # Logits of magnitude ~1e3: a kernel without max subtraction overflows exp() to inf/nan.
    result = _check(rng, 1, 33, 65, 2, 16, variant, False, spread=12.0, attention_block_k=16, num_threads=1)
    assert np.isfinite(result.outputs["o"]).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_thread_count_does_not_change_bits(rng, variant):
    # 20 MFLOP: above the size the kernel runs on the calling thread alone, so 2 and 5 threads really split it.
    attrs = A.AttentionAttrs(heads=4, head_dim=24, scale=0.3, causal=True, variant=variant)
    q, k, v = _inputs(rng, 2, 150, 170, 96)
    model = attention_model(2, 150, 170, 4, 24, A.SPEC.encode(attrs))
    outs = [run(model, {"q": q, "k": k, "v": v}, num_threads=t, attention_block_q=8, attention_block_k=40).outputs["o"]
            for t in (1, 2, 5)]
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    assert_close(outs[0], A.reference([q, k, v], attrs))


@pytest.mark.parametrize("variant", VARIANTS)
def test_sd_sized_self_attention(rng, variant):
    """64x64 latents: 4096 tokens x 8 heads x 40 head_dim (the SD1.5 first UNet block), a few seconds.

    The full reference would need an 8 x 4096 x 4096 float64 logits tensor (1 GiB); attention rows are
    independent without a causal mask, so the reference is evaluated on a random subset of query rows.
    """
    n, s, heads, head_dim = 1, 4096, 8, 40
    attrs = A.AttentionAttrs(heads=heads, head_dim=head_dim, scale=head_dim**-0.5, variant=variant)
    q, k, v = _inputs(rng, n, s, s, heads * head_dim)
    result = run(attention_model(n, s, s, heads, head_dim, A.SPEC.encode(attrs)), {"q": q, "k": k, "v": v},
                 num_threads=2)
    out = result.outputs["o"]
    assert out.shape == (n, s, heads * head_dim)
    rows = np.sort(rng.choice(s, size=192, replace=False))
    assert_close(out[:, rows], A.reference([q[:, rows], k, v], attrs))


@pytest.mark.parametrize("isa", available_isas())
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n, sq, sk, heads, head_dim, block_q, block_k",
    [
        (1, 37, 41, 2, 13, 16, 8),      # odd sizes, many key tiles, D not a multiple of the head-dim register group
        (2, 50, 19, 3, 40, 64, 128),    # Sq > Sk, one key tile (partial softmax keeps its scores), SD1.5's D=40
        (1, 21, 100, 1, 80, 17, 33),    # heads=1 (pre-split layout), Sq < Sk, 17 queries = one vector + 1 lane
        (1, 100, 64, 2, 24, 100, 64),   # 100 query lanes: register chunks of 3+2+2 (AVX-512) vectors
        (1, 9, 300, 1, 160, 48, 128),   # SD1.5's D=160, a partial last key tile
    ],
)
def test_every_instruction_set_matches_reference(monkeypatch, rng, isa, n, sq, sk, heads, head_dim, block_q,
                                                 block_k, variant, causal):
    monkeypatch.setenv(ISA_ENV, isa)
    _check(rng, n, sq, sk, heads, head_dim, variant, causal, attention_block_q=block_q, attention_block_k=block_k,
           num_threads=2)


@pytest.mark.parametrize("variant", VARIANTS)
def test_vae_single_wide_head(rng, variant):
    # The VAE mid-block attention: one head of 512 dims (64 register groups of 8 head dims).
    _check(rng, 1, 64, 64, 1, 512, variant, False, num_threads=2)


@pytest.mark.parametrize("variant", VARIANTS)
def test_instruction_sets_differ_only_by_fma(monkeypatch, rng, variant):
    # Every reduction runs down a SIMD lane, so the vector width cannot change a result: AVX2 and AVX-512 agree
    # bit for bit. The portable path multiplies and adds separately where they fuse (FMA): different bits, same
    # tolerance. Also guards against SDGPU_CPU_ISA being ignored (all the per-ISA tests would run one path).
    attrs = A.AttentionAttrs(heads=3, head_dim=40, scale=40**-0.5, causal=True, variant=variant)
    q, k, v = _inputs(rng, 2, 130, 130, 120)
    model = attention_model(2, 130, 130, 3, 40, A.SPEC.encode(attrs))
    outs = {}
    for isa in available_isas():
        monkeypatch.setenv(ISA_ENV, isa)
        outs[isa] = run(model, {"q": q, "k": k, "v": v}, num_threads=2, attention_block_k=48).outputs["o"]
        assert_close(outs[isa], A.reference([q, k, v], attrs))
    fma_paths = [outs[isa] for isa in available_isas() if isa != "generic"]
    assert all(np.array_equal(fma_paths[0], o) for o in fma_paths)
    assert not any(np.array_equal(outs["generic"], o) for o in fma_paths)
