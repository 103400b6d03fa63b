"""SdAttention's row-wise tiled kernels (tilings r40 / r80 / r160 and the head-dim-split h80 / h160 / h160w) on both
GPU backends (PoCL and llvmpipe in CI) vs the float64 numpy reference.

The op picks r40 / r80 for self-attention at head dims 40 / 80 once Sk >= 256, and r160 for head dim 160 at any
Sk, except that grids of at most one work-group per compute unit with Sk >= 256 take h80 (head dim 80) and h160
/ h160w (head dim 160: 16- / 32-query blocks) (kAttnTilings in gpu/attention_tiling.cc; d160 only when forced).
Geometry being exercised: r40 = 128-query blocks, 2 key splits x 8 keys = 16-key tiles, Q in registers;
r80 = 64-query blocks, 4 key splits x 4 keys = 16-key tiles, Q in local memory, lazy rescaling; r160 = 16-query
blocks, 8 key splits x 2 keys, Q in local memory, single-buffered tiles; h* = two work-items per row, each with half
the head dim, adding their partial scores through local memory. So the shapes
put partial query blocks and partial key tiles at the ends, causal masks that end inside a tile (whole key
splits of a tile masked for the first rows), fewer keys than one tile (most splits never see a key: the
split merge must ignore them), batch > 1 and several heads, and logits far beyond exp()'s fp32 range.
A device runs only the tilings whose local memory it has (llvmpipe's 32 KiB: r40; r80 falls back to r80s, 11 KB, the
others to "dyn"), and
one that does not report its compute units (GL) never takes the one-wave tilings h80 / h160 / h160w by itself.
"""
from __future__ import annotations

import numpy as np
import pytest

from attention_cases import BACKENDS, AttentionProfile, profile_attention, profiled_kernels
from attention_cases import run_attention as _run
from harness import assert_close

ROWWISE = [("r40", 40), ("r80", 80), ("h80", 80), ("r160", 160), ("h160", 160), ("h160w", 160), ("d160", 160)]


@pytest.mark.parametrize("backend", BACKENDS)
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
def test_long_self_attention_matches_reference(rng, backend, variant, causal, n, sq, sk, heads, head_dim):
    actual, expected = _run(rng, variant, causal, n, sq, sk, heads, head_dim, backend=backend)
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "tiling,n,sq,sk,heads,head_dim",
    [
        ("h80", 2, 70, 260, 2, 80),     # query blocks 64 + 6, key tiles 16 x 16 + 4, batch 2
        ("h80", 1, 130, 257, 3, 80),    # one key past the last full tile
        ("h160", 1, 45, 256, 2, 160),   # query blocks 16 x 2 + 13, 8 splits x 4 keys, single-buffered
        ("h160w", 1, 45, 256, 2, 160),  # query blocks 32 + 13, 4 splits x 4 keys, double-buffered
        ("h160w", 2, 20, 77, 3, 160),   # the text length: 4 full key tiles + 13 keys
    ],
)
def test_head_dim_split_tilings_match_reference(rng, backend, tiling, variant, causal, n, sq, sk, heads, head_dim):
    actual, expected = _run(rng, variant, causal, n, sq, sk, heads, head_dim, backend=backend, attention_tiling=tiling)
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tiling,head_dim", ROWWISE)
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(1, 1), (3, 5), (33, 13), (129, 77)])
def test_forced_tiling_short_sequences(rng, backend, tiling, head_dim, variant, causal, sq, sk):
    # Below min_keys only the attention_tiling option reaches these kernels: keys fewer than one tile (splits
    # without a single key), one query row, a causal mask shorter than the query block.
    actual, expected = _run(rng, variant, causal, 1, sq, sk, 2, head_dim, backend=backend, attention_tiling=tiling)
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tiling,head_dim", ROWWISE)
@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
def test_sharp_softmax_is_stable(rng, backend, tiling, head_dim, variant):
    # logits with std ~ 50-70: exp() without a running max overflows fp32, the row max jumps between tiles
    # (r80's lazy rescaling takes its rescale branch), one key dominates most rows.
    actual, expected = _run(rng, variant, False, 1, 70, 300, 2, head_dim, scale=1.0, spread=2.5, backend=backend,
                            attention_tiling=tiling)
    assert np.isfinite(actual).all()
    assert_close(actual, expected, rtol=1e-4)


def _own(p: AttentionProfile, *tilings: str) -> str:
    """The first of `tilings` (the op's candidates in order) whose local memory the profiled device has."""
    return next(t for t in tilings if p.fits(t))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head_dim,rowwise,tiled", [(40, ("r40", "r40s"), "d40"), (80, ("r80", "r80s"), "d80")])
def test_selection_by_key_count(tmp_path, rng, backend, head_dim, rowwise, tiled):
    # The op's own pick: the row-wise tiling for Sk >= 256 (self-attention), the block-tiled one below
    # (cross-attention with 77 text tokens), each where the device has its local memory (else r40s / r80s, 11 KB, for
    # the row-wise ones and "dyn" for the others). One query block
    # per head and more heads than compute units: a grid past the one-wave rule of h80.
    p = profile_attention(tmp_path, rng, 8, 8, 1, head_dim, backend=backend)
    heads = p.compute_units + 1
    assert profiled_kernels(tmp_path, rng, 40, 256, heads, head_dim, backend=backend)[0] == [
        f"attn_flash_{_own(p, *rowwise)}"]
    assert profiled_kernels(tmp_path, rng, 40, 255, heads, head_dim, backend=backend)[0] == [
        f"attn_flash_{_own(p, tiled, 'dyn')}"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_head_dim_split_tilings_take_grids_of_one_wave(tmp_path, rng, backend):
    # Sk >= 256 and at most one work-group per compute unit: h80 for head dim 80; for head dim 160 h160 (16-query
    # blocks) while its grid fits, else h160w (32-query blocks) while that one fits, else r160. A device that does not
    # report its compute units (GL) keeps r80 / r160 (where their local memory fits; else r80s / "dyn").
    p = profile_attention(tmp_path, rng, 8, 8, 1, 80, backend=backend)
    cus = p.compute_units
    one_wave = cus > 0
    d80, d160 = _own(p, "r80", "r80s"), _own(p, "r160", "dyn")
    assert profiled_kernels(tmp_path, rng, 64, 256, 1, 80, backend=backend)[0] == [
        "attn_flash_h80" if one_wave else f"attn_flash_{d80}"]
    assert profiled_kernels(tmp_path, rng, 16, 256, 1, 160, backend=backend)[0] == [
        "attn_flash_h160" if one_wave else f"attn_flash_{d160}"]
    heads = cus // 2 + 1  # 32 queries: 2 * heads > cus blocks of 16, heads <= cus blocks of 32
    assert profiled_kernels(tmp_path, rng, 32, 256, heads, 160, backend=backend)[0] == [
        "attn_flash_h160w" if one_wave else f"attn_flash_{d160}"]
    assert profiled_kernels(tmp_path, rng, 32, 256, cus + 1, 160, backend=backend)[0] == [f"attn_flash_{d160}"]
    assert profiled_kernels(tmp_path, rng, 16, 255, 1, 160, backend=backend)[0] == [f"attn_flash_{d160}"]  # fewer keys


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sk", [77, 256])
def test_head_dim_160_forced_tilings_differ_in_summation_order(tmp_path, rng, backend, sk):
    # The op's own pick for 1 x 40 queries and 2 heads is r160 at 77 and 256 keys on any device that has its local
    # memory ("dyn" elsewhere); forcing it gives bit-identical output, forcing another tiling (another summation
    # order) differs in the last bits. A forced tiling the device cannot run (its local memory, or "short" at 256
    # keys) is ignored: the same kernel as the op's own pick, the same bits.
    q, k, v = (rng.standard_normal((1, s, 2 * 160)).astype(np.float32) for s in (40, sk, sk))
    got, ran = {}, {}
    for tiling in (None, "r160", "d160", "h160", "short"):
        opts = {} if tiling is None else {"attention_tiling": tiling}
        ran[tiling] = profiled_kernels(tmp_path, rng, 40, sk, 2, 160, backend=backend, **opts)[0]
        got[tiling] = _run(rng, "flash", False, 1, 40, sk, 2, 160, q=q, k=k, v=v, backend=backend, **opts)[0]
    p = profile_attention(tmp_path, rng, 8, 8, 1, 160, backend=backend)
    assert ran[None] == [f"attn_flash_{_own(p, 'r160', 'dyn')}"]
    for tiling in ("r160", "d160", "h160"):
        assert ran[tiling] == ([f"attn_flash_{tiling}"] if p.fits(tiling) else ran[None])
    assert (ran["short"][0].startswith("attn_short_q")) == (sk <= 80)
    for tiling in ("r160", "d160", "h160", "short"):
        assert np.array_equal(got[tiling], got[None]) == (ran[tiling] == ran[None]), (tiling, ran)
