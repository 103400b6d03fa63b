"""GroupNorm statistics epilogue on both GPU backends (OpenCL on PoCL, GL on llvmpipe in CI: one kernel source, the
same plans): an SdGroupNorm over a channels-last tensor that an SdConv2DWinograd writes -- after its folded residual
ADD, when there is one -- takes the (count, mean, M2) chunk partials of its groups from the conv's output transform
(winograd_output_f*_st), so the GroupNorm launches only group_norm_finalize_affine (its norm table for the next conv's
input transform) or group_norm_finalize + apply: no pass over its input. Results match float64 convolutions and
GroupNorm; tiles cropped at the map's edge, several images, channels % 4 != 0 and split-K plans included. Cases that
keep the statistics pass: fuse_epilogues=0, a producer that is not a Winograd conv, a second GroupNorm over the same
conv output (one of them only)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from gpu_cases import GPU_BACKENDS, mark_gl_gemm_gap, winograd_tiles
from harness import assert_close, make_interpreter
from sdconvert.ops import group_norm as GN
from sdconvert.ops.conv2d_winograd import SPEC as WINO_SPEC, Conv2DWinogradAttrs
from sdlite import native
from tflite_gemm_models import OpGraphBuilder, conv2d_ref

STATS_PASSES = {"group_norm_partial", "group_norm_partial_rows", "group_norm_nhwc", "group_norm_nhwc_affine",
                "group_norm_f32"}


def _rand(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _wino(g: OpGraphBuilder, x: int, w: np.ndarray, b: np.ndarray, shape, name: str, tile: int) -> int:
    y = g.tensor(name, list(shape))
    options = WINO_SPEC.encode(Conv2DWinogradAttrs(tile=tile, padding="SAME", activation="none"))
    g.custom("SdConv2DWinograd", [x, g.const(f"{name}_w", w), g.const(f"{name}_b", b)], [y], options)
    return y


def _group_norm(g: OpGraphBuilder, x: int, shape, groups: int, silu: bool, gamma, beta, name: str) -> int:
    h = g.tensor(name, list(shape))
    attrs = GN.GroupNormAttrs(groups=groups, activation="silu" if silu else "none")
    g.custom("SdGroupNorm", [x, g.const(f"{name}_g", gamma), g.const(f"{name}_b", beta)], [h], GN.SPEC.encode(attrs))
    return h


def _add(g: OpGraphBuilder, a: int, b: int, shape, name: str) -> int:
    y = g.tensor(name, list(shape))
    g.builtin(S.BuiltinOperator.ADD, S.BuiltinOptions.AddOptions, S.AddOptionsT(), [a, b], [y])
    return y


@pytest.fixture(params=GPU_BACKENDS)
def backend(request) -> str:
    return request.param


def _run(backend: str, model: bytes, tmp_path, feeds: dict[str, np.ndarray], **options):
    profile = tmp_path / "profile.json"
    delegate = native.load(backend=backend, profile_path=str(profile), **options)
    out = make_interpreter(model, delegate).get_signature_runner("serving_default")(**feeds)
    stats = native.stats(delegate)
    assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
    nodes = json.loads(profile.read_text())["nodes"]
    return out, [(n["op"], [k["name"] for k in n["kernels"]]) for n in nodes if n["kernels"]]


def _gn_ref(x: np.ndarray, groups: int, silu: bool, gamma, beta) -> np.ndarray:
    attrs = GN.GroupNormAttrs(groups=groups, activation="silu" if silu else "none")
    return GN.reference([x.astype(np.float64), gamma.astype(np.float64), beta.astype(np.float64)], attrs)


class ResnetHalf:
    """conv1 (Winograd) [+ R] -> GroupNorm(+SiLU) -> conv2 (Winograd): SD's ResNet conv1 -> norm2 -> conv2, the
    norm's table folded into conv2's input transform and (now) its statistics into conv1's output transform."""

    def __init__(self, rng, shape, ci: int, groups: int, tile: int, residual: str | None = None, co2: int = 8):
        n, h, w, c = shape
        self.shape, self.groups, self.tile, self.residual = shape, groups, tile, residual
        self.x = _rand(rng, n, h, w, ci)
        self.w1, self.b1 = 0.3 * _rand(rng, c, 3, 3, ci), _rand(rng, c) + 0.5  # a mean for the norm to remove
        self.gamma, self.beta = 1.0 + 0.5 * _rand(rng, c), _rand(rng, c)
        self.w2, self.b2 = 0.2 * _rand(rng, co2, 3, 3, c), _rand(rng, co2)
        self.r = {None: None, "full": _rand(rng, *shape), "per_image": _rand(rng, n, 1, 1, c)}[residual]

    def model(self, silu: bool = True, norm_output: bool = False, second_norm_groups: int = 0) -> bytes:
        g = OpGraphBuilder()
        n, h, w, c = self.shape
        x = g.input("x", list(self.x.shape))
        y1 = _wino(g, x, self.w1, self.b1, self.shape, "y1", self.tile)
        if self.r is not None:
            r = g.input("r", list(self.r.shape))
            y1 = _add(g, y1, r, self.shape, "y1r")
        hn = _group_norm(g, y1, self.shape, self.groups, silu, self.gamma, self.beta, "h")
        y2 = _wino(g, hn, self.w2, self.b2, [n, h, w, self.w2.shape[0]], "y2", self.tile)
        g.output(y2)
        if norm_output:
            g.output(hn)
        if second_norm_groups:
            g.output(_group_norm(g, y1, self.shape, second_norm_groups, False, self.gamma, self.beta, "h2"))
        return g.build()

    def feeds(self) -> dict[str, np.ndarray]:
        return {"x": self.x} if self.r is None else {"x": self.x, "r": self.r}

    def y1(self) -> np.ndarray:
        y = conv2d_ref(self.x, self.w1, self.b1)
        return y + self.r if self.r is not None else y

    def want(self, silu: bool = True) -> tuple[np.ndarray, np.ndarray]:
        h = _gn_ref(self.y1(), self.groups, silu, self.gamma, self.beta)
        return conv2d_ref(h, self.w2, self.b2), h


def _kernels(launches, op: str) -> list[list[str]]:
    return [k for o, k in launches if o == op]


@pytest.mark.parametrize("tile", [2, 4, 6])
@pytest.mark.parametrize("shape,groups", [((1, 48, 48, 32), 4),    # two-stage path before (18432-float groups)
                                          ((2, 19, 17, 16), 4),    # one launch before; cropped edge tiles, 2 images
                                          ((1, 20, 20, 36), 3)])   # cpg 12 across work-groups of 64 channels
def test_conv_output_transform_writes_the_group_norm_statistics(request, backend, rng, tmp_path, tile, shape, groups):
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles(shape, tile))
    case = ResnetHalf(rng, shape, ci=16, groups=groups, tile=tile)
    out, launches = _run(backend, case.model(), tmp_path, case.feeds())
    want, _ = case.want()
    assert_close(out["y2"], want.astype(np.float32), rtol=1e-4)
    convs = _kernels(launches, "SdConv2DWinograd")
    assert convs[0][-1].startswith(f"winograd_output_f{tile}") and convs[0][-1].endswith("_st"), convs
    assert not convs[1][-1].endswith("_st"), convs  # nothing reads conv2's output as a GroupNorm
    assert _kernels(launches, "SdGroupNorm") == [["group_norm_finalize_affine"]]
    assert convs[1][0] == f"winograd_input_f{tile}_gnsilu"


@pytest.mark.parametrize("tile", [2, 6])
def test_statistics_hold_under_a_large_mean(request, backend, rng, tmp_path, tile):
    """Outputs of mean ~300 and spread ~3 (conv bias 300): the transform's one-pass partials are shifted by each
    tile's first output, so their M2 keeps its precision (unshifted sums of squares lose ~1e-3 of it here)."""
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles((2, 19, 17), tile))
    case = ResnetHalf(rng, (2, 19, 17, 16), ci=16, groups=4, tile=tile)
    case.b1 = case.b1 + 300.0
    out, launches = _run(backend, case.model(), tmp_path, case.feeds())
    assert_close(out["y2"], case.want()[0].astype(np.float32), rtol=1e-4)
    assert _kernels(launches, "SdConv2DWinograd")[0][-1] == f"winograd_output_f{tile}_st"
    assert _kernels(launches, "SdGroupNorm") == [["group_norm_finalize_affine"]]


@pytest.mark.parametrize("residual", ["full", "per_image"])
@pytest.mark.parametrize("shape,tile", [((2, 16, 16, 32), 4), ((2, 16, 16, 32), 2)])
def test_statistics_include_the_folded_residual(request, backend, rng, tmp_path, residual, shape, tile):
    """conv1 + R (SD: the time embedding, one row per image; or a full-shape skip): the partials are of y + R."""
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles(shape, tile))
    case = ResnetHalf(rng, shape, ci=8, groups=8, tile=tile, residual=residual)
    out, launches = _run(backend, case.model(), tmp_path, case.feeds())
    assert_close(out["y2"], case.want()[0].astype(np.float32), rtol=1e-4)
    assert [o for o, _ in launches].count("ADD") == 0
    assert _kernels(launches, "SdConv2DWinograd")[0][-1] == f"winograd_output_f{tile}_st"
    assert _kernels(launches, "SdGroupNorm") == [["group_norm_finalize_affine"]]


@pytest.mark.parametrize("tile", [4, 2])
@pytest.mark.parametrize("channels,apply", [(32, "group_norm_apply4"), (18, "group_norm_apply")])
def test_a_group_norm_writing_its_output_keeps_only_finalize_and_apply(request, backend, rng, tmp_path, channels,
                                                                        apply, tile):
    """The normalised tensor is also a model output (SD: a transformer's norm feeding proj_in): the GroupNorm writes
    it from the conv's partials (finalize + apply), and the second conv reads it as is."""
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles((1, 16, 16), tile))
    case = ResnetHalf(rng, (1, 16, 16, channels), ci=8, groups=channels // 6 if channels == 18 else 8, tile=tile)
    out, launches = _run(backend, case.model(silu=False, norm_output=True), tmp_path, case.feeds())
    want, h = case.want(silu=False)
    assert_close(out["h"], h.astype(np.float32), rtol=1e-5)
    assert_close(out["y2"], want.astype(np.float32), rtol=1e-4)
    assert _kernels(launches, "SdGroupNorm") == [["group_norm_finalize", apply]]
    assert _kernels(launches, "SdConv2DWinograd")[0][-1] == f"winograd_output_f{tile}_st"


@pytest.mark.parametrize("shape,tiles", [((1, 16, 16, 32), "16x64/2"), ((1, 32, 32, 32), "64x64/2")])
def test_split_k_plan_sums_partials_and_writes_statistics(request, backend, rng, tmp_path, shape, tiles):
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles(shape, 4), forced=tiles)
    case = ResnetHalf(rng, shape, ci=24, groups=8, tile=4)
    out, launches = _run(backend, case.model(), tmp_path, case.feeds(), gemm_tiles=tiles)
    assert_close(out["y2"], case.want()[0].astype(np.float32), rtol=1e-4)
    assert _kernels(launches, "SdConv2DWinograd")[0] == ["winograd_input_f4", f"gemm_t{tiles.split('/')[0]}",
                                                         "winograd_output_f4_sum_st"]
    assert _kernels(launches, "SdGroupNorm") == [["group_norm_finalize_affine"]]


def test_fuse_epilogues_off_keeps_the_statistics_pass(backend, rng, tmp_path):
    case = ResnetHalf(rng, (1, 48, 48, 32), ci=16, groups=4, tile=4)
    out, launches = _run(backend, case.model(), tmp_path, case.feeds(), fuse_epilogues=False)
    assert_close(out["y2"], case.want()[0].astype(np.float32), rtol=1e-4)
    assert _kernels(launches, "SdGroupNorm") == [["group_norm_partial_rows", "group_norm_finalize", "group_norm_apply4"]]
    assert not any(k[-1].endswith("_st") for k in _kernels(launches, "SdConv2DWinograd"))


@pytest.mark.parametrize("tile", [4, 2])
def test_one_conv_feeds_the_statistics_of_one_group_norm_only(request, backend, rng, tmp_path, tile):
    """Two GroupNorms over conv1's output (8 and 4 groups): the first takes the partials, the second keeps its own
    statistics pass; both are right."""
    mark_gl_gemm_gap(request, backend, tiles=winograd_tiles((1, 16, 16), tile))
    case = ResnetHalf(rng, (1, 16, 16, 32), ci=8, groups=8, tile=tile)
    out, launches = _run(backend, case.model(second_norm_groups=4), tmp_path, case.feeds())
    assert_close(out["y2"], case.want()[0].astype(np.float32), rtol=1e-4)
    assert_close(out["h2"], _gn_ref(case.y1(), 4, False, case.gamma, case.beta).astype(np.float32), rtol=1e-5)
    gns = _kernels(launches, "SdGroupNorm")
    assert gns[0] == ["group_norm_finalize_affine"]
    assert gns[1][0] in STATS_PASSES, gns


def test_a_producer_that_is_not_a_winograd_conv_keeps_the_statistics_pass(backend, rng, tmp_path):
    """An input tensor (no producing step) and a conv run direct (too few tiles for the Winograd GEMM) write no
    partials."""
    case = ResnetHalf(rng, (1, 6, 6, 32), ci=8, groups=8, tile=4)  # 4 tiles: the direct conv
    out, launches = _run(backend, case.model(), tmp_path, case.feeds())
    assert_close(out["y2"], case.want()[0].astype(np.float32), rtol=1e-4)
    assert _kernels(launches, "SdGroupNorm")[0][0] in STATS_PASSES
