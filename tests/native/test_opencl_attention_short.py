"""SdAttention over short key sequences (at most 80 keys: SD's cross-attention over the 77 text tokens) on both GPU
backends (PoCL and llvmpipe in CI): one launch of attn_short_q<BQ> for either variant, every key in the work-group at once (exact softmax,
no online rescaling), the head dim in 40-wide chunks. Parity with the float64 reference at partial query blocks,
1..80 keys, head dims from 4 to 168 (a partial last chunk), causal masks, batch 2 and several heads (forced with
attention_tiling=short16 / short32 / short64). The op picks it by itself at every head dim but 160 (SD's 40 / 80, the
text encoder's 64), with the largest query block whose grid gives every two compute units a work-group; 81 keys, a
head dim % 4 != 0, and 160 (where r160 measured faster) keep the tiled kernels. A query block whose local memory the
device lacks (llvmpipe's 32 KiB: 64) is never picked; forced, the largest one that fits runs instead."""
from __future__ import annotations

import numpy as np
import pytest

from attention_cases import BACKENDS, AttentionProfile, profile_attention, profiled_kernels
from attention_cases import run_attention as _run
from harness import assert_close
from sdlite import native


@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "n,sq,sk,heads,head_dim",
    [
        (2, 97, 77, 2, 40),    # SD's text length, 2 images, partial query block
        (1, 70, 80, 3, 80),    # the most keys it takes, 2 head-dim chunks
        (1, 45, 77, 2, 160),   # 4 chunks
        (1, 33, 1, 1, 4),      # one key, one float4 of head dim
        (2, 20, 7, 2, 44),     # a partial last chunk (40 + 4), keys < one key group
        (1, 19, 61, 1, 168),   # 5 chunks, the last one 8 wide
        (1, 4, 4, 1, 600),     # above the tiled kernels' 512: 15 chunks
    ],
)
@pytest.mark.parametrize("bq", [64, 32, 16])
@pytest.mark.parametrize("backend", BACKENDS)
def test_short_attention_matches_reference(rng, backend, bq, variant, causal, n, sq, sk, heads, head_dim):
    actual, expected = _run(rng, variant, causal, n, sq, sk, heads, head_dim, backend=backend,
                            attention_tiling=f"short{bq}")
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sharp_softmax_is_stable(rng, backend):
    # logits with std ~ 40: exp2 of unshifted scores would overflow fp32; one key dominates most rows
    actual, expected = _run(rng, "flash", False, 1, 70, 77, 2, 40, scale=1.0, spread=2.5, backend=backend,
                            attention_tiling="short")
    assert np.isfinite(actual).all()
    assert_close(actual, expected, rtol=1e-4)


def _largest_fitting(p: AttentionProfile, at_most: int = 64) -> int:
    return next(bq for bq in (64, 32, 16) if bq <= at_most and p.fits(f"short{bq}"))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head_dim", [80, 64, 40])
def test_one_launch_for_either_variant_and_the_block_follows_the_grid(tmp_path, rng, backend, head_dim):
    # the largest query block (of those whose local memory the device has) whose grid gives every two compute units a
    # work-group, else the smallest; without a compute-unit count (GL) the largest
    p = profile_attention(tmp_path, rng, 8, 77, 1, head_dim, backend=backend)
    cus = p.compute_units
    fitting = [bq for bq in (64, 32, 16) if p.fits(f"short{bq}")]
    for variant in ("flash", "partial_softmax"):
        for sq, heads in ((200, 2), (64, 1), (33, 3), (16, 1), (3, 2), (32 * max(cus, 1), 1), (8 * max(cus, 1), 1)):
            want = next((bq for bq in fitting if 2 * -(-sq // bq) * heads >= cus), fitting[-1])
            kernels, _ = profiled_kernels(tmp_path, rng, sq, 77, heads, head_dim, variant=variant, backend=backend)
            assert kernels == [f"attn_short_q{want}"], (variant, sq, heads, cus, kernels)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sk,head_dim,tilings", [(81, 80, ("d80", "dyn")), (81, 40, ("d40", "dyn")),
                                                 (77, 50, ("dyn",)), (77, 160, ("r160", "dyn"))])
def test_more_keys_an_unaligned_head_dim_or_a_tuned_tiling_keep_the_tiled_kernels(tmp_path, rng, backend, sk,
                                                                                   head_dim, tilings):
    p = profile_attention(tmp_path, rng, 40, sk, 2, head_dim, backend=backend)
    assert p.kernels == [f"attn_flash_{next(t for t in tilings if p.fits(t))}"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_forced_tiling_overrides_the_pick(tmp_path, rng, backend):
    p = profile_attention(tmp_path, rng, 40, 81, 2, 80, backend=backend)
    d80 = "d80" if p.fits("d80") else "dyn"  # the op's pick for 40 x 81 keys
    assert profiled_kernels(tmp_path, rng, 40, 77, 2, 80, backend=backend, attention_tiling="d80")[0] == [
        "attn_flash_d80" if p.fits("d80") else f"attn_short_q{_largest_fitting(p)}"]  # d80 not fitting: ignored
    assert profiled_kernels(tmp_path, rng, 400, 77, 2, 160, backend=backend, attention_tiling="short")[0] == [
        f"attn_short_q{_largest_fitting(p)}"]
    assert profiled_kernels(tmp_path, rng, 400, 77, 2, 40, backend=backend, attention_tiling="short16")[0] == [
        "attn_short_q16"]
    # a block the device lacks: the largest one that fits
    assert profiled_kernels(tmp_path, rng, 400, 77, 2, 40, backend=backend, attention_tiling="short64")[0] == [
        f"attn_short_q{_largest_fitting(p)}"]
    assert profiled_kernels(tmp_path, rng, 40, 81, 2, 80, backend=backend, attention_tiling="short")[0] == [
        f"attn_flash_{d80}"]
    # a block size no kernel has is a typo, refused when the delegate is created (issue 34: no silent option)
    with pytest.raises(native.NativeDelegateError, match="option attention_tiling='short48' is not a tiling"):
        native.load(backend=backend, attention_tiling="short48")
