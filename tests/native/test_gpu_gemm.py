"""GEMM-shaped ops that every GPU backend runs the same way (OpenCL on PoCL, GL on llvmpipe in CI; one kernel source,
gpu/kernels/gemm_tiled.kern) vs float64 NumPy: every tile config (forced through the gemm_tiles option, the skinny 16x64
and the 128-thread instances included) with full tiles, edge tiles in M, N and K and K not a multiple of the 16-wide K
step, split-K and its cost model, weights read in place, transposed and broadcast BATCH_MATMUL operands, the tiled and
generic convs, half-stored weights, SdConv2DWinograd's transform kernels around the batched GEMM (its skinny GEMMs of
small maps included), and the tuner. What one backend alone has stays in test_opencl_gemm.py / test_gl_gemm.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from harness import assert_close, run
from sdconvert.ops.conv2d_winograd import SPEC as WINOGRAD, Conv2DWinogradAttrs
from sdconvert.winograd.accuracy import random_problem
from sdconvert.winograd.reference import direct_conv2d, winograd_error_bound
from tflite_gemm_models import (batch_matmul_model, batch_matmul_ref, conv2d_model, conv2d_ref,
                                fully_connected_model, fully_connected_ref, winograd_model)
from sdlite import native

# 16x64: the skinny kernel (GEMM only); n128: the 128-thread instances
TILE_CONFIGS = ("64x64", "128x64", "128x128", "16x64", "64x64n128", "32x64n128", "128x64n128",
                "64x128n128", "32x128n128")
# PoCL here reports 2 compute units; GL has no query for them, so its runs state the same number (the delegate option
# gl_limits) where a planner sizes grids by them (UseSkinny4: gemm_s16x128)
SAME_CUS = {"opencl": {}, "gl": {"gl_limits": "compute_units=2"}}


@pytest.fixture(params=["opencl", "gl"])
def backend(request) -> str:
    return request.param


def _run(backend: str, model: bytes, inputs: dict[str, np.ndarray], **opts) -> np.ndarray:
    result = run(model, inputs, backend=backend, **opts)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert result.stats["partitions"] == 1
    return result.outputs["y"]


def _half(a: np.ndarray) -> np.ndarray:
    """What weights_fp16 stores: round to nearest even half, back to float."""
    return a.astype(np.float16).astype(np.float32)


def _profile_kernels(profile: Path) -> list[str]:
    """The kernel names of a delegate profile (profile_path option), in launch order."""
    return [k["name"] for n in json.loads(profile.read_text())["nodes"] for k in n["kernels"]]


def _wino_tiles(n: int, ho: int, wo: int, tile: int) -> int:
    return n * -(-ho // tile) * -(-wo // tile)


@pytest.mark.parametrize("config", TILE_CONFIGS)
@pytest.mark.parametrize("m,k,n", [(128, 64, 128), (70, 37, 45), (3, 200, 130)])
def test_fully_connected_every_tile_config(rng, backend, config, m, k, n):
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    got = _run(backend, fully_connected_model(x.shape, w, b, "relu"), {"x": x}, gemm_tiles=config)
    assert_close(got, fully_connected_ref(x, w, b, "relu"), rtol=1e-5)


@pytest.mark.parametrize("config", ["64x64", "16x64", "64x64n128", "128x128"])
@pytest.mark.parametrize("splits", [2, 4, 8])
def test_split_k_sums_every_slice(rng, backend, config, splits):
    """K = 600 over 2/4/8 slices (slice lengths rounded up to 16; the last slice is short). The planner splits in
    powers of two: a /3 matched no plan and ran the untiled fallback; gemm_tiles now refuses it."""
    x = rng.standard_normal((20, 600)).astype(np.float32)
    w = rng.standard_normal((33, 600)).astype(np.float32)
    b = rng.standard_normal(33).astype(np.float32)
    got = _run(backend, fully_connected_model(x.shape, w, b, "relu6"), {"x": x}, gemm_tiles=f"{config}/{splits}")
    assert_close(got, fully_connected_ref(x, w, b, "relu6"), rtol=1e-5)


@pytest.mark.parametrize("config", ["64x64n128", "128x64n128", "128x64n128/2", "64x128n128"])
@pytest.mark.parametrize("weights_fp16", [False, True])
@pytest.mark.parametrize("x_shape,co,kernel,stride", [
    ((2, 9, 11, 32), 40, 3, 1),    # edge tiles in M and N; 198 rows: two 128-row tiles (row table loop)
    ((1, 12, 10, 16), 24, 3, 2),   # stride 2
    ((1, 8, 8, 64), 130, 1, 1),    # 1x1
])
def test_conv2d_128_thread_configs(rng, backend, config, weights_fp16, x_shape, co, kernel, stride):
    """The 128-thread conv instances vs float64, fp32 and half-stored weights, with split-K."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((co, kernel, kernel, x_shape[3])).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    got = _run(backend, conv2d_model(x.shape, w, b, stride, 1, "SAME", "relu6"), {"x": x}, weights_fp16=weights_fp16,
               gemm_tiles=config)
    want = conv2d_ref(x, _half(w) if weights_fp16 else w, b, stride, 1, "SAME", "relu6")
    assert_close(got, want, rtol=1e-5)


def test_cost_model_splits_long_thin_problems(rng, backend):
    """1 tile of output, K = 4096: the default plan splits K (scratch holds the partial sums)."""
    x = rng.standard_normal((16, 4096)).astype(np.float32)
    w = rng.standard_normal((16, 4096)).astype(np.float32)
    result = run(fully_connected_model(x.shape, w, None), {"x": x}, backend=backend)
    assert result.stats["max_node_scratch_bytes"] == 16 * 16 * 4 * 16  # 16 slices of 256
    assert_close(result.outputs["y"], fully_connected_ref(x, w, None), rtol=1e-5)


def test_weights_fp16_rounds_weights_to_half_and_keeps_fp32_math(rng, backend):
    """fp16 storage == the fp32 GEMM on half-rounded weights (exactly what vload_half / unpackHalf2x16 give back)."""
    x = rng.standard_normal((1, 100, 96)).astype(np.float32)
    w = rng.standard_normal((72, 96)).astype(np.float32)
    b = rng.standard_normal(72).astype(np.float32)
    model = fully_connected_model(x.shape, w, b)
    got = _run(backend, model, {"x": x}, weights_fp16=True)
    assert_close(got, fully_connected_ref(x, _half(w), b), rtol=1e-5)
    fp32 = fully_connected_ref(x, w, b)
    err = float(np.abs(got - fp32).max() / np.abs(fp32).max())
    assert 1e-5 < err < 2e-3, err  # it really is half storage, and ~1e-3 relative


def test_weights_fp16_of_a_large_matrix_convert_on_all_host_threads(rng, backend):
    """A weight matrix above 2^20 elements is converted to half in parallel bands (SD1.5's 1.6 G UNet weights took
    ~20 s on one thread): every band, its edges included, holds the half-rounded weights."""
    x = rng.standard_normal((1, 8, 1030)).astype(np.float32)
    w = rng.standard_normal((1021, 1030)).astype(np.float32)  # 1,051,630 elements: 17 bands of 2^16, a partial last
    got = _run(backend, fully_connected_model(x.shape, w, None), {"x": x}, weights_fp16=True)
    assert_close(got, fully_connected_ref(x, _half(w), None), rtol=1e-5)


def test_fully_connected_weights_as_input_read_in_place(rng, backend):
    """Non-constant weights (e.g. a DEQUANTIZE output) are read through their N x K strides, not packed."""
    x = rng.standard_normal((2, 50, 24)).astype(np.float32)
    w = rng.standard_normal((40, 24)).astype(np.float32)
    got = _run(backend, fully_connected_model(x.shape, w, None, const_weights=False), {"x": x, "w": w})
    assert_close(got, fully_connected_ref(x, w, None), rtol=1e-5)


@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, False), (False, True), (True, True)])
def test_batch_matmul_transposes(rng, backend, adj_x, adj_y):
    m, k, n = 67, 40, 77
    a = rng.standard_normal((3, k, m) if adj_x else (3, m, k)).astype(np.float32)
    b = rng.standard_normal((3, n, k) if adj_y else (3, k, n)).astype(np.float32)
    got = _run(backend, batch_matmul_model(a.shape, b.shape, (3, m, n), adj_x, adj_y), {"a": a, "b": b})
    assert_close(got, batch_matmul_ref(a, b, adj_x, adj_y), rtol=1e-5)


@pytest.mark.parametrize("a_batch,b_batch", [(1, 4), (4, 1)])
def test_batch_matmul_broadcasts_a_single_batch(rng, backend, a_batch, b_batch):
    a = rng.standard_normal((a_batch, 130, 18)).astype(np.float32)
    b = rng.standard_normal((b_batch, 18, 70)).astype(np.float32)
    got = _run(backend, batch_matmul_model(a.shape, b.shape, (4, 130, 70), False, False), {"a": a, "b": b})
    assert_close(got, batch_matmul_ref(a, b, False, False), rtol=1e-5)


@pytest.mark.parametrize("config", ["64x64", "128x64", "128x128", "64x64/4"])
@pytest.mark.parametrize("x_shape,co,kernel,stride,dilation,padding", [
    ((2, 9, 11, 32), 40, 3, 1, 1, "SAME"),    # tiled implicit GEMM, edge tiles in M and N
    ((1, 12, 10, 16), 24, 3, 2, 1, "SAME"),   # stride 2 (SAME pads bottom/right only)
    ((1, 11, 13, 48), 8, 3, 1, 2, "VALID"),   # dilation
    ((1, 8, 8, 64), 130, 1, 1, 1, "SAME"),    # 1x1: a pure GEMM over NHWC
    ((1, 10, 9, 4), 20, 3, 1, 1, "SAME"),     # Ci % 16 != 0: the generic conv2d_igemm fallback
])
def test_conv2d_matches_reference(rng, backend, config, x_shape, co, kernel, stride, dilation, padding):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((co, kernel, kernel, x_shape[3])).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    got = _run(backend, conv2d_model(x.shape, w, b, stride, dilation, padding, "relu6"), {"x": x}, gemm_tiles=config)
    assert_close(got, conv2d_ref(x, w, b, stride, dilation, padding, "relu6"), rtol=1e-5)


def test_conv2d_without_bias(rng, backend):
    x = rng.standard_normal((1, 7, 7, 16)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 16)).astype(np.float32)
    got = _run(backend, conv2d_model(x.shape, w, None), {"x": x})
    assert_close(got, conv2d_ref(x, w, None), rtol=1e-5)


def test_weights_fp16_conv(rng, backend):
    """Half-stored packed conv weights: exactly the fp32 conv on half-rounded weights."""
    x = rng.standard_normal((1, 12, 12, 32)).astype(np.float32)
    w = rng.standard_normal((24, 3, 3, 32)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    got = _run(backend, conv2d_model(x.shape, w, b), {"x": x}, weights_fp16=True)
    assert_close(got, conv2d_ref(x, w.astype(np.float16).astype(np.float32), b), rtol=1e-5)


# activations_fp16 (half storage of every float tensor of the partition, fp32 arithmetic): each GEMM kernel family
# with half A / C (and half B where B is a tensor of the partition: b_half bit 0), split-K partials stored as float32
# and summed by the reduce. Case: (op, shape variant, delegate options); "naive" runs gemm_f32 on GL, whose
# gl_limits leave no tile config the local memory it needs (OpenCL has no such limit: the cost model's plan there).
ACT16_CASES = [
    ("fc", "edges", {}),                       # 70 x 37 x 45: edge tiles, unaligned rows (scalar loads and stores)
    ("fc", "edges", {"gemm_tiles": "16x64"}),  # the skinny kernel
    ("fc", "split", {"gemm_tiles": "64x64/4"}),
    ("fc", "split", {"gemm_tiles": "16x64/2"}),
    ("fc", "aligned", {"gemm_tiles": "64x64n128"}),  # float4 A loads and aligned 4-wide stores
    ("fc", "weights_input", {"gemm_tiles": "64x64"}),  # B is a half tensor, read along k
    ("fc", "edges", {"naive": "1"}),
    ("bmm", "plain", {}),                      # B read along n with 4-half loads
    ("bmm", "adj", {"gemm_tiles": "64x64/2"}),
    ("bmm", "broadcast", {"gemm_tiles": "128x64"}),
    ("conv", "3x3", {}),
    ("conv", "3x3", {"gemm_tiles": "64x64/2"}),
    ("conv", "filter_input", {"gemm_tiles": "64x64n128"}),
    ("conv", "ci4", {}),                       # Ci % 16 != 0: conv2d_igemm
]


def _act16_case(rng, op: str, variant: str) -> tuple[bytes, dict[str, np.ndarray], np.ndarray]:
    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    if op == "fc":
        m, k, n = {"edges": (70, 37, 45), "split": (20, 600, 33), "aligned": (96, 64, 80),
                   "weights_input": (50, 24, 40)}[variant]
        x, w, b = rand(1, m, k), rand(n, k), rand(n)
        if variant == "weights_input":
            return (fully_connected_model(x.shape, w, None, const_weights=False), {"x": x, "w": w},
                    fully_connected_ref(x, w, None))
        return fully_connected_model(x.shape, w, b, "relu"), {"x": x}, fully_connected_ref(x, w, b, "relu")
    if op == "bmm":
        adj = variant == "adj"
        batches, m, k, n = {"plain": ((3, 3), 67, 40, 80), "adj": ((3, 3), 67, 40, 77),
                            "broadcast": ((1, 4), 130, 18, 70)}[variant]
        a = rand(batches[0], k, m) if adj else rand(batches[0], m, k)
        b = rand(batches[1], n, k) if adj else rand(batches[1], k, n)
        out = (max(batches), m, n)
        return batch_matmul_model(a.shape, b.shape, out, adj, adj), {"a": a, "b": b}, batch_matmul_ref(a, b, adj, adj)
    x_shape, co = {"3x3": ((2, 9, 11, 32), 40), "filter_input": ((1, 12, 10, 16), 24), "ci4": ((1, 10, 9, 4), 20)}[variant]
    x, w, b = rand(*x_shape), rand(co, 3, 3, x_shape[3]), rand(co)
    # RELU, not RELU6: a clamp at 6 of outputs spread ~ sqrt(K) would measure the error against the clamp
    if variant == "filter_input":
        return (conv2d_model(x.shape, w, b, 2, 1, "SAME", "relu", const_weights=False), {"x": x, "w": w},
                conv2d_ref(x, w, b, 2, 1, "SAME", "relu"))
    return conv2d_model(x.shape, w, b, 1, 1, "SAME", "relu"), {"x": x}, conv2d_ref(x, w, b, 1, 1, "SAME", "relu")


@pytest.mark.parametrize("op,variant,options", ACT16_CASES)
def test_activations_fp16_gemm_families(tmp_path, rng, backend, op, variant, options):
    """Half storage, one partition: within 3e-3 of float64 (max abs error / max abs reference; the inputs alone round
    by up to 2^-11 relative), and the answer really went through half storage (further from float64 than fp32 storage
    gets)."""
    model, inputs, want = _act16_case(rng, op, variant)
    opts = {k: v for k, v in options.items() if k != "naive"}
    if "naive" in options and backend == "gl":
        opts["gl_limits"] = "shared_bytes=4096"  # below every tile config's local memory: gemm_f32
    profile = tmp_path / "profile.json"
    got = _run(backend, model, inputs, activations_fp16=True, profile_path=str(profile), **opts)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert 2e-5 < err <= 3e-3, err
    kernels = _profile_kernels(profile)
    assert ("gemm_splitk_reduce" in kernels) == ("/" in opts.get("gemm_tiles", "")), kernels
    if "naive" in options and backend == "gl":
        assert kernels == ["gemm_f32"], kernels


@pytest.mark.parametrize("op,tiles", [("fc", "64x64/4"), ("fc", "16x64/2"), ("conv", "64x64/2")])
def test_activations_fp16_split_k_rounds_the_output_once(rng, backend, op, tiles):
    """With half storage the split-K partials stay float32 (gemm_tiled.kern, b_half bit 3): a split GEMM or conv
    rounds its output to half once, as an unsplit one does -- within half an ulp of the float64 answer on the stored
    (half) inputs, plus float32 summation noise. Half partials missed this by up to 60x: each partial, as large as the
    output or larger where the slices cancel, was rounded on its own before the reduce summed them."""
    if op == "fc":
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 20, 600), (33, 600), (33,)))
        model, want = fully_connected_model(x.shape, w, b), fully_connected_ref(_half(x), w, b)
    else:
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 9, 11, 32), (40, 3, 3, 32), (40,)))
        model, want = conv2d_model(x.shape, w, b), conv2d_ref(_half(x), w, b)
    got = _run(backend, model, {"x": x}, activations_fp16=True, gemm_tiles=tiles).astype(np.float64)
    half_ulp = np.ldexp(1.0, np.frexp(want)[1] - 12)  # of each element's half: 2^(e - 12) for |want| in [2^(e-1), 2^e)
    bound = half_ulp + 1e-6 * np.abs(want).max()  # + float32 summation noise
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("tile", [2, 4, 6])
def test_winograd_matches_direct_within_bound(backend, tile, padding):
    x, w, b = random_problem((2, 38, 35, 24, 40), seed=tile)  # >= 64 tiles (GL runs fewer direct), edge tiles
    attrs = Conv2DWinogradAttrs(tile=tile, padding=padding, activation="none")
    result = run(winograd_model(x.shape, w, b, WINOGRAD.encode(attrs), padding), {"x": x}, backend=backend)
    assert result.stats["claimed_by_op"] == {"SdConv2DWinograd": 1}
    got, want = result.outputs["y"], direct_conv2d(x, w, b, padding)
    assert got.shape == want.shape
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, tile, padding)).all()
    # V [a*a, T, Ci] + M [a*a, T, Co] in the arena (T = 2 images x tiles): the Winograd path ran
    ho, wo = want.shape[1:3]
    tiles = 2 * -(-ho // tile) * -(-wo // tile)
    assert tiles >= 64
    assert result.stats["max_node_scratch_bytes"] == (tile + 2) ** 2 * tiles * (24 + 40) * 4


@pytest.mark.parametrize("activation", ["relu", "relu6", "tanh"])
def test_winograd_activation(backend, activation):
    x, w, b = random_problem((1, 34, 34, 16, 20), seed=3)  # F4: 81 tiles
    attrs = Conv2DWinogradAttrs(tile=4, padding="SAME", activation=activation)
    got = _run(backend, winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)), {"x": x})
    want = direct_conv2d(x, w, b, "SAME", activation)
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, 4, "SAME")).all()  # activations: 1-Lipschitz
    assert np.abs(got - direct_conv2d(x, w, b, "SAME")).max() > 0.1  # the activation was applied


def test_winograd_small_map_runs_direct(backend):
    """Below 16 tiles the a*a GEMMs would fill a fraction of even the skinny 16-row tile: direct conv, no scratch."""
    x, w, b = random_problem((1, 8, 8, 32, 48), seed=1)  # F4: 4 tiles
    attrs = Conv2DWinogradAttrs(tile=4, padding="SAME", activation="relu")
    result = run(winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)), {"x": x}, backend=backend)
    assert result.stats["claimed_by_op"] == {"SdConv2DWinograd": 1}
    assert result.stats["max_node_scratch_bytes"] == 0
    assert_close(result.outputs["y"], direct_conv2d(x, w, b, "SAME", "relu"), rtol=1e-5)


@pytest.mark.parametrize("config", ["", "16x64/2"])
@pytest.mark.parametrize("weights_fp16", [False, True])
@pytest.mark.parametrize("tile,hw,tiles", [(4, 16, 16), (2, 8, 16), (2, 12, 36)])
def test_winograd_few_tiles_use_the_skinny_gemm(tmp_path, backend, tile, hw, tiles, weights_fp16, config):
    """16 <= T < 64 (SD's 16x16 map at F4, 8x8 at F2): the Winograd path with a 16-row GEMM (V/M scratch). The cost
    model's gemm_t16x64 plan becomes gemm_s16x128 when that kernel has >= 2 work-groups per compute unit (always at
    2 CUs: a*a batches); forced to 16x64 with K split in two, it stays gemm_t16x64 (partials in scratch, summed by
    the output transform on OpenCL, by gemm_splitk_reduce on GL)."""
    x, w, b = random_problem((1, hw, hw, 48, 40), seed=tile + hw)
    assert _wino_tiles(1, hw, hw, tile) == tiles
    attrs = Conv2DWinogradAttrs(tile=tile, padding="SAME", activation="none")
    profile = tmp_path / "profile.json"
    result = run(winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)), {"x": x}, backend=backend,
                 weights_fp16=weights_fp16, profile_path=str(profile), **({"gemm_tiles": config} if config else {}),
                 gemm_autotune=False, **SAME_CUS[backend])  # the cost model's plan (the tuner may time another)
    splits = 2 if config.endswith("/2") else 1
    partials = (tile + 2) ** 2 * tiles * 40 * 4 * splits if splits > 1 else 0
    assert result.stats["max_node_scratch_bytes"] == (tile + 2) ** 2 * tiles * (48 + 40) * 4 + partials
    kernels = _profile_kernels(profile)
    assert kernels[1] == ("gemm_t16x64" if config else "gemm_s16x128"), kernels
    got, want = result.outputs["y"], direct_conv2d(x, w, b, "SAME")
    if weights_fp16 and tile == 2:  # U stored as half (test_weights_fp16_winograd_half_u_only_for_f2)
        assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-3
    else:
        assert (np.abs(got - want) <= winograd_error_bound(x, w, b, tile, "SAME")).all()


@pytest.mark.parametrize("ci,co", [(16, 300), (640, 136)])
def test_winograd_skinny4_gemm_column_and_k_edges(tmp_path, backend, ci, co):
    """gemm_s16x128 with a partial 128-column tile and a partial last 64-column slab of U (Co = 300, 136), and with
    K = 640 (five 128-deep A chunks over 4 k-lanes); a 9x7 map at F2 has 20 tiles: a full and a partial 16-row tile."""
    x, w, b = random_problem((1, 9, 7, ci, co), seed=ci)
    model = winograd_model(x.shape, w, b, WINOGRAD.encode(Conv2DWinogradAttrs(tile=2, padding="SAME")))
    profile = tmp_path / "profile.json"
    result = run(model, {"x": x}, backend=backend, profile_path=str(profile), gemm_autotune=False,
                 **SAME_CUS[backend])
    kernels = _profile_kernels(profile)
    assert kernels == ["winograd_input_f2", "gemm_s16x128", "winograd_output_f2"]
    got, want = result.outputs["y"], direct_conv2d(x, w, b, "SAME")
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, 2, "SAME")).all()


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_weights_fp16_winograd_half_u_only_for_f2(backend, tile):
    """F2 stores U = G g G^T as half (~3e-4); F4/F6 keep float32 U (half would give 5e-3 / 3e-2)."""
    x, w, b = random_problem((1, 48, 48, 32, 24), seed=5)  # >= 64 tiles for every tile size
    model = winograd_model(x.shape, w, b, WINOGRAD.encode(Conv2DWinogradAttrs(tile=tile)))
    got = _run(backend, model, {"x": x}, weights_fp16=True)
    fp32 = _run(backend, model, {"x": x})
    want = direct_conv2d(x, w, b, "SAME")
    err = float(np.abs(got - want).max() / np.abs(want).max())
    if tile == 2:
        assert 1e-5 < err < 1e-3, err
    else:
        np.testing.assert_array_equal(got, fp32)


@pytest.mark.parametrize("autotune", [False, True])
def test_gemm_autotune_results_match_reference(rng, backend, autotune):
    """With gemm_autotune the first invoke times every candidate plan (split-K ones included, K = 1200) on the real
    operands and the last launch writes the result: outputs match float64 on that run and the next."""
    x = rng.standard_normal((1, 300, 1200)).astype(np.float32)
    w = rng.standard_normal((200, 1200)).astype(np.float32)
    b = rng.standard_normal(200).astype(np.float32)
    interp = Interpreter(model_content=fully_connected_model(x.shape, w, b, "relu"),
                         experimental_delegates=[native.load(backend=backend, gemm_autotune=autotune)])
    interp.allocate_tensors()
    want = fully_connected_ref(x, w, b, "relu")
    for _ in range(2):
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        assert_close(interp.get_tensor(interp.get_output_details()[0]["index"]), want, rtol=1e-5)


@pytest.mark.parametrize("tile", [2, 6])
def test_gemm_autotune_winograd_and_conv(backend, tile):
    """The Winograd batched GEMM tunes after its input transform is queued; the direct conv tunes too."""
    x, w, b = random_problem((1, 24, 24, 32, 48), seed=tile)
    attrs = Conv2DWinogradAttrs(tile=tile, padding="SAME", activation="none")
    got = run(winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)), {"x": x}, backend=backend, gemm_autotune=True)
    assert (np.abs(got.outputs["y"] - direct_conv2d(x, w, b, "SAME")) <= winograd_error_bound(x, w, b, tile, "SAME")).all()


def test_gemm_autotune_winograd_times_split_k_candidates(backend):
    """K = 512 input channels: the Winograd GEMM's tuner also times split-K plans of its cheapest configs (OpenCL: 2-
    and 4-way, launched with partials only, the output transform sums them; GL: with their reduce launch). Whichever
    wins, the tuning run and the next one match the direct convolution."""
    x, w, b = random_problem((1, 24, 24, 512, 64), seed=5)
    attrs = Conv2DWinogradAttrs(tile=2, padding="SAME", activation="none")
    interp = Interpreter(model_content=winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)),
                         experimental_delegates=[native.load(backend=backend, gemm_autotune=True)])
    interp.allocate_tensors()
    bound = winograd_error_bound(x, w, b, 2, "SAME")
    want = direct_conv2d(x, w, b, "SAME")
    for _ in range(2):
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        assert (np.abs(interp.get_tensor(interp.get_output_details()[0]["index"]) - want) <= bound).all()
