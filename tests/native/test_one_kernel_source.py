"""One kernel source, two APIs: the OpenCL backend (PoCL in CI) and the GL backend (llvmpipe) run the same kernels on
the tiny fused + Winograd models, and every Winograd tile runs as one partition on both with the unfused CPU answer.

Both backends plan from the same tables and the same device queries; GL has no query for compute units, so the GL
run is given the OpenCL device's count (gl_limits), and a difference in the launched kernel names is then a kernel one
API has and the other lacks. Tuning is off: its timing picks differ by machine noise, not by kernel availability.
One choice follows a limit that cannot be pinned: attn_short_q<BQ> takes the largest query block whose local memory
the device has (q64 on PoCL; llvmpipe's 32 KiB holds q32), so that family is compared without its block size."""
from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from ai_edge_litert.interpreter import Interpreter

from harness import assert_close, signature_inputs
from sdconvert.graph import read_model
from sdlite import native

BACKENDS = ("opencl", "gl")


@pytest.fixture(scope="module")
def winograd_exports(tmp_path_factory, tiny_export: Path) -> dict[str, Path]:
    """The tiny text encoder, UNet and VAE decoder fused, with Winograd F2 / F4 / F6 convs (one folder per tile)."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_file

    out = {}
    for tile in ("2", "4", "6"):
        folder = tmp_path_factory.mktemp(f"tiny-fused-f{tile}")
        for name in ("text_encoder", "unet", "vae_decoder"):
            optimize_file(tiny_export / f"{name}.tflite", folder / f"{name}.tflite",
                          GraphOptions(fuse=True, winograd=tile))
        out[tile] = folder
    return out


def _run(backend: str, path: Path, inputs: dict, profile: Path, opencl: dict | None) -> tuple[dict, dict, dict]:
    """Outputs, stats and the profile of one invoke; on GL with the OpenCL device's compute units (GL has no query)."""
    options = {}
    if opencl is not None:
        options["gl_limits"] = f"compute_units={opencl['compute_units']}"
    delegate = native.load(backend=backend, gemm_autotune=False, profile_path=str(profile), **options)
    runner = Interpreter(model_path=str(path), experimental_delegates=[delegate]).get_signature_runner(
        "serving_default")
    outputs = runner(**inputs)
    return outputs, native.stats(delegate), json.loads(profile.read_text())


def _family(kernel: str) -> str:
    return re.sub(r"^attn_short_q\d+$", "attn_short_q*", kernel)


@pytest.mark.parametrize("model", ("text_encoder", "unet", "vae_decoder"))
def test_opencl_and_gl_launch_the_same_kernels(tiny_export: Path, winograd_exports, tmp_path, rng, model):
    path = winograd_exports["4"] / f"{model}.tflite"
    reference = Interpreter(model_path=str(tiny_export / f"{model}.tflite")).get_signature_runner("serving_default")
    inputs = signature_inputs(reference, rng, timestep=500.0)
    expected = reference(**inputs)
    launched, opencl = {}, None
    for backend in BACKENDS:
        outputs, stats, profile = _run(backend, path, inputs, tmp_path / f"{backend}.json", opencl)
        opencl = opencl or profile
        assert stats["partitions"] == 1 and stats["declined_nodes"] == 0 and stats["host_fallback_nodes"] == 0
        for name, value in expected.items():
            assert_close(outputs[name], value, rtol=1e-4)
        launched[backend] = Counter(_family(k["name"]) for n in profile["nodes"] for k in n["kernels"])
    assert launched["opencl"], "no kernels recorded"
    only_cl = launched["opencl"] - launched["gl"]
    only_gl = launched["gl"] - launched["opencl"]
    assert not only_cl and not only_gl, f"OpenCL only: {dict(only_cl)}; GL only: {dict(only_gl)}"


@pytest.mark.parametrize("tile", ("2", "4", "6"))
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_winograd_tile_is_one_partition_with_the_unfused_answer(tiny_export: Path, winograd_exports, rng,
                                                                       backend, tile):
    for model in ("unet", "vae_decoder"):
        path = winograd_exports[tile] / f"{model}.tflite"
        histogram = read_model(path).op_histogram()
        assert histogram.get("SdConv2DWinograd", 0) > 0, histogram
        reference = Interpreter(model_path=str(tiny_export / f"{model}.tflite")).get_signature_runner(
            "serving_default")
        inputs = signature_inputs(reference, rng, timestep=500.0)
        expected = reference(**inputs)
        delegate = native.load(backend=backend)
        runner = Interpreter(model_path=str(path), experimental_delegates=[delegate]).get_signature_runner(
            "serving_default")
        actual = runner(**inputs)
        stats = native.stats(delegate)
        assert stats["partitions"] == 1 and stats["claimed_nodes"] == sum(histogram.values())
        assert stats["declined_nodes"] == 0
        for name, value in expected.items():
            assert_close(actual[name], value, rtol=1e-4)
