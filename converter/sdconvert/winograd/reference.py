"""NumPy reference convolutions (NHWC input, TFLite ``[Cout, KH, KW, Cin]`` filters) and the fp32 error bound.

* :func:`direct_conv2d` -- the ground truth, evaluated in float64 by default.
* :func:`winograd_conv2d` -- F(m x m, 3 x 3) evaluated stage by stage in a chosen dtype, with exactly the
  stages and buffers of the native kernels: filter transform once in float64 (then rounded), input
  transform ``V = BT d B`` into ``[a*a, tiles, Cin]``, ``a*a`` GEMMs into ``M = [a*a, tiles, Cout]``, output
  transform ``AT M A`` + bias + activation. Output maps that are not a multiple of ``m`` are handled by
  zero-padding the input up to whole tiles and cropping the result (this padding is what the planner
  charges as wasted work at 8x8/16x16 maps).
* :func:`winograd_error_bound` -- a componentwise first-order forward error bound for that fp32 evaluation
  order (derivation in the function docstring). It is rigorous to first order in the unit roundoff but
  pessimistic (it grows linearly with Cin, typical errors grow like sqrt(Cin)); tests check measured errors
  against it and the tile-size ordering F2 < F4 < F6.

Measured fp32 max error relative to max|y| on SD1.5 shapes (64x64x320 ... 8x8x1280, Kaiming-scaled random
data; numpy reference / C++ kernels): direct 3e-7, F2 <= 1.3e-6, F4 <= 3.0e-5, F6 <= 4.2e-5, always <= 1e-3 of
the rigorous bound. Documented practical bound for the kernels: 1e-4 relative (5e-5 at CI sizes, Cin <= 70).
Trade-off: clarity over speed -- these run in CI on 8x8..16x16 maps with 32-64 channels, and in
``python -m sdconvert.winograd.table --accuracy`` on full SD shapes (seconds per conv).
"""
from __future__ import annotations

import numpy as np

from sdconvert.ops.conv2d_reference import Padding, apply_activation, check_shapes, direct_conv2d, pad_same
from sdconvert.winograd.transforms import WinogradTransform, get_transform

UNIT_ROUNDOFF_F32 = 2.0 ** -24


def tile_input(xp: np.ndarray, m: int, a: int, ho: int, wo: int) -> tuple[np.ndarray, int, int]:
    """Zero-pad the (already conv-padded) input to whole tiles and gather ``[N, th, tw, a, a, C]`` tiles."""
    n, hp, wp, c = xp.shape
    th, tw = -(-ho // m), -(-wo // m)
    need_h, need_w = th * m + a - m, tw * m + a - m
    xp = np.pad(xp, ((0, 0), (0, max(0, need_h - hp)), (0, max(0, need_w - wp)), (0, 0)))
    s = xp.strides
    tiles = np.lib.stride_tricks.as_strided(
        xp, shape=(n, th, tw, a, a, c), strides=(s[0], s[1] * m, s[2] * m, s[1], s[2], s[3]), writeable=False)
    return tiles, th, tw


def winograd_conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, m: int = 4,
                    padding: Padding = "SAME", activation: str = "none", dtype: type = np.float32,
                    transform: WinogradTransform | None = None) -> np.ndarray:
    """F(m x m, 3 x 3) convolution; every stage rounds to ``dtype`` like the kernels (see module doc)."""
    check_shapes(x, w)
    if w.shape[1:3] != (3, 3):
        raise ValueError(f"Winograd needs a 3x3 filter, got {w.shape[1]}x{w.shape[2]}")
    t = transform or get_transform(m)
    m, a = t.m, t.alpha
    cout, cin = w.shape[0], w.shape[3]
    xp = pad_same(np.asarray(x, dtype=dtype), 3, 3) if padding == "SAME" else np.asarray(x, dtype=dtype)
    n, hp, wp, _ = xp.shape
    ho, wo = hp - 2, wp - 2
    if ho < 1 or wo < 1:
        raise ValueError(f"input {x.shape[1:3]} is smaller than the 3x3 filter with {padding} padding")
    # Filter transform: float64, then one rounding to dtype. U: [a*a, Cin, Cout].
    u = t.transform_filter(np.asarray(w, dtype=np.float64).transpose(3, 0, 1, 2))   # [Cin, Cout, a, a]
    u = u.transpose(2, 3, 0, 1).reshape(a * a, cin, cout).astype(dtype)
    bt, at = t.bt.astype(dtype), t.at.astype(dtype)
    tiles, th, tw = tile_input(xp, m, a, ho, wo)
    v = np.einsum("ik,ntskla,jl->ijntsa", bt, tiles, bt, optimize=True).astype(dtype)
    v = v.reshape(a * a, n * th * tw, cin)                                               # [a*a, T, Cin]
    mm = np.matmul(v, u)                                                                 # [a*a, T, Cout]
    mm = mm.reshape(a, a, n, th, tw, cout)
    y = np.einsum("ik,klntsc,jl->ntsijc", at, mm, at, optimize=True).astype(dtype)      # [n,th,tw,m,m,C]
    y = y.transpose(0, 1, 3, 2, 4, 5).reshape(n, th * m, tw * m, cout)[:, :ho, :wo, :]
    if bias is not None:
        y = y + np.asarray(bias, dtype=dtype)
    return apply_activation(y, activation).astype(dtype, copy=False)


def gamma(k: int, u: float = UNIT_ROUNDOFF_F32) -> float:
    """Higham's ``gamma_k = k u / (1 - k u)``: relative error bound of a k-term recursive sum/dot product."""
    return k * u / (1 - k * u)


def winograd_error_bound(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, m: int = 4,
                         padding: Padding = "SAME", u: float = UNIT_ROUNDOFF_F32) -> np.ndarray:
    """Componentwise bound on ``|fp32 Winograd - exact|`` (before the activation, which is 1-Lipschitz).

    With P_c = (|G||g_c||G^T|) * (|BT||d_c||B|) for input channel c (all matrices/data in absolute value):
      filter transform (float64, rounded once): |dU| <= u |G||g||G^T|
      input transform (two a-term products):    |dV| <= gamma_2a |BT||d||B|
      Cin-term accumulation:                    |dM| <= (gamma_Cin + u + gamma_2a) sum_c P_c
      output transform (two a-term products):   |dY| <= gamma_2a |AT||M||A| + |AT||dM||A|
    so |dY| <= gamma_(Cin + 4a + 1) |AT| (sum_c P_c) |A| + u |Y + bias|, to first order in u. Evaluated
    in float64 with the same tiling as :func:`winograd_conv2d`; shape ``[N, Ho, Wo, Cout]``.
    """
    t = get_transform(m)
    a = t.alpha
    cout, cin = w.shape[0], w.shape[3]
    xa = np.abs(np.asarray(x, dtype=np.float64))
    xp = pad_same(xa, 3, 3) if padding == "SAME" else xa
    n, hp, wp, _ = xp.shape
    ho, wo = hp - 2, wp - 2
    ag, abt, aat = np.abs(t.g), np.abs(t.bt), np.abs(t.at)
    uabs = np.einsum("ik,cokl,jl->ijco", ag, np.abs(np.asarray(w, dtype=np.float64)).transpose(3, 0, 1, 2), ag,
                     optimize=True).reshape(a * a, cin, cout)
    tiles, th, tw = tile_input(xp, m, a, ho, wo)
    vabs = np.einsum("ik,ntskla,jl->ijntsa", abt, tiles, abt, optimize=True).reshape(a * a, -1, cin)
    mabs = np.matmul(vabs, uabs).reshape(a, a, n, th, tw, cout)
    yabs = np.einsum("ik,klntsc,jl->ntsijc", aat, mabs, aat, optimize=True)
    yabs = yabs.transpose(0, 1, 3, 2, 4, 5).reshape(n, th * m, tw * m, cout)[:, :ho, :wo, :]
    bound = gamma(cin + 4 * a + 1, u) * yabs
    if bias is not None:
        bound = bound + u * (yabs + np.abs(np.asarray(bias, dtype=np.float64)))
    return bound


def direct_error_bound(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, padding: Padding = "SAME",
                       u: float = UNIT_ROUNDOFF_F32) -> np.ndarray:
    """``gamma_(9 Cin + 1) sum |x||w| (+ u|bias|)``: the classic dot-product bound for the fp32 direct path."""
    cin = w.shape[3]
    yabs = direct_conv2d(np.abs(x), np.abs(w), None, padding)
    bound = gamma(w.shape[1] * w.shape[2] * cin + 1, u) * yabs
    if bias is not None:
        bound = bound + u * np.abs(np.asarray(bias, dtype=np.float64))
    return bound
