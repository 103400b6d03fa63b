"""What only the OpenCL backend (PoCL in CI) has around the tiled GEMM: the Winograd output transform that sums
split-K partials, the option parsing, and the tiny fused + Winograd models. The GEMM / conv tile configs, split-K, the
skinny kernels, half weights and the tuner run on every GPU backend: test_gpu_gemm.py.
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
from tflite_gemm_models import fully_connected_model, fully_connected_ref, winograd_model


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


def _profile_kernels(profile: Path) -> list[str]:
    """The kernel names of a delegate profile (profile_path option), in launch order."""
    return [k["name"] for n in json.loads(profile.read_text())["nodes"] for k in n["kernels"]]


def _wino_tiles(n: int, ho: int, wo: int, tile: int) -> int:
    return n * -(-ho // tile) * -(-wo // tile)


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
