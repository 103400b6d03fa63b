"""SdAttention's row-wise tiled OpenCL kernels (tilings r40 / r80 / r160; PoCL in CI) vs the float64 numpy reference.

The op picks r40 / r80 for self-attention at head dims 40 / 80 once Sk >= 256, and r160 for head dim 160 at any
Sk (kAttnTilings in gpu/sd_ops.cc; d160 only when forced).
Geometry being exercised: r40 = 128-query blocks, 2 key splits x 8 keys = 16-key tiles, Q in registers;
r80 = 64-query blocks, 4 key splits x 4 keys = 16-key tiles, Q in local memory, lazy rescaling; r160 = 16-query
blocks, 8 key splits x 2 keys, Q in local memory, single-buffered tiles. So the shapes
put partial query blocks and partial key tiles at the ends, causal masks that end inside a tile (whole key
splits of a tile masked for the first rows), fewer keys than one tile (most splits never see a key: the
split merge must ignore them), batch > 1 and several heads, and logits far beyond exp()'s fp32 range.
"""
from __future__ import annotations

import numpy as np
import pytest

from attention_cases import run_attention as _run
from harness import assert_close


@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n,sq,sk,heads,head_dim",
    [
        (1, 200, 300, 2, 40),   # r40: query blocks 128 + 72, key tiles 18 x 16 + 12
        (2, 70, 260, 2, 80),    # r80: query blocks 64 + 6, key tiles 16 x 16 + 4, batch 2
        (1, 130, 257, 3, 80),   # r80: 3 heads, one key past the last full tile
        (1, 128, 512, 1, 40),   # r40: whole blocks and tiles only (the non-causal mask pass is skipped)
        (1, 64, 256, 1, 80),    # r80: likewise
        (1, 45, 256, 2, 160),   # r160 (any Sk): query blocks 16 x 2 + 13, 8 splits x 2 keys
        (1, 20, 77, 3, 160),    # r160 at the text length: 4 full key tiles + 13 keys
    ],
)
def test_long_self_attention_matches_reference(rng, variant, causal, n, sq, sk, heads, head_dim):
    actual, expected = _run(rng, variant, causal, n, sq, sk, heads, head_dim)
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("tiling,head_dim", [("r40", 40), ("r80", 80), ("r160", 160), ("d160", 160)])
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(1, 1), (3, 5), (33, 13), (129, 77)])
def test_forced_tiling_short_sequences(rng, monkeypatch, tiling, head_dim, variant, causal, sq, sk):
    # Below min_keys only SDGPU_ATTN_TILING reaches these kernels: keys fewer than one tile (splits without a
    # single key), one query row, a causal mask shorter than the query block.
    monkeypatch.setenv("SDGPU_ATTN_TILING", tiling)
    actual, expected = _run(rng, variant, causal, 1, sq, sk, 2, head_dim)
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("tiling,head_dim", [("r40", 40), ("r80", 80), ("r160", 160), ("d160", 160)])
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
def test_sharp_softmax_is_stable(rng, monkeypatch, tiling, head_dim, variant):
    # logits with std ~ 50-70: exp() without a running max overflows fp32, the row max jumps between tiles
    # (r80's lazy rescaling takes its rescale branch), one key dominates most rows.
    monkeypatch.setenv("SDGPU_ATTN_TILING", tiling)
    actual, expected = _run(rng, variant, False, 1, 70, 300, 2, head_dim, scale=1.0, spread=2.5)
    assert np.isfinite(actual).all()
    assert_close(actual, expected, rtol=1e-4)


@pytest.mark.parametrize("head_dim,rowwise,tiled", [(40, "r40", "d40"), (80, "r80", "d80")])
def test_selection_by_key_count(rng, monkeypatch, head_dim, rowwise, tiled):
    # The op's own pick: the row-wise tiling for Sk >= 256 (self-attention), the block-tiled one below
    # (cross-attention with 77 text tokens). Same kernel => bit-identical output.
    def outputs(sk):
        q, k, v = (rng.standard_normal((1, s, 2 * head_dim)).astype(np.float32) for s in (40, sk, sk))
        got = {}
        for tiling in (None, rowwise, tiled):
            if tiling is None:
                monkeypatch.delenv("SDGPU_ATTN_TILING", raising=False)
            else:
                monkeypatch.setenv("SDGPU_ATTN_TILING", tiling)
            got[tiling] = _run(rng, "flash", False, 1, 40, sk, 2, head_dim, q=q, k=k, v=v)[0]
        return got

    long = outputs(256)
    assert np.array_equal(long[None], long[rowwise]) and not np.array_equal(long[None], long[tiled])
    short = outputs(255)
    assert np.array_equal(short[None], short[tiled]) and not np.array_equal(short[None], short[rowwise])


@pytest.mark.parametrize("sk", [77, 256])
def test_head_dim_160_picks_r160_at_any_key_count(rng, monkeypatch, sk):
    # r160 is the op's own pick for head dim 160 (cross and self); d160 runs only when forced. Same kernel =>
    # bit-identical output; the two tilings sum in different orders, so they differ in the last bits.
    q, k, v = (rng.standard_normal((1, s, 2 * 160)).astype(np.float32) for s in (40, sk, sk))
    got = {}
    for tiling in (None, "r160", "d160"):
        if tiling is None:
            monkeypatch.delenv("SDGPU_ATTN_TILING", raising=False)
        else:
            monkeypatch.setenv("SDGPU_ATTN_TILING", tiling)
        got[tiling] = _run(rng, "flash", False, 1, 40, sk, 2, 160, q=q, k=k, v=v)[0]
    assert np.array_equal(got[None], got["r160"]) and not np.array_equal(got[None], got["d160"])
