"""Derivation of the Winograd matrices: exactness in rational arithmetic and the documented shapes."""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from sdconvert.winograd.transforms import (DEFAULT_POINTS, correlate_1d_exact, derive, get_transform,
                                           transform_op_counts)


@pytest.mark.parametrize("m", sorted(DEFAULT_POINTS))
def test_1d_correlation_is_exact_in_rationals(m: int) -> None:
    t = get_transform(m)
    rnd = random.Random(m)
    for _ in range(20):
        g = [Fraction(rnd.randint(-9, 9), rnd.randint(1, 5)) for _ in range(3)]
        d = [Fraction(rnd.randint(-9, 9), rnd.randint(1, 5)) for _ in range(t.alpha)]
        want = [sum(g[k] * d[i + k] for k in range(3)) for i in range(m)]
        assert correlate_1d_exact(t, g, d) == want


@pytest.mark.parametrize("m", sorted(DEFAULT_POINTS))
def test_2d_tile_matches_direct_correlation_in_float64(m: int) -> None:
    t = get_transform(m)
    rng = np.random.default_rng(m)
    d = rng.standard_normal((t.alpha, t.alpha))
    g = rng.standard_normal((3, 3))
    y = t.at @ (t.transform_filter(g) * (t.bt @ d @ t.bt.T)) @ t.at.T
    want = np.array([[np.sum(g * d[i:i + 3, j:j + 3]) for j in range(m)] for i in range(m)])
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-9)


def test_shapes_and_integer_input_transform() -> None:
    for m in (2, 4, 6, 8):
        t = get_transform(m)
        a = m + 2
        assert t.alpha == a
        assert t.at.shape == (m, a) and t.g.shape == (a, 3) and t.bt.shape == (a, a)
        # the runtime input transform has small coprime integer rows (fractions live in G)
        assert all(v.denominator == 1 for row in t.bt_exact for v in row)


def test_f23_is_lavins_classic_up_to_row_signs() -> None:
    t = get_transform(2)
    lavin_bt = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=float)
    np.testing.assert_array_equal(np.abs(t.bt), np.abs(lavin_bt))
    np.testing.assert_array_equal(t.at, [[1, 1, 1, 0], [0, 1, -1, 1]])
    assert transform_op_counts(t) == {"bt": 8, "at": 6, "g": 8}


def test_points_are_validated() -> None:
    with pytest.raises(ValueError, match="needs 5 finite points"):
        derive(4, 3, (0, 1, -1))
    with pytest.raises(ValueError, match="distinct"):
        derive(2, 3, (0, 1, 1))
    with pytest.raises(ValueError, match="not supported"):
        get_transform(3)


def test_describe_lists_points_and_matrices() -> None:
    text = get_transform(6).describe()
    assert text.startswith("F(6x6,3x3), points 0, 1, -1, 2, -2, 1/2, -1/2, inf")
    assert "1/90" in text and "-21" in text
