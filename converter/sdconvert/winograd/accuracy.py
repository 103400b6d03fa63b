"""Measured fp32 error of each tile size against the float64 direct convolution.

Data: x ~ N(0, 1), w ~ N(0, 1/(9 Cin)) (Kaiming-like, so outputs are O(1) like SD activations), bias ~ N(0, 1).
Reported per (shape, tile): max |err|, max |err| / max |y| and the largest ratio of the error to the
componentwise bound of :func:`reference.winograd_error_bound` (must stay <= 1). Any ``conv`` callable
with the :func:`reference.winograd_conv2d` signature can be measured -- the native tests pass the C++ kernel.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sdconvert.winograd.reference import (direct_conv2d, direct_error_bound, winograd_conv2d,
                                          winograd_error_bound)

#: (N, H, W, Cin, Cout) of one representative conv per SD1.5 UNet level at 512x512.
SD15_LEVEL_SHAPES: tuple[tuple[int, int, int, int, int], ...] = (
    (1, 64, 64, 320, 320), (1, 32, 32, 640, 640), (1, 16, 16, 1280, 1280), (1, 8, 8, 1280, 1280))

#: CI-sized shapes with the same structure (channels 32-64, maps 8-16, one odd map and Cin != Cout).
SMALL_SHAPES: tuple[tuple[int, int, int, int, int], ...] = (
    (1, 16, 16, 32, 32), (2, 8, 8, 64, 64), (1, 13, 11, 48, 32))

Conv = Callable[..., np.ndarray]


@dataclass(frozen=True)
class AccuracyRow:
    shape: tuple[int, int, int, int, int]
    tile: int                 # 0 = fp32 direct
    max_abs_err: float
    max_rel_err: float        # max |err| / max |y_exact|
    bound_ratio: float        # max over outputs of |err| / bound


def random_problem(shape: tuple[int, int, int, int, int], seed: int = 0
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n, h, w, cin, cout = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, cin)).astype(np.float32)
    wt = (rng.standard_normal((cout, 3, 3, cin)) / np.sqrt(9 * cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    return x, wt, b


def measure(shapes: Sequence[tuple[int, int, int, int, int]], tiles: Sequence[int] = (2, 4, 6),
            padding: str = "SAME", seed: int = 0, conv: Conv = winograd_conv2d,
            include_direct: bool = True) -> list[AccuracyRow]:
    """Error rows for every shape x tile (tile 0 = numpy fp32 direct, when ``include_direct``)."""
    rows = []
    for shape in shapes:
        x, w, b = random_problem(shape, seed)
        exact = direct_conv2d(x, w, b, padding)
        scale = float(np.abs(exact).max())
        if include_direct:
            err = np.abs(direct_conv2d(x, w, b, padding, dtype=np.float32) - exact)
            rows.append(AccuracyRow(shape, 0, float(err.max()), float(err.max()) / scale,
                                    float((err / direct_error_bound(x, w, b, padding)).max())))
        for t in tiles:
            err = np.abs(np.asarray(conv(x, w, b, m=t, padding=padding), dtype=np.float64) - exact)
            rows.append(AccuracyRow(shape, t, float(err.max()), float(err.max()) / scale,
                                    float((err / winograd_error_bound(x, w, b, t, padding)).max())))
    return rows


def accuracy_markdown(rows: Sequence[AccuracyRow]) -> str:
    lines = ["| N x H x W x Cin -> Cout | method | max abs err | max rel err | err / bound |",
             "|---|---|---|---|---|"]
    for r in rows:
        n, h, w, ci, co = r.shape
        method = "direct fp32" if r.tile == 0 else f"F({r.tile}x{r.tile},3x3) fp32"
        lines.append(f"| {n}x{h}x{w}x{ci} -> {co} | {method} | {r.max_abs_err:.2e} | {r.max_rel_err:.2e} "
                     f"| {r.bound_ratio:.1e} |")
    return "\n".join(lines)
