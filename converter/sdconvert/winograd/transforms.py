"""Winograd F(m x m, r x r) transform matrices, derived exactly (Cook-Toom / Lavin) from interpolation points.

Derivation (1-D, then nested for 2-D). Linear convolution ``s = g * h`` of a filter ``g`` (r taps) and a
signal ``h`` (m samples) has ``a = m + r - 1`` coefficients. Evaluating both polynomials at ``a - 1`` finite
points and at infinity (the leading coefficient), multiplying pointwise and interpolating gives the bilinear
algorithm ``s = C [(V_r g) * (V_m h)]`` with ``V_n`` the ``a x n`` Vandermonde matrix of the points (row
``[0..0, 1]`` for infinity) and ``C = V_a^-1``. CNN "convolution" is a *correlation*
``y_i = sum_k g_k d_{i+k}``, which is the transpose of the linear convolution in ``h``; transposing the
bilinear algorithm gives Lavin's form::

    y = A^T [ (G g) * (B^T d) ]      with  A^T = V_m^T (m x a),  G = V_r (a x r),  B^T = V_a^-T (a x a)

and in 2-D ``Y = A^T [ (G g G^T) * (B^T d B) ] A`` per ``a x a`` input tile producing an ``m x m`` output tile.

Scaling. Any diagonal ``D`` can move between the two transforms: ``(D G g) * (D^-1 B^T d)``. We scale every
row of ``B^T`` to small coprime integers and push the reciprocal into ``G``. Trade-off: the *runtime*
input transform (fp32, every inference) then only does exact integer-coefficient adds, while all the
awkward fractions (e.g. 1/90 for F(6,3)) live in ``G``, which is applied once at weight-load time in
float64 and rounded to fp32 once.

Points (finite ones; infinity is always the last point):
    F(2,3): 0, 1, -1                      -> Lavin's classic matrices up to row signs
    F(4,3): 0, 1, -1, 2, -2
    F(6,3): 0, 1, -1, 2, -2, 1/2, -1/2    -> reciprocal pairs keep |A|,|B| small; measured fp32 max error
                                             (16x16x64->64): 6.4e-4 vs 4.9e-3 with +-1/4, 3.9e-2 with +-3
    F(8,3): F(6,3)'s points plus 3/4, -3/4 (reference math / tables only; no kernel). Same measurement:
            8.6e-3 vs 1.5e-2 (+-2/3), 2.1e-2 (+-3/2), 7.7e-2 (+-3), 1.0e-1 (+-4), 1.5e-1 (+-1/4) -- F(8,3)
            is ~10x less accurate than F(6,3) whatever the points, one reason the kernels stop at 6.
All points are dyadic rationals, so ``A^T`` (powers of the points) is exact in binary floating point.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from math import gcd, lcm

import numpy as np

#: Finite interpolation points per output tile size ``m`` (for r = 3); infinity is appended implicitly.
DEFAULT_POINTS: dict[int, tuple[Fraction, ...]] = {
    2: (Fraction(0), Fraction(1), Fraction(-1)),
    4: (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2)),
    6: (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2), Fraction(-1, 2)),
    8: (Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2), Fraction(1, 2), Fraction(-1, 2),
        Fraction(3, 4), Fraction(-3, 4)),
}


ExactMatrix = tuple[tuple[Fraction, ...], ...]


@dataclass(frozen=True)
class WinogradTransform:
    """The three matrices of F(m x m, r x r): ``Y = AT [(G g G^T) * (BT d BT^T)] AT^T``.

    ``*_exact`` hold the exact rational entries (for documentation and exactness tests); ``at``/``g``/``bt``
    are the float64 versions used by the reference code and, rounded, by the native kernels.
    """

    m: int
    r: int
    points: tuple[Fraction, ...]
    at_exact: ExactMatrix
    g_exact: ExactMatrix
    bt_exact: ExactMatrix

    @property
    def alpha(self) -> int:
        """Input tile size ``a = m + r - 1``."""
        return self.m + self.r - 1

    @property
    def at(self) -> np.ndarray:
        return _to_float(self.at_exact)

    @property
    def g(self) -> np.ndarray:
        return _to_float(self.g_exact)

    @property
    def bt(self) -> np.ndarray:
        return _to_float(self.bt_exact)

    def transform_filter(self, w: np.ndarray) -> np.ndarray:
        """``G g G^T`` in float64 for filters ``w[..., r, r]`` -> ``[..., a, a]``."""
        g = self.g
        return np.einsum("ik,...kl,jl->...ij", g, np.asarray(w, dtype=np.float64), g)

    def describe(self) -> str:
        """Human-readable matrices (exact fractions), for docs and ``--explain`` output."""
        def fmt(mat: ExactMatrix) -> str:
            cells = [[str(v) for v in row] for row in mat]
            width = max(len(c) for row in cells for c in row)
            return "\n".join("  [" + ", ".join(c.rjust(width) for c in row) + "]" for row in cells)

        pts = ", ".join(str(p) for p in self.points) + ", inf"
        return (f"F({self.m}x{self.m},{self.r}x{self.r}), points {pts}\n"
                f"AT =\n{fmt(self.at_exact)}\nG =\n{fmt(self.g_exact)}\nBT =\n{fmt(self.bt_exact)}")


def _to_float(mat: ExactMatrix) -> np.ndarray:
    return np.array([[float(v) for v in row] for row in mat], dtype=np.float64)


def _vandermonde(points: tuple[Fraction, ...], n: int) -> list[list[Fraction]]:
    """``(len(points)+1) x n`` evaluation matrix; the last row evaluates at infinity (leading coefficient)."""
    rows = [[p ** k for k in range(n)] for p in points]
    rows.append([Fraction(0)] * (n - 1) + [Fraction(1)])
    return rows


def _inverse(mat: list[list[Fraction]]) -> list[list[Fraction]]:
    """Exact Gauss-Jordan inverse over the rationals."""
    n = len(mat)
    aug = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(mat)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if aug[r][col] != 0), None)
        if pivot is None:
            raise ValueError("interpolation points must be distinct")
        aug[col], aug[pivot] = aug[pivot], aug[col]
        inv = 1 / aug[col][col]
        aug[col] = [v * inv for v in aug[col]]
        for r in range(n):
            if r != col and aug[r][col] != 0:
                f = aug[r][col]
                aug[r] = [v - f * p for v, p in zip(aug[r], aug[col])]
    return [row[n:] for row in aug]


def _integer_row_scale(row: list[Fraction]) -> Fraction:
    """Factor that turns ``row`` into coprime integers whose first nonzero entry is positive."""
    nonzero = [v for v in row if v != 0]
    den = lcm(*(v.denominator for v in nonzero))
    num = gcd(*(v.numerator for v in nonzero))
    scale = Fraction(den, num)
    return -scale if nonzero[0] < 0 else scale


def derive(m: int, r: int = 3, points: tuple[Fraction | int | float, ...] | None = None) -> WinogradTransform:
    """Derive F(m, r) from ``a - 1`` distinct finite points (infinity is added); see module docstring."""
    if m < 1 or r < 1:
        raise ValueError(f"F({m},{r}) needs m >= 1 and r >= 1")
    a = m + r - 1
    pts = DEFAULT_POINTS[m] if points is None and r == 3 else points
    if pts is None:
        raise ValueError(f"no default points for F({m},{r}); pass {a - 1} points")
    fpts = tuple(Fraction(p) for p in pts)
    if len(fpts) != a - 1:
        raise ValueError(f"F({m},{r}) needs {a - 1} finite points, got {len(fpts)}")
    if len(set(fpts)) != len(fpts):
        raise ValueError("interpolation points must be distinct")
    v_a, v_r, v_m = _vandermonde(fpts, a), _vandermonde(fpts, r), _vandermonde(fpts, m)
    c = _inverse(v_a)                                          # a x a, s = C [(V_r g) * (V_m h)]
    bt = [[c[j][i] for j in range(a)] for i in range(a)]       # B^T = C^T
    g = [list(row) for row in v_r]
    for i in range(a):
        s = _integer_row_scale(bt[i])
        bt[i] = [v * s for v in bt[i]]
        g[i] = [v / s for v in g[i]]
    at = [[v_m[j][i] for j in range(a)] for i in range(m)]     # A^T = V_m^T
    as_tuple = lambda rows: tuple(tuple(row) for row in rows)  # noqa: E731
    return WinogradTransform(m=m, r=r, points=fpts, at_exact=as_tuple(at), g_exact=as_tuple(g),
                             bt_exact=as_tuple(bt))


@lru_cache(maxsize=None)
def get_transform(m: int, r: int = 3) -> WinogradTransform:
    """The project's transform for F(m x m, r x r) with :data:`DEFAULT_POINTS` (cached)."""
    if r != 3 or m not in DEFAULT_POINTS:
        raise ValueError(f"F({m},{r}) is not supported; tile sizes: {sorted(DEFAULT_POINTS)} with 3x3 filters")
    return derive(m, r)


def correlate_1d_exact(t: WinogradTransform, g: list[Fraction], d: list[Fraction]) -> list[Fraction]:
    """1-D ``y = AT [(G g) * (BT d)]`` in exact arithmetic (used to prove a derivation is exact)."""
    a = t.alpha
    gg = [sum(t.g_exact[i][k] * g[k] for k in range(t.r)) for i in range(a)]
    dd = [sum(t.bt_exact[i][k] * d[k] for k in range(a)) for i in range(a)]
    prod = [x * y for x, y in zip(gg, dd)]
    return [sum(t.at_exact[i][k] * prod[k] for k in range(a)) for i in range(t.m)]


def transform_op_counts(t: WinogradTransform) -> dict[str, int]:
    """Nonzero counts of the runtime matrices (drive the transform-FLOP estimate of the cost model)."""
    nnz = lambda mat: sum(1 for row in mat for v in row if v != 0)  # noqa: E731
    return {"bt": nnz(t.bt_exact), "at": nnz(t.at_exact), "g": nnz(t.g_exact)}
