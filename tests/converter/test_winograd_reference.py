"""NumPy Winograd reference vs float64 direct convolution: parity, error bound and tile-size ordering."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sdconvert.winograd.accuracy import SMALL_SHAPES, measure, random_problem
from sdconvert.winograd.reference import direct_conv2d, winograd_conv2d, winograd_error_bound


def test_direct_reference_matches_torch_conv2d() -> None:
    x, w, b = random_problem((2, 9, 7, 5, 6), seed=3)
    xt = torch.from_numpy(x.astype(np.float64)).permute(0, 3, 1, 2)
    wt = torch.from_numpy(w.astype(np.float64)).permute(0, 3, 1, 2)
    want = torch.nn.functional.conv2d(xt, wt, torch.from_numpy(b.astype(np.float64)), padding=1)
    got = direct_conv2d(x, w, b, "SAME")
    np.testing.assert_allclose(got, want.permute(0, 2, 3, 1).numpy(), rtol=0, atol=1e-12)
    valid = torch.nn.functional.conv2d(xt, wt, torch.from_numpy(b.astype(np.float64)))
    np.testing.assert_allclose(direct_conv2d(x, w, b, "VALID"), valid.permute(0, 2, 3, 1).numpy(), atol=1e-12)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("m", [2, 4, 6, 8])
@pytest.mark.parametrize("shape", [(1, 8, 8, 4, 3), (2, 13, 11, 6, 5), (1, 3, 5, 2, 2)])
def test_winograd_float64_is_exact(shape: tuple[int, ...], m: int, padding: str) -> None:
    x, w, b = random_problem(shape, seed=m)
    got = winograd_conv2d(x, w, b, m=m, padding=padding, dtype=np.float64)
    want = direct_conv2d(x, w, b, padding)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("activation", ["relu", "relu6", "relu_n1_to_1", "tanh"])
def test_fused_activation(activation: str) -> None:
    x, w, b = random_problem((1, 8, 8, 8, 8), seed=1)
    x = 4 * x
    got = winograd_conv2d(x, w, b, m=4, activation=activation, dtype=np.float64)
    np.testing.assert_allclose(got, direct_conv2d(x, w, b, activation=activation), atol=1e-10)


def test_bad_inputs_give_one_line_errors() -> None:
    x, w, b = random_problem((1, 8, 8, 4, 4))
    with pytest.raises(ValueError, match="channel mismatch"):
        winograd_conv2d(x[..., :3], w, b)
    with pytest.raises(ValueError, match="3x3 filter"):
        winograd_conv2d(x, w[:, :1, :1, :], b)
    with pytest.raises(ValueError, match="unknown activation"):
        winograd_conv2d(x, w, b, activation="gelu")


def test_fp32_error_per_tile_below_bound_and_growing_with_tile(capsys: pytest.CaptureFixture[str]) -> None:
    rows = measure(SMALL_SHAPES, tiles=(2, 4, 6))
    with capsys.disabled():
        for r in rows:
            print(f"\n  winograd fp32 {r.shape} tile={r.tile}: max abs err {r.max_abs_err:.2e}, "
                  f"rel {r.max_rel_err:.2e}, err/bound {r.bound_ratio:.4f}", end="")
    for r in rows:
        assert r.bound_ratio <= 1.0, r
        assert r.max_rel_err < 5e-5, r          # documented practical fp32 bound for F(6,3) at these sizes
    for shape in SMALL_SHAPES:
        errs = {r.tile: r.max_abs_err for r in rows if r.shape == shape}
        assert errs[0] < errs[2] < errs[4] < errs[6], errs


def test_error_bound_is_tight_enough_to_catch_a_wrong_matrix() -> None:
    """The bound must not be vacuous: a perturbed transform (1e-3 on one G entry) violates it."""
    from dataclasses import replace
    from fractions import Fraction

    from sdconvert.winograd.transforms import get_transform

    t = get_transform(4)
    g = [list(row) for row in t.g_exact]
    g[1][1] += Fraction(1, 1000)
    bad = replace(t, g_exact=tuple(tuple(r) for r in g))
    x, w, b = random_problem((1, 8, 8, 16, 16), seed=5)
    err = np.abs(winograd_conv2d(x, w, b, m=4, transform=bad) - direct_conv2d(x, w, b))
    assert (err / winograd_error_bound(x, w, b, 4)).max() > 1.0
