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

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S
from ai_edge_litert.interpreter import Interpreter

from harness import HALF_STORAGE_RTOL, assert_close, run, signature_inputs
from sdlite import native
from tflite_builtin import BuiltinGraph

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


def _two_level_model(c: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> bytes:
    """x [1, 8, 8, 4] -> CONV_2D 3x3 -> y1 [1, 8, 8, 8] -> CONV_2D 3x3 stride 2 -> y2 [1, 4, 4, 8] (the coarse level);
    y3 = y2 + RESHAPE(c [8] -> [1, 1, 1, 8]) (a view of a constant, read by the island); RESIZE_NEAREST y3 -> 8 x 8;
    z = that + y1."""
    g = BuiltinGraph()
    x = g.input("x", [1, 8, 8, 4])

    def conv(inp: int, w: np.ndarray, stride: int, shape: list[int], name: str) -> int:
        o = S.Conv2DOptionsT()
        o.padding, o.strideH, o.strideW = S.Padding.SAME, stride, stride
        o.dilationHFactor = o.dilationWFactor = 1
        return g.op(S.BuiltinOperator.CONV_2D, [inp, g.const(f"{name}_w", w), g.const(f"{name}_b", np.zeros(8, np.float32))],
                    g.tensor(name, shape), S.BuiltinOptions.Conv2DOptions, o)

    y1 = conv(x, w1, 1, [1, 8, 8, 8], "y1")
    y2 = conv(y1, w2, 2, [1, 4, 4, 8], "y2")
    cv = g.reshape(g.const("c", c), [1, 1, 1, 8], "c_view")
    y3 = g.binary(S.BuiltinOperator.ADD, y2, cv, [1, 4, 4, 8], "y3")
    up = g.resize_nearest(y3, [8, 8], [1, 8, 8, 8], "up")
    g.output(g.binary(S.BuiltinOperator.ADD, up, y1, [1, 8, 8, 8], "z"))
    return g.build()


def _conv_same(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """NHWC x OHWI, 3 x 3, SAME (TFLite's padding: the extra row / column at the bottom / right), float64."""
    n, h, wd, _ = x.shape
    oh, ow = -(-h // stride), -(-wd // stride)
    pt = max(0, (oh - 1) * stride + 3 - h) // 2
    pl = max(0, (ow - 1) * stride + 3 - wd) // 2
    xp = np.zeros((n, h + 4, wd + 4, x.shape[3]))
    xp[:, pt:pt + h, pl:pl + wd] = x
    y = np.zeros((n, oh, ow, w.shape[0]))
    for ky in range(3):
        for kx in range(3):
            patch = xp[:, ky:ky + (oh - 1) * stride + 1:stride, kx:kx + (ow - 1) * stride + 1:stride]
            y += patch @ w[:, ky, kx, :].astype(np.float64).T
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_island_reads_a_view_of_a_half_constant_through_a_conversion(rng, tmp_path, backend):
    """The constant is stored as half (activation storage, read through its RESHAPE view); the coarse level's ADD (or
    the conv whose epilogue absorbs it) reads a float copy of the view, converted each invoke."""
    x = rng.standard_normal((1, 8, 8, 4)).astype(np.float32)
    c = rng.standard_normal(8).astype(np.float32) * 4
    w1 = (rng.standard_normal((8, 3, 3, 4)) / 6).astype(np.float32)
    w2 = (rng.standard_normal((8, 3, 3, 8)) / 8).astype(np.float32)
    y1 = _conv_same(x.astype(np.float64), w1, 1)
    y3 = _conv_same(y1, w2, 2) + c
    want = (np.repeat(np.repeat(y3, 2, axis=1), 2, axis=2) + y1).astype(np.float32)
    profile = tmp_path / "p.json"
    res = run(_two_level_model(c, w1, w2), {"x": x}, backend=backend, activations_fp16=True, gemm_autotune=False,
              profile_path=str(profile))
    assert (res.stats["partitions"], res.stats["declined_nodes"]) == (1, 0)
    assert_close(res.outputs["z"], want, rtol=HALF_STORAGE_RTOL)
    nodes = json.loads(profile.read_text())["nodes"]
    storage = {n["op"]: n["storage"] for n in nodes if n["op"] in ("RESIZE_NEAREST_NEIGHBOR",)}
    assert storage == {"RESIZE_NEAREST_NEIGHBOR": "half"}
    assert any(n["storage"] == "float" and "dequant_f16" in _kernels(n) for n in nodes), nodes
