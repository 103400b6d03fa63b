"""OpenCL caps one buffer at CL_DEVICE_MAX_MEM_ALLOC_SIZE (the spec guarantees a quarter of the device's memory;
Qualcomm's Adreno drivers report ~1 GB whatever the phone has), and clCreateBuffer refuses more. SD1.5's fused +
Winograd VAE decoder plans a 1.46 GB arena at 512 x 512 in float32, which an Adreno phone could not allocate as one
buffer. The arena is now planned in several buffers of at most that size (MemoryPlanner banks, stats
max_arena_buffers), a tensor above it sends its node to the CPU, and a Winograd conv whose V, M and split-K partials
(one scratch region) would not fit one buffer runs as a direct convolution. PoCL plays the small device through
opencl_limits=max_alloc_bytes=N (capped, never raised); OpenClDevice::CreateBuffer refuses any buffer above it, so
every run below that loads at all kept each buffer within the limit."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from sdlite import native


def _run(model: Path, delegate=None) -> list[np.ndarray]:
    interp = Interpreter(model_path=str(model), experimental_delegates=[delegate] if delegate is not None else [])
    interp.allocate_tensors()
    rng = np.random.default_rng(7)
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], rng.standard_normal(d["shape"]).astype(d["dtype"]))
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def _rel(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.abs(g - w).max() / (np.abs(w).max() + 1e-12)) for g, w in zip(got, want, strict=True))


def _largest_tensor_bytes(model: Path) -> int:
    interp = Interpreter(model_path=str(model))
    return max(int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize for t in interp.get_tensor_details())


def _opencl(limit: int | None = None, **options):
    limits = {"opencl_limits": f"max_alloc_bytes={limit}"} if limit else {}
    return native.load("opencl", cache_dir="none", gemm_autotune=False, **limits, **options)


def test_an_arena_above_one_buffer_is_planned_in_several(tiny_export: Path) -> None:
    """The tiny VAE decoder (2.1 MB arena, every tensor at most 512 KiB) with 600,000-byte buffers: one partition,
    nothing declined, the arena in 4 buffers, the outputs bit for bit those of the one-buffer arena (the same kernels
    at other offsets)."""
    model = tiny_export / "vae_decoder.tflite"
    limit = 600_000
    assert _largest_tensor_bytes(model) < limit
    whole = _opencl()
    want = _run(model, whole)
    assert native.stats(whole)["max_arena_buffers"] == 1
    assert native.stats(whole)["max_arena_bytes"] > 3 * limit
    banked = _opencl(limit)
    got = _run(model, banked)
    stats = native.stats(banked)
    assert (stats["partitions"], stats["declined_nodes"], stats["max_arena_buffers"]) == (1, 0, 4), stats
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g, w)


def test_winograd_scratch_above_one_buffer_runs_in_bands(tiny_export: Path, tmp_path: Path) -> None:
    """The fused + Winograd F6 VAE decoder with 1,100,000-byte buffers: the convs whose V + M would not fit one
    buffer (they ran as implicit-GEMM convolutions before) stay Winograd convs, their three launches run per band of
    tiles whose V + M fit, all on the GPU in one partition; the CPU backend's numbers. Their scratch is one band's,
    so the arena shrinks."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_file

    model = tmp_path / "vae_decoder.tflite"
    optimize_file(tiny_export / "vae_decoder.tflite", model, GraphOptions(fuse=True, winograd="6"))
    profiles = {}
    delegates = {}
    for limit in (None, 1_100_000):
        profiles[limit] = tmp_path / f"profile{limit}.json"
        delegates[limit] = _opencl(limit, profile_path=str(profiles[limit]))
        got = _run(model, delegates[limit])
    stats = native.stats(delegates[1_100_000])
    assert (stats["partitions"], stats["declined_nodes"]) == (1, 0), stats
    assert stats["max_arena_bytes"] < native.stats(delegates[None])["max_arena_bytes"]

    def winograd_nodes(limit: int | None) -> dict[int, int]:
        """node -> its winograd_input launches, for the nodes that ran in the Winograd domain"""
        nodes = json.loads(profiles[limit].read_text())["nodes"]
        counts = {n["node"]: sum(k["launches"] for k in n["kernels"] if k["name"].startswith("winograd_input"))
                  for n in nodes}
        return {node: c for node, c in counts.items() if c > 0}

    whole, banded = winograd_nodes(None), winograd_nodes(1_100_000)
    assert set(banded) == set(whole) and set(whole.values()) == {1}, (whole, banded)  # none left for a direct conv
    assert max(banded.values()) >= 2, banded  # the large ones in bands
    assert _rel(got, _run(model, native.load("cpu"))) <= 1e-4


def test_a_tensor_above_one_buffer_sends_its_node_to_the_cpu(tiny_export: Path,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    model = tiny_export / "vae_decoder.tflite"
    delegate = _opencl(400_000, log_level="warning")
    got = _run(model, delegate)
    err = capfd.readouterr().err
    assert "-byte tensor is above the opencl device's 400000-byte limit for one kernel operand" in err
    stats = native.stats(delegate)
    assert stats["partitions"] > 1 and stats["declined_nodes"] > 0, stats
    assert _rel(got, _run(model, native.load("cpu"))) <= 1e-4


@pytest.mark.parametrize("value", ["max_alloc_bytes=0", "max_alloc_bytes=", "max_alloc=5", "max_alloc_bytes=1e9"])
def test_the_limit_option_is_validated(value: str) -> None:
    with pytest.raises(native.NativeDelegateError, match=f"option opencl_limits='{value}' is malformed"):
        native.load("opencl", opencl_limits=value)


@pytest.mark.parametrize(("backend", "limit"), [("gl", "gl_limits=storage_block_bytes"),
                                                ("opencl", "opencl_limits=max_alloc_bytes")])
def test_half_storage_fits_what_float32_does_not(tiny_export: Path, backend: str, limit: str) -> None:
    """With activations_fp16 a computed tensor takes half its float32 bytes on the device, and the claim check counts
    those: the tiny VAE decoder's 512 KiB float32 tensors (256 KiB as half) with a 300 KiB storage block or buffer
    run on the GPU, one partition. SD1.5's VAE at 512 x 512 with 128 MiB blocks (phones) kept two convs of a 256 MiB
    float32 tensor on the CPU although it is 128 MiB as half: 6.1 s a decode on the H200 instead of 0.06."""
    model = tiny_export / "vae_decoder.tflite"
    key, name = limit.split("=")
    options = {key: f"{name}={300 * 1024}", "log_level": "error"}
    assert 300 * 1024 < _largest_tensor_bytes(model) <= 2 * 300 * 1024
    full = native.load(backend, cache_dir="none", gemm_autotune=False, **options)
    _run(model, full)
    assert native.stats(full)["declined_nodes"] > 0  # float32: the largest tensors' nodes on the CPU
    half = native.load(backend, cache_dir="none", gemm_autotune=False, activations_fp16=True, **options)
    got = _run(model, half)
    stats = native.stats(half)
    assert (stats["partitions"], stats["declined_nodes"]) == (1, 0), stats
    assert _rel(got, _run(model, native.load("cpu"))) <= 6e-3  # test_act_half_models.py's VAE bound
