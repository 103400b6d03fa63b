"""The model file's weight pages leave the resident set once the device holds what was made from them (delegate
option release_weight_pages, on by default; common/host_pages.h): LiteRT maps a .tflite read-only and shared, every
page of it the delegate reads while packing and uploading stays resident until the interpreter goes -- SD1.5's fp32
UNet file is 3.4 GB of a phone app's RSS. Asserted from the kernel's own accounting of the mapping (/proc/self/smaps)
and the delegate's stats, on the tiny UNet as converted, fused with Winograd F4, and as an fp16 weight-only file
(its DEQUANTIZEs folded on the host: their float32 copies are made when a weight needs them and freed once it is
on the device, stats max_host_weight_bytes), on PoCL and llvmpipe: the outputs are bit-identical with the option
off, which shows the mapping resident. A model given as bytes is heap memory: nothing is released, nothing
changes."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from harness import signature_inputs
from sdconvert.export.precision import convert_weights
from sdlite import native


@pytest.fixture(scope="module")
def unet_files(tmp_path_factory, tiny_export: Path, tiny_fused_winograd_models: Path) -> dict[str, Path]:
    fp16 = tmp_path_factory.mktemp("weight-pages") / "unet-fp16.tflite"
    assert convert_weights(tiny_export / "unet.tflite", fp16, "fp16").tensors > 10
    return {"plain": tiny_export / "unet.tflite", "fused-f4": tiny_fused_winograd_models / "unet.tflite",
            "fp16": fp16}


def _resident_bytes_of(path: Path) -> int:
    """The process's resident bytes of its mappings of `path` (smaps' Rss lines under each mapping's header)."""
    target, current, total = str(path.resolve()), None, 0
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):
                current = fields[5] if len(fields) >= 6 else None
            elif fields and fields[0] == "Rss:" and current == target:
                total += int(fields[1]) * 1024
    return total


def _run(backend: str, path: Path, inputs: dict, content: bool = False, **options) -> tuple[dict, dict, int]:
    delegate = native.load(backend=backend, gemm_autotune=False, **options)
    source = {"model_content": path.read_bytes()} if content else {"model_path": str(path)}
    interpreter = Interpreter(**source, experimental_delegates=[delegate])
    runner = interpreter.get_signature_runner("serving_default")
    first = runner(**inputs)
    resident = _resident_bytes_of(path)
    second = runner(**inputs)  # the device weights made from released pages serve every later invoke
    for name in first:
        assert np.array_equal(first[name], second[name]), name
    return first, native.stats(delegate), resident


@pytest.mark.parametrize("model", ["plain", "fused-f4", "fp16"])
@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_weight_pages_leave_the_resident_set(unet_files, rng, backend: str, model: str) -> None:
    path = unet_files[model]
    size = os.path.getsize(path)
    inputs = signature_inputs(Interpreter(model_path=str(path)).get_signature_runner("serving_default"), rng,
                              timestep=500.0)
    kept, kept_stats, kept_resident = _run(backend, path, inputs, release_weight_pages=False)
    got, stats, resident = _run(backend, path, inputs)
    assert (stats["partitions"], stats["host_fallback_nodes"]) == (1, 0)
    for name in kept:
        assert np.array_equal(got[name], kept[name]), name
    assert kept_stats["host_pages_released_bytes"] == 0
    assert kept_resident > 0.9 * size, (kept_resident, size)  # without it the whole file stays resident
    assert stats["host_pages_released_bytes"] > 0.5 * size, (stats["host_pages_released_bytes"], size)
    # what was given back stays out (what stays: the flatbuffer's tables, the small tensors' partial pages)
    assert resident < kept_resident - 0.9 * stats["host_pages_released_bytes"], (resident, kept_resident, stats)
    assert stats["host_weight_bytes"] == kept_stats["host_weight_bytes"] == 0  # freed after the first invoke
    if model == "fp16":  # the float32 copies of the fp16 weights: all at once without it, a few at a time with it
        assert kept_stats["max_host_weight_bytes"] > 1.5 * size, kept_stats
        # (on the tiny UNet ~1/3: a device-produced weight's copy goes after a Finish every eighth of the model,
        # and the small ones made at the fold stay to the end)
        assert stats["max_host_weight_bytes"] < 0.5 * kept_stats["max_host_weight_bytes"], stats


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_a_model_given_as_bytes_is_left_alone(unet_files, rng, backend: str) -> None:
    path = unet_files["plain"]
    inputs = signature_inputs(Interpreter(model_path=str(path)).get_signature_runner("serving_default"), rng,
                              timestep=500.0)
    want, _, _ = _run(backend, path, inputs, release_weight_pages=False)
    got, stats, _ = _run(backend, path, inputs, content=True)
    assert stats["host_pages_released_bytes"] == 0
    for name in want:
        assert np.array_equal(got[name], want[name]), name
