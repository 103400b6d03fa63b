"""Tiled GEMM / Winograd kernels of the OpenCL backend (PoCL in CI) vs float64 NumPy: what only OpenCL has.

Shapes are picked to hit full tiles, edge tiles in M, N and K, K not a multiple of the 16-wide K step, every
tile config (forced through the gemm_tiles option, the skinny 16x64 included), split-K and its cost model, Winograd
with few tiles, and the weights_fp16 storage option. The tests every GPU backend shares (transposed / broadcast
operands, convs, Winograd transforms) are in test_gpu_gemm.py.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from harness import assert_close, run
from sdconvert.ops.conv2d_winograd import SPEC as WINOGRAD, Conv2DWinogradAttrs
from sdconvert.winograd.accuracy import random_problem
from sdconvert.winograd.reference import direct_conv2d, winograd_error_bound
from sdlite import native
from sdlite.native import NativeDelegateError
from tflite_gemm_models import conv2d_model, conv2d_ref, fully_connected_model, fully_connected_ref, winograd_model

# 16x64: the skinny kernel (GEMM only); n128: the 128-thread instances (GL has none)
TILE_CONFIGS = ("64x64", "128x64", "128x128", "16x64", "64x64n128", "32x64n128", "128x64n128",
                "64x128n128", "32x128n128")


def _half(a: np.ndarray) -> np.ndarray:
    """What weights_fp16 stores: round to nearest even half, back to float."""
    return a.astype(np.float16).astype(np.float32)


def _run(model: bytes, inputs: dict[str, np.ndarray], **opts) -> np.ndarray:
    result = run(model, inputs, backend="opencl", **opts)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert result.stats["partitions"] == 1
    return result.outputs["y"]


@pytest.mark.parametrize("config", TILE_CONFIGS)
@pytest.mark.parametrize("m,k,n", [(128, 64, 128), (70, 37, 45), (3, 200, 130)])
def test_fully_connected_every_tile_config(rng, config, m, k, n):
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    got = _run(fully_connected_model(x.shape, w, b, "relu"), {"x": x}, gemm_tiles=config)
    assert_close(got, fully_connected_ref(x, w, b, "relu"), rtol=1e-5)


@pytest.mark.parametrize("config", ["64x64", "16x64", "64x64n128"])
@pytest.mark.parametrize("splits", [2, 3, 8])
def test_split_k_sums_every_slice(rng, config, splits):
    """K = 600 over 2/3/8 slices (slice lengths rounded up to 16; the last slice is short)."""
    x = rng.standard_normal((20, 600)).astype(np.float32)
    w = rng.standard_normal((33, 600)).astype(np.float32)
    b = rng.standard_normal(33).astype(np.float32)
    got = _run(fully_connected_model(x.shape, w, b, "relu6"), {"x": x}, gemm_tiles=f"{config}/{splits}")
    assert_close(got, fully_connected_ref(x, w, b, "relu6"), rtol=1e-5)


@pytest.mark.parametrize("config", ["64x64n128", "128x64n128", "128x64n128/2", "64x128n128"])
@pytest.mark.parametrize("weights_fp16", [False, True])
@pytest.mark.parametrize("x_shape,co,kernel,stride", [
    ((2, 9, 11, 32), 40, 3, 1),    # edge tiles in M and N; 198 rows: two 128-row tiles (row table loop)
    ((1, 12, 10, 16), 24, 3, 2),   # stride 2
    ((1, 8, 8, 64), 130, 1, 1),    # 1x1
])
def test_conv2d_128_thread_configs(rng, config, weights_fp16, x_shape, co, kernel, stride):
    """The 128-thread conv instances (OpenCL only) vs float64, fp32 and half-stored weights, with split-K."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((co, kernel, kernel, x_shape[3])).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    got = _run(conv2d_model(x.shape, w, b, stride, 1, "SAME", "relu6"), {"x": x}, weights_fp16=weights_fp16,
               gemm_tiles=config)
    want = conv2d_ref(x, _half(w) if weights_fp16 else w, b, stride, 1, "SAME", "relu6")
    assert_close(got, want, rtol=1e-5)


@pytest.mark.parametrize("value", ["64x64x", "64x64/0", "x64", "64x64n", "64x64n128/"])
def test_a_malformed_gemm_tiles_option_is_refused_when_the_delegate_loads(value):
    with pytest.raises(NativeDelegateError, match=f"gemm_tiles='{re.escape(value)}' is malformed"):
        native.load(backend="opencl", gemm_tiles=value)


def test_an_unknown_tile_config_is_a_declined_node_not_a_silent_fallback(rng):
    x = rng.standard_normal((1, 20, 64)).astype(np.float32)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    result = run(fully_connected_model(x.shape, w, None), {"x": x}, backend="opencl", gemm_tiles="99x99")
    assert result.stats["claimed_nodes"] == 0 and result.stats["partitions"] == 0
    (declined,) = result.stats["declined"]
    assert declined["op"] == "FULLY_CONNECTED" and declined["reason"].startswith("gemm_tiles names no tile config"), \
        declined
    assert_close(result.outputs["y"], fully_connected_ref(x, w, None), rtol=1e-5)  # ran on the CPU instead


def test_cost_model_splits_long_thin_problems(rng):
    """1 tile of output, K = 4096: the default plan splits K (scratch holds the partial sums)."""
    x = rng.standard_normal((16, 4096)).astype(np.float32)
    w = rng.standard_normal((16, 4096)).astype(np.float32)
    result = run(fully_connected_model(x.shape, w, None), {"x": x}, backend="opencl")
    assert result.stats["max_node_scratch_bytes"] == 16 * 16 * 4 * 16  # 16 slices of 256
    assert_close(result.outputs["y"], fully_connected_ref(x, w, None), rtol=1e-5)


def _profile_kernels(profile: Path) -> list[str]:
    """The kernel names of a delegate profile (profile_path option), in launch order."""
    return [k["name"] for n in json.loads(profile.read_text())["nodes"] for k in n["kernels"]]


def _wino_tiles(n: int, ho: int, wo: int, tile: int) -> int:
    return n * -(-ho // tile) * -(-wo // tile)


def test_winograd_small_map_runs_direct():
    """Below 16 tiles the a*a GEMMs would fill a fraction of even the skinny 16-row tile: direct conv, no scratch."""
    x, w, b = random_problem((1, 8, 8, 32, 48), seed=1)  # F4: 4 tiles
    attrs = Conv2DWinogradAttrs(tile=4, padding="SAME", activation="relu")
    result = run(winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)), {"x": x}, backend="opencl")
    assert result.stats["claimed_by_op"] == {"SdConv2DWinograd": 1}
    assert result.stats["max_node_scratch_bytes"] == 0
    assert_close(result.outputs["y"], direct_conv2d(x, w, b, "SAME", "relu"), rtol=1e-5)


@pytest.mark.parametrize("config", ["", "16x64/2"])
@pytest.mark.parametrize("weights_fp16", [False, True])
@pytest.mark.parametrize("tile,hw,tiles", [(4, 16, 16), (2, 8, 16), (2, 12, 36)])
def test_winograd_few_tiles_use_the_skinny_gemm(tmp_path, tile, hw, tiles, weights_fp16, config):
    """16 <= T < 64 (SD's 16x16 map at F4, 8x8 at F2): the Winograd path with a 16-row GEMM (V/M scratch). The cost
    model's gemm_t16x64 plan becomes gemm_s16x128 when that kernel has >= 2 work-groups per compute unit (always on
    PoCL's 2 CUs: a*a batches); forced to 16x64 with K split in two, it stays gemm_t16x64 (partials in scratch)."""
    x, w, b = random_problem((1, hw, hw, 48, 40), seed=tile + hw)
    assert _wino_tiles(1, hw, hw, tile) == tiles
    attrs = Conv2DWinogradAttrs(tile=tile, padding="SAME", activation="none")
    profile = tmp_path / "profile.json"
    result = run(winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)), {"x": x}, backend="opencl",
                 weights_fp16=weights_fp16, profile_path=str(profile), **({"gemm_tiles": config} if config else {}))
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
def test_winograd_skinny4_gemm_column_and_k_edges(tmp_path, ci, co):
    """gemm_s16x128 with a partial 128-column tile and a partial last 64-column slab of U (Co = 300, 136), and with
    K = 640 (five 128-deep A chunks over 4 k-lanes); a 9x7 map at F2 has 20 tiles: a full and a partial 16-row tile."""
    x, w, b = random_problem((1, 9, 7, ci, co), seed=ci)
    model = winograd_model(x.shape, w, b, WINOGRAD.encode(Conv2DWinogradAttrs(tile=2, padding="SAME")))
    profile = tmp_path / "profile.json"
    result = run(model, {"x": x}, backend="opencl", profile_path=str(profile))
    kernels = _profile_kernels(profile)
    assert kernels == ["winograd_input_f2", "gemm_s16x128", "winograd_output_f2"]
    got, want = result.outputs["y"], direct_conv2d(x, w, b, "SAME")
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, 2, "SAME")).all()


@pytest.mark.parametrize("tile,forced", [(4, 2), (2, 4), (6, 4), (4, 8)])
def test_winograd_output_transform_sums_any_split_count(tmp_path, tile, forced):
    """A forced split-K Winograd GEMM leaves its partials to winograd_output_fM_sum, whose first four splits are
    unrolled loads and the rest a loop: K = 96 in whole 16-deep steps makes /2 two slices of 48, /4 three of 32 and /8
    six of 16, and every count sums right (a 30x28 map: 25 tiles at F6)."""
    x, w, b = random_problem((1, 30, 28, 96, 40), seed=forced)
    model = winograd_model(x.shape, w, b, WINOGRAD.encode(Conv2DWinogradAttrs(tile=tile, padding="SAME")))
    profile = tmp_path / "profile.json"
    result = run(model, {"x": x}, backend="opencl", profile_path=str(profile), gemm_tiles=f"64x64/{forced}")
    assert _profile_kernels(profile) == [f"winograd_input_f{tile}", "gemm_t64x64", f"winograd_output_f{tile}_sum"]
    got, want = result.outputs["y"], direct_conv2d(x, w, b, "SAME")
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, tile, "SAME")).all()


def test_weights_fp16_rounds_weights_to_half_and_keeps_fp32_math(rng):
    """fp16 storage == the fp32 GEMM on half-rounded weights (exactly what vload_half gives back)."""
    x = rng.standard_normal((1, 100, 96)).astype(np.float32)
    w = rng.standard_normal((72, 96)).astype(np.float32)
    b = rng.standard_normal(72).astype(np.float32)
    model = fully_connected_model(x.shape, w, b)
    got = _run(model, {"x": x}, weights_fp16=True)
    assert_close(got, fully_connected_ref(x, _half(w), b), rtol=1e-5)
    fp32 = fully_connected_ref(x, w, b)
    err = float(np.abs(got - fp32).max() / np.abs(fp32).max())
    assert 1e-5 < err < 2e-3, err  # it really is half storage, and ~1e-3 relative


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_weights_fp16_winograd_half_u_only_for_f2(tile):
    """F2 stores U = G g G^T as half (~3e-4); F4/F6 keep float32 U (half would give 5e-3 / 3e-2)."""
    x, w, b = random_problem((1, 48, 48, 32, 24), seed=5)  # >= 64 tiles for every tile size
    model = winograd_model(x.shape, w, b, WINOGRAD.encode(Conv2DWinogradAttrs(tile=tile)))
    got = _run(model, {"x": x}, weights_fp16=True)
    fp32 = _run(model, {"x": x})
    want = direct_conv2d(x, w, b, "SAME")
    err = float(np.abs(got - want).max() / np.abs(want).max())
    if tile == 2:
        assert 1e-5 < err < 1e-3, err
    else:
        np.testing.assert_array_equal(got, fp32)


def test_weights_fp16_option_is_validated():
    from ai_edge_litert.interpreter import load_delegate

    from sdlite import native

    with pytest.raises(ValueError, match="option weights_fp16='yes' must be 0 or 1"):
        load_delegate(str(native.delegate_path()), {"backend": "opencl", "weights_fp16": "yes"})


@pytest.mark.parametrize("tile", ["2", "4", "6"])
@pytest.mark.parametrize("model", ["unet", "vae_decoder"])
def test_tiny_model_fused_winograd_on_one_partition(tiny_export, tmp_path, model, tile):
    """``--fuse --winograd N``: one partition, no CPU node, <= 1e-4 vs the CPU interpreter on the unrewritten
    model. The tiny UNet's 8x8 latent is below 64 tiles (its Winograd convs run direct); the tiny VAE
    decoder's 64x64 maps run the Winograd kernels (their V/M scratch is the largest node scratch)."""
    from ai_edge_litert.interpreter import Interpreter

    from sdconvert.export.optimize import GraphOptions, optimize
    from sdlite import native

    src = tiny_export / f"{model}.tflite"
    dst = tmp_path / f"{model}_w{tile}.tflite"
    report = optimize(src, GraphOptions(fuse=True, winograd=tile), say=lambda _: None, dst=dst)
    convs = [c for c in report["winograd"]["convs"] if c["tile"] == int(tile)]
    assert convs

    reference = Interpreter(model_path=str(src)).get_signature_runner("serving_default")
    rng = np.random.default_rng(0)
    inputs = {name: (np.array([500.0]) if "timestep" in name else rng.standard_normal(d["shape"])).astype(np.float32)
              for name, d in reference.get_input_details().items()}
    expected = reference(**inputs)

    delegate = native.load(backend="opencl")
    runner = Interpreter(model_path=str(dst), experimental_delegates=[delegate]).get_signature_runner("serving_default")
    actual = runner(**inputs)
    stats = native.stats(delegate)
    assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
    assert stats["claimed_by_op"]["SdConv2DWinograd"] == len(convs)
    m, a = int(tile), int(tile) + 2
    wino_scratch = [a * a * _wino_tiles(c["shape"]["batch"], c["shape"]["in_h"], c["shape"]["in_w"], m)
                    * (c["shape"]["in_c"] + c["shape"]["out_c"]) * 4 for c in convs
                    if _wino_tiles(c["shape"]["batch"], c["shape"]["in_h"], c["shape"]["in_w"], m) >= 64]
    if model == "vae_decoder":
        assert wino_scratch and stats["max_node_scratch_bytes"] >= max(wino_scratch)
    for name, value in expected.items():
        assert_close(actual[name], value, rtol=1e-4)


@pytest.mark.parametrize("autotune", [False, True])
def test_gemm_autotune_results_match_reference(rng, autotune):
    """With gemm_autotune the first invoke times every candidate plan (split-K ones included, K = 1200) on the real
    operands and the last launch writes the result: outputs match float64 on that run and the next."""
    x = rng.standard_normal((1, 300, 1200)).astype(np.float32)
    w = rng.standard_normal((200, 1200)).astype(np.float32)
    b = rng.standard_normal(200).astype(np.float32)
    from ai_edge_litert.interpreter import Interpreter

    from sdlite import native

    interp = Interpreter(model_content=fully_connected_model(x.shape, w, b, "relu"),
                         experimental_delegates=[native.load(backend="opencl", gemm_autotune=autotune)])
    interp.allocate_tensors()
    want = fully_connected_ref(x, w, b, "relu")
    for _ in range(2):
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        assert_close(interp.get_tensor(interp.get_output_details()[0]["index"]), want, rtol=1e-5)


@pytest.mark.parametrize("tile", [2, 6])
def test_gemm_autotune_winograd_and_conv(tile):
    """The Winograd batched GEMM tunes after its input transform is queued; the direct conv tunes too."""
    x, w, b = random_problem((1, 24, 24, 32, 48), seed=tile)
    attrs = Conv2DWinogradAttrs(tile=tile, padding="SAME", activation="none")
    got = run(winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)), {"x": x}, backend="opencl", gemm_autotune=True)
    assert (np.abs(got.outputs["y"] - direct_conv2d(x, w, b, "SAME")) <= winograd_error_bound(x, w, b, tile, "SAME")).all()


def test_gemm_autotune_winograd_times_split_k_candidates():
    """K = 512 input channels: the Winograd GEMM's tuner also times 2- and 4-way split-K plans of its cheapest
    configs, launched with partials only (the output transform sums them). Whichever wins, the tuning run and the
    next one match the direct convolution."""
    from ai_edge_litert.interpreter import Interpreter

    from sdlite import native

    x, w, b = random_problem((1, 24, 24, 512, 64), seed=5)
    attrs = Conv2DWinogradAttrs(tile=2, padding="SAME", activation="none")
    interp = Interpreter(model_content=winograd_model(x.shape, w, b, WINOGRAD.encode(attrs)),
                         experimental_delegates=[native.load(backend="opencl", gemm_autotune=True)])
    interp.allocate_tensors()
    bound = winograd_error_bound(x, w, b, 2, "SAME")
    want = direct_conv2d(x, w, b, "SAME")
    for _ in range(2):
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        assert (np.abs(interp.get_tensor(interp.get_output_details()[0]["index"]) - want) <= bound).all()


def test_gemm_autotune_option_is_validated():
    from ai_edge_litert.interpreter import load_delegate

    from sdlite import native

    with pytest.raises(ValueError, match="option gemm_autotune='yes' must be 0 or 1"):
        load_delegate(str(native.delegate_path()), {"backend": "opencl", "gemm_autotune": "yes"})
    with pytest.raises(native.NativeDelegateError, match="gemm_autotune must be a bool"):
        native.DelegateOptions(backend="opencl", gemm_autotune="yes")


def test_planner_override_options_pass_through_as_strings():
    """gemm_tiles / attention_tiling travel to the delegate as strings; unset ones are not sent."""
    opts = native.DelegateOptions(backend="opencl", gemm_tiles="64x64n128/2", attention_tiling="r40").as_strings()
    assert opts["gemm_tiles"] == "64x64n128/2" and opts["attention_tiling"] == "r40"
    assert "gemm_tiles" not in native.DelegateOptions(backend="opencl").as_strings()
    with pytest.raises(NativeDelegateError, match="gemm_tiles must be a str"):
        native.DelegateOptions(backend="opencl", gemm_tiles=64)
