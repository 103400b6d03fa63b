"""CONV_2D as TFLite computes it, in NumPy (NHWC input, ``[Cout, KH, KW, Cin]`` filters, stride 1, dilation 1): the
ground truth of ``SdConv2DWinograd`` (the tile size changes rounding error only) and of the Winograd references
and error bounds built on it (:mod:`sdconvert.winograd.reference`)."""
from __future__ import annotations

from typing import Literal

import numpy as np

Padding = Literal["SAME", "VALID"]
ACTIVATIONS: tuple[str, ...] = ("none", "relu", "relu6", "relu_n1_to_1", "tanh")


def apply_activation(y: np.ndarray, activation: str) -> np.ndarray:
    """TFLite fused activations by the lower-case names used in the ``SdConv2DWinograd`` attrs."""
    if activation == "none":
        return y
    if activation == "relu":
        return np.maximum(y, 0)
    if activation == "relu6":
        return np.clip(y, 0, 6)
    if activation == "relu_n1_to_1":
        return np.clip(y, -1, 1)
    if activation == "tanh":
        return np.tanh(y)
    raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


def check_shapes(x: np.ndarray, w: np.ndarray) -> None:
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"expected x [N,H,W,Cin] and w [Cout,KH,KW,Cin], got {x.shape} and {w.shape}")
    if x.shape[3] != w.shape[3]:
        raise ValueError(f"channel mismatch: x has {x.shape[3]} channels, filter expects {w.shape[3]}")


def pad_same(x: np.ndarray, kh: int, kw: int) -> np.ndarray:
    """TFLite SAME padding for stride 1 (extra row/column goes to the bottom/right for even kernels)."""
    ph, pw = kh - 1, kw - 1
    return np.pad(x, ((0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))


def direct_conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, padding: Padding = "SAME",
                  activation: str = "none", dtype: type = np.float64) -> np.ndarray:
    """Stride-1, dilation-1 cross-correlation as TFLite CONV_2D computes it, accumulated in ``dtype``."""
    check_shapes(x, w)
    x = np.asarray(x, dtype=dtype)
    w = np.asarray(w, dtype=dtype)
    cout, kh, kw, _ = w.shape
    xp = pad_same(x, kh, kw) if padding == "SAME" else x
    n, hp, wp, cin = xp.shape
    ho, wo = hp - kh + 1, wp - kw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"input {x.shape[1:3]} is smaller than the {kh}x{kw} filter with {padding} padding")
    y = np.zeros((n, ho, wo, cout), dtype=dtype)
    for i in range(kh):
        for j in range(kw):
            y += xp[:, i:i + ho, j:j + wo, :] @ w[:, i, j, :].T
    if bias is not None:
        y += np.asarray(bias, dtype=dtype)
    return apply_activation(y, activation)
