"""SdAttention's key split on both GPU backends (PoCL and llvmpipe in CI): attn_flash_ks_<t> + attn_merge vs the
float64 numpy reference.

With a flash SdAttention on a row-wise tiling (r40 / r80 / r160), the op can run each query block's keys as
`splits` ranges in separate work-groups (ranges of whole 16-key tiles) and merge the ranges' (O, max, sum) in one
more launch. Delegate option attention_key_splits: 0 = auto (2 ranges for r80 grids of at most one work-group per
compute unit, the one case measured faster), 1 = never, n = n ranges (capped at one per key tile). The shapes below put a partial last tile in the
last range, ranges whose key count is not a multiple of the split count, more splits than tiles, batch > 1 with
several heads, and logits far beyond exp()'s fp32 range (ranges with very different maxima). On a device whose local
memory a row-wise tiling exceeds (llvmpipe's 32 KiB: all but r40) the op runs another tiling, unsplit; a device that
does not report its compute units (GL) never splits on its own.
"""
from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import load_delegate

from attention_cases import BACKENDS, profile_attention, profiled_kernels
from attention_cases import run_attention as _run
from harness import assert_close
from sdlite import native


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize(
    "n,sq,sk,heads,head_dim",
    [
        (1, 200, 300, 2, 40),  # r40: 19 key tiles (last one 12 keys), 2 query blocks
        (2, 70, 260, 2, 80),   # r80: batch 2, 17 tiles (last one 4 keys)
        (1, 45, 256, 3, 160),  # r160: 16 whole tiles, 3 heads
        (1, 20, 77, 2, 160),   # r160 at the text length: 5 tiles, 7 splits capped at 5
    ],
)
def test_forced_key_splits_match_reference(tmp_path, rng, backend, splits, n, sq, sk, heads, head_dim):
    if head_dim == 40:  # r40 fits every device: the split runs on both backends
        p = profile_attention(tmp_path, rng, sq, sk, heads, head_dim, backend=backend, attention_key_splits=splits)
        assert p.kernels == ["attn_flash_ks_r40", "attn_merge"]
    actual, expected = _run(rng, "flash", False, n, sq, sk, heads, head_dim, backend=backend,
                            attention_key_splits=splits)
    assert_close(actual, expected, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tiling,head_dim", [("r40", 40), ("r80", 80), ("h80", 80), ("r160", 160), ("h160", 160),
                                             ("h160w", 160), ("r40s", 40), ("r80s", 80)])
def test_key_split_sharp_softmax_is_stable(rng, backend, tiling, head_dim):
    # logits with std ~ 50-70: each range's maximum differs from the row's by far more than fp32's exp range, so
    # the merge must rescale by exp2(m_s - max m), not add raw sums.
    actual, expected = _run(rng, "flash", False, 1, 70, 300, 2, head_dim, scale=1.0, spread=2.5, backend=backend,
                            attention_key_splits=4, attention_tiling=tiling)
    assert np.isfinite(actual).all()
    assert_close(actual, expected, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_auto_splits_a_grid_smaller_than_the_device(tmp_path, rng, backend):
    # One query block (64 queries, 1 head) is 1 work-group: at most one per compute unit on any device. The op's
    # own pick there is h80 (unsplit, faster than r80 split); r80 (the pick for larger grids, or where a backend
    # lacks h80) splits its 512 keys (32 tiles) in 2 and merges; option 1 turns that off. Without a compute-unit count
    # (GL) neither one-wave rule applies: r80 unsplit, or where its local memory does not fit, r80s.
    auto = profile_attention(tmp_path, rng, 64, 512, 1, 80, backend=backend)
    split, _ = profiled_kernels(tmp_path, rng, 64, 512, 1, 80, backend=backend, attention_tiling="r80")
    off, _ = profiled_kernels(tmp_path, rng, 64, 512, 1, 80, backend=backend, attention_tiling="r80",
                              attention_key_splits=1)
    own = next(t for t in ("r80", "r80s") if auto.fits(t))  # the pick without h80 (r80 where it fits)
    if auto.compute_units > 0:
        assert auto.kernels == ["attn_flash_h80"]
        assert split == ["attn_flash_ks_r80", "attn_merge"]
    else:
        assert auto.kernels == split == [f"attn_flash_{own}"]
    assert off == [f"attn_flash_{own}"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant,causal", [("partial_softmax", False), ("flash", True)])
def test_no_key_split_for_partial_softmax_or_causal(tmp_path, rng, backend, variant, causal):
    # The split is a flash-only path; a causal mask would leave late ranges empty for early query blocks.
    names, _ = profiled_kernels(tmp_path, rng, 64, 512, 1, 80, variant=variant, causal=causal, backend=backend,
                                 attention_key_splits=4)
    assert "attn_merge" not in names and not any(n.startswith("attn_flash_ks") for n in names), names


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_key_split_for_block_tilings(tmp_path, rng, backend):
    # d40 (cross-attention, Sk < 256) has no key-split kernel: a forced split is ignored there, and so it is by the
    # one-launch attn_short_q* the op picks at 77 keys by itself (also where d40's local memory does not fit the
    # device: the forced tiling is ignored then)
    p = profile_attention(tmp_path, rng, 64, 77, 2, 40, backend=backend, attention_key_splits=4,
                          attention_tiling="d40")
    short = ["attn_short_q64"] if p.fits("short64") else ["attn_short_q32"]
    assert p.kernels == (["attn_flash_d40"] if p.fits("d40") else short)
    names, _ = profiled_kernels(tmp_path, rng, 64, 77, 2, 40, backend=backend, attention_key_splits=4)
    assert names == short


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("value", ["-1", "65", "two"])
def test_attention_key_splits_option_is_validated(backend, value):
    with pytest.raises(ValueError, match="attention_key_splits='.*' must be 0..64"):
        load_delegate(str(native.delegate_path()), {"backend": backend, "attention_key_splits": value})
    with pytest.raises(native.NativeDelegateError, match="attention_key_splits must be an int in 0..64"):
        native.DelegateOptions(backend=backend, attention_key_splits=65)


@pytest.mark.parametrize(("backend", "limit"), [("gl", "gl_limits=storage_block_bytes"),
                                                ("opencl", "opencl_limits=max_alloc_bytes")])
def test_key_split_partials_above_one_operand_are_not_split(tmp_path, rng, backend, limit):
    """The split's O partials and (m, l) statistics (splits x the output, float32) are one scratch operand the model
    does not list: with 7 ranges they are ~450 KB, above a 128 KiB GL storage block or OpenCL buffer although every
    tensor (at most 96 KB) fits. Such an attention runs unsplit (before: GL read and wrote past the binding)."""
    key, name = limit.split("=")
    options = {key: f"{name}={128 * 1024}", "attention_key_splits": 7}
    p = profile_attention(tmp_path, rng, 200, 300, 2, 40, backend=backend, **options)
    assert p.kernels == ["attn_flash_r40"], p.kernels
    actual, expected = _run(rng, "flash", False, 1, 200, 300, 2, 40, backend=backend, **options)
    assert_close(actual, expected, rtol=1e-5)
