"""GroupNorm prologues on both GPU backends (OpenCL on PoCL, GL on llvmpipe in CI: one kernel source, the same
plans): an SdGroupNorm(+SiLU) whose output only an SdConv2DWinograd reads writes a per-(image, channel) norm table
(scale, shift) instead of its normalised tensor, and the conv's input transform applies it, then SiLU, to the pixels
it reads (zero padding stays zero). Both GroupNorm paths that can (the one-launch channels-last kernel and the
two-stage partials, by rows or by groups) drop their output pass; the results match GroupNorm then a float64
convolution. Cases that must keep the GroupNorm's own output: a second reader, fuse_epilogues=0."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_cases import GPU_BACKENDS, mark_gl_gemm_gap, winograd_tiles
from harness import assert_close, make_interpreter
from sdconvert.ops import group_norm as GN
from sdconvert.ops.conv2d_winograd import SPEC as WINO_SPEC, Conv2DWinogradAttrs
from sdlite import native
from tflite_gemm_models import OpGraphBuilder, conv2d_ref

# (name, x shape, groups): which GroupNorm path the delegate takes (ops/group_norm/gpu.cc MakeSdGroupNorm)
PATHS = {
    "nhwc": ((2, 16, 18, 32), 8),       # 1152-float groups: one launch (group_norm_nhwc[_affine])
    "rows": ((1, 48, 48, 32), 4),      # 18432-float groups: two-stage, partials by rows (C % 4 == 0)
    "groups": ((1, 56, 56, 18), 3),    # 18816-float groups, C % 4 != 0: two-stage, partials per group
}
# The kernels that write the normalised tensor; none of them runs when the prologue takes over.
OUTPUT_KERNELS = {"group_norm_nhwc", "group_norm_apply", "group_norm_apply4", "group_norm_f32"}


def _rand(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _model(x_shape, groups: int, silu: bool, tile: int, w, b, gamma, beta, also_output_norm: bool = False) -> bytes:
    g = OpGraphBuilder()
    x = g.input("x", list(x_shape))
    h = g.tensor("h", list(x_shape))
    attrs = GN.GroupNormAttrs(groups=groups, activation="silu" if silu else "none")
    g.custom("SdGroupNorm", [x, g.const("gamma", gamma), g.const("beta", beta)], [h], GN.SPEC.encode(attrs))
    y = g.tensor("y", [*x_shape[:3], w.shape[0]])
    options = WINO_SPEC.encode(Conv2DWinogradAttrs(tile=tile, padding="SAME", activation="none"))
    g.custom("SdConv2DWinograd", [h, g.const("w", w), g.const("b", b)], [y], options)
    g.output(y)
    if also_output_norm:
        g.output(h)
    return g.build()


@pytest.fixture(params=GPU_BACKENDS)
def backend(request) -> str:
    return request.param


def _run(backend: str, model: bytes, tmp_path, xv: np.ndarray, **options):
    profile = tmp_path / "profile.json"
    delegate = native.load(backend=backend, profile_path=str(profile), **options)
    out = make_interpreter(model, delegate).get_signature_runner("serving_default")(x=xv)
    stats = native.stats(delegate)
    assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
    nodes = json.loads(profile.read_text())["nodes"]
    kernels = {op: [k["name"] for n in nodes if n["op"] == op for k in n["kernels"]]
               for op in ("SdGroupNorm", "SdConv2DWinograd")}
    return out, kernels


def _case(rng, path: str, silu: bool, co: int = 24):
    x_shape, groups = PATHS[path]
    ci = x_shape[-1]
    xv = _rand(rng, *x_shape) * 2.0 + 0.5  # a mean and a scale for the norm to remove
    gamma, beta = 1.0 + 0.5 * _rand(rng, ci), _rand(rng, ci)
    w, b = 0.2 * _rand(rng, co, 3, 3, ci), _rand(rng, co)
    attrs = GN.GroupNormAttrs(groups=groups, activation="silu" if silu else "none")
    h = GN.reference([xv, gamma, beta], attrs)
    return xv, groups, gamma, beta, w, b, h, conv2d_ref(h, w, b)


@pytest.mark.parametrize("silu", [True, False])
@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("tile", [2, 4, 6])
def test_group_norm_folds_into_the_winograd_input_transform(request, backend, rng, tmp_path, tile, path, silu):
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles(PATHS[path][0], tile))
    xv, groups, gamma, beta, w, b, _, want = _case(rng, path, silu)
    out, kernels = _run(backend, _model(xv.shape, groups, silu, tile, w, b, gamma, beta), tmp_path, xv)
    assert_close(out["y"], want.astype(np.float32), rtol=1e-4)
    assert not OUTPUT_KERNELS & set(kernels["SdGroupNorm"]), kernels
    assert kernels["SdGroupNorm"][-1] == ("group_norm_nhwc_affine" if path == "nhwc" else "group_norm_finalize_affine")
    assert kernels["SdConv2DWinograd"][0] == f"winograd_input_f{tile}_gn" + ("silu" if silu else "")


@pytest.mark.parametrize("path", ["nhwc", "rows"])
def test_a_second_reader_keeps_the_normalised_output(request, backend, rng, tmp_path, path):
    """The normalised tensor is also a model output: the GroupNorm writes it, the conv reads it as is."""
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles(PATHS[path][0], 4))
    xv, groups, gamma, beta, w, b, h, want = _case(rng, path, True)
    out, kernels = _run(backend, _model(xv.shape, groups, True, 4, w, b, gamma, beta, also_output_norm=True),
                        tmp_path, xv)
    assert_close(out["y"], want.astype(np.float32), rtol=1e-4)
    assert_close(out["h"], h.astype(np.float32), rtol=1e-5)
    assert OUTPUT_KERNELS & set(kernels["SdGroupNorm"]), kernels
    assert kernels["SdConv2DWinograd"][0] == "winograd_input_f4"


def test_fuse_epilogues_off_keeps_the_group_norm_pass(backend, rng, tmp_path):
    xv, groups, gamma, beta, w, b, _, want = _case(rng, "rows", True)
    model = _model(xv.shape, groups, True, 4, w, b, gamma, beta)
    on, k_on = _run(backend, model, tmp_path, xv)
    off, k_off = _run(backend, model, tmp_path, xv, fuse_epilogues=False)
    for out in (on, off):
        assert_close(out["y"], want.astype(np.float32), rtol=1e-4)
    assert k_on["SdGroupNorm"] == ["group_norm_partial_rows", "group_norm_finalize_affine"]
    assert k_off["SdGroupNorm"] == ["group_norm_partial_rows", "group_norm_finalize", "group_norm_apply4"]


@pytest.mark.parametrize("tiles", ["64x64/2", "16x64/2"])
@pytest.mark.parametrize("path", ["nhwc", "rows"])
def test_split_winograd_gemm_partials_are_summed_by_the_output_transform(request, backend, rng, tmp_path, tiles,
                                                                          path):
    """A split-K plan for the Winograd GEMM (forced here; UseSkinny4 picks one on GPUs with few work-groups) leaves
    its partials to the output transform: no gemm_splitk_reduce launch, same result (with the GroupNorm prologue)."""
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles(PATHS[path][0], 4), forced=tiles)
    xv, groups, gamma, beta, w, b, _, want = _case(rng, path, True)
    out, kernels = _run(backend, _model(xv.shape, groups, True, 4, w, b, gamma, beta), tmp_path, xv,
                        gemm_tiles=tiles)
    assert_close(out["y"], want.astype(np.float32), rtol=1e-4)
    assert kernels["SdConv2DWinograd"] == ["winograd_input_f4_gnsilu", f"gemm_t{tiles.split('/')[0]}",
                                           "winograd_output_f4_sum"]
