"""Float storage islands (custom_ops/gpu/storage_islands.h): with half activation storage (activations_fp16) the
steps of an image model's coarsest level keep float32 storage, and a step reading a tensor of the other storage reads
a copy converted at its first such reader (dequant_f16 half -> float, pack_half float -> half). The profile's
"storage" says which storage each node's op was built for; its kernels show the conversions.

The tiny VAE decoder's coarsest level is its latent's 8 x 8: everything from the latent to the first upsampler, which
is the first node stored as half again (it reads the level's last sum through one float -> half copy). The tiny UNet's
is its 2 x 2 mid level. A text encoder has no convolution, so no island. Parity of every model and variant with the
islands: test_act_half_models.py (3e-3)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ai_edge_litert.interpreter import Interpreter

from harness import HALF_STORAGE_RTOL, assert_close, signature_inputs
from sdlite import native

BACKENDS = ("opencl", "gl")
CONVERSIONS = {"dequant_f16", "pack_half"}


def _profile(backend: str, path: Path, inputs: dict, tmp_path: Path, act_half: bool) -> tuple[list[dict], dict]:
    profile = tmp_path / f"{path.stem}-{backend}-{int(act_half)}.json"
    delegate = native.load(backend=backend, gemm_autotune=False, activations_fp16=act_half, profile_path=str(profile))
    runner = Interpreter(model_path=str(path), experimental_delegates=[delegate]).get_signature_runner(
        "serving_default")
    outputs = runner(**inputs)
    assert native.stats(delegate)["partitions"] == 1
    return json.loads(profile.read_text())["nodes"], outputs


def _kernels(node: dict) -> list[str]:
    return [k["name"] for k in node["kernels"]]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["plain", "fused", "f4"])
def test_vae_decoder_keeps_its_latent_level_in_float32(tiny_export: Path, tiny_variant_folders, rng, tmp_path,
                                                       backend, variant):
    path = tiny_variant_folders[variant] / "vae_decoder.tflite"
    reference = Interpreter(model_path=str(tiny_export / "vae_decoder.tflite")).get_signature_runner("serving_default")
    inputs = signature_inputs(reference, rng)
    nodes, outputs = _profile(backend, path, inputs, tmp_path, act_half=True)
    nodes = [n for n in nodes if not n.get("folded")]
    first_up = next(i for i, n in enumerate(nodes) if n["op"] == "RESIZE_NEAREST_NEIGHBOR")
    assert first_up > 10
    assert {n["storage"] for n in nodes[:first_up]} == {"float"}, [n["op"] for n in nodes[:first_up] if n["storage"] != "float"]
    assert {n["storage"] for n in nodes[first_up:]} == {"half"}
    # one conversion in all: the upsampler reads the level's last tensor through a half copy
    converting = [(i, _kernels(n)) for i, n in enumerate(nodes) if CONVERSIONS & set(_kernels(n))]
    assert converting == [(first_up, ["pack_half", _kernels(nodes[first_up])[1]])], converting
    for name, value in reference(**inputs).items():
        assert_close(outputs[name], value, rtol=HALF_STORAGE_RTOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unet_island_is_its_coarsest_level(tiny_export: Path, tiny_variant_folders, rng, tmp_path, backend):
    path = tiny_variant_folders["fused"] / "unet.tflite"
    reference = Interpreter(model_path=str(tiny_export / "unet.tflite")).get_signature_runner("serving_default")
    inputs = signature_inputs(reference, rng, timestep=500.0)
    nodes, _ = _profile(backend, path, inputs, tmp_path, act_half=True)
    floats = [i for i, n in enumerate(nodes) if n["storage"] == "float"]
    assert floats, "no island"
    # the timestep embedding, the first and the last nodes are half; the island is one run between the down path's
    # last convolution and the first upsampler (views inside it included)
    assert nodes[0]["storage"] == nodes[-1]["storage"] == "half"
    first_up = next(i for i, n in enumerate(nodes) if n["op"] == "RESIZE_NEAREST_NEIGHBOR")
    assert floats[-1] < first_up and nodes[first_up]["storage"] == "half"
    assert nodes[floats[0]]["op"] == "CONV_2D"
    # what enters the island is converted to float (the down path's map, the text context's k / v), what leaves it
    # to half (the upsampler's input)
    into = {k for n in nodes if n["storage"] == "float" for k in _kernels(n) if k in CONVERSIONS}
    out_of = {k for n in nodes if n["storage"] == "half" for k in _kernels(n) if k in CONVERSIONS}
    assert (into, out_of) == ({"dequant_f16"}, {"pack_half"})


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_island_without_half_storage_or_convolutions(tiny_export: Path, tiny_variant_folders, rng, tmp_path,
                                                        backend):
    vae = tiny_variant_folders["fused"] / "vae_decoder.tflite"
    reference = Interpreter(model_path=str(tiny_export / "vae_decoder.tflite")).get_signature_runner("serving_default")
    nodes, _ = _profile(backend, vae, signature_inputs(reference, rng), tmp_path, act_half=False)
    assert {n["storage"] for n in nodes} == {"float"}
    assert not any(CONVERSIONS & set(_kernels(n)) for n in nodes)
    text = tiny_variant_folders["fused"] / "text_encoder.tflite"
    reference = Interpreter(model_path=str(tiny_export / "text_encoder.tflite")).get_signature_runner("serving_default")
    nodes, _ = _profile(backend, text, signature_inputs(reference, rng), tmp_path, act_half=True)
    assert {n["storage"] for n in nodes if not n.get("folded")} == {"half"}
    assert not any(CONVERSIONS & set(_kernels(n)) for n in nodes)
