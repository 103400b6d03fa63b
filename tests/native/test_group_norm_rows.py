"""SdGroupNorm's LayerNorm view ([R, 1, C], groups=1) on the GPU backends vs the float64 numpy reference.

Both backends run C % 4 == 0 rows up to 2048 channels through layer_norm_rows (one work-group per row, the row in
registers); other widths take the general group-norm kernels (checked from the delegate's profile). The cases cover
both sides of each condition, SiLU, and rows whose mean dwarfs their spread (the variance is taken around the mean,
so it must not cancel).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from harness import HALF_STORAGE_RTOL, assert_close, relative_error, run
from sdconvert.ops import group_norm as GN
from tflite_models import group_norm_model

ROWS = ["layer_norm_rows"]


@pytest.mark.parametrize("backend", ["opencl", "gl"])
@pytest.mark.parametrize("rows,c,activation,kernels", [
    (300, 320, "none", ROWS),  # SD1.5 64x64-level LayerNorm width (4 x 64 x 2 floats, partial last float4 group)
    (7, 1280, "silu", ROWS),   # 16x16/8x8 width, SiLU
    (5, 2048, "none", ROWS),   # the widest row the registers hold
    (5, 2052, "none", ["group_norm_f32"]),  # one float4 too wide: general kernels (2052 > 512 channels per group)
    (9, 30, "silu", ["group_norm_nhwc"]),   # C % 4 != 0: general kernels
])
@pytest.mark.parametrize("storage", ["float32", "half"])
def test_layer_norm_view_matches_reference(tmp_path, backend, rows, c, activation, kernels, storage):
    """storage "half": activations_fp16 (x and y as half), to HALF_STORAGE_RTOL in one partition."""
    rng = np.random.default_rng(rows + c)
    half = storage == "half"
    x = (rng.standard_normal((rows, 1, c)) * 0.01 + 5.0).astype(np.float32)  # |mean| >> std
    x[: rows // 2] = rng.standard_normal((rows // 2, 1, c)).astype(np.float32) * 3.0
    if half:  # half steps of 5.0 are 0.004, a third of those rows' spread: the centred rows only
        x = rng.standard_normal((rows, 1, c)).astype(np.float32) * 3.0
    gamma = rng.standard_normal(c).astype(np.float32)
    beta = rng.standard_normal(c).astype(np.float32)
    attrs = GN.GroupNormAttrs(groups=1, eps=1e-5, activation=activation)
    profile = tmp_path / "profile.json"
    result = run(group_norm_model(x.shape, gamma, beta, GN.SPEC.encode(attrs)), {"x": x}, backend=backend,
                 profile_path=str(profile), activations_fp16=half)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    expected = GN.reference([x, gamma, beta], attrs)
    if half:
        assert result.stats["partitions"] == 1
        assert relative_error(result.outputs["y"], expected) <= HALF_STORAGE_RTOL
    else:
        assert_close(result.outputs["y"], expected, rtol=1e-4)
    (node,) = json.loads(profile.read_text())["nodes"]
    assert [k["name"] for k in node["kernels"]] == kernels
