"""GL orders a host write (glBufferSubData) after earlier shader *writes* to the buffer through glMemoryBarrier, but
nothing orders it after earlier shader *reads*: refilling a buffer that a launch still reads can change what that
launch sees. The weight set-up refills one staging buffer per weight while the previous weight's packing / Winograd
transform may still run, and a partition refills its inputs after the previous invoke's launches. On the H200 the
SD1.5 UNet b2 (fused, and fused + Winograd) came out 1e-2 .. 8e-2 wrong on GL in about half of the processes; with a
glFinish before such a refill, right in every one (docs/benchmarks-history/2026-11-30-h200-gl-weight-set-up-race.md).

llvmpipe orders these writes itself, so the wrong numbers cannot be reproduced here; what is asserted is that the
backend waits where the hazard is (stats ``upload_waits``: host writes that first waited for the launches still
reading their buffer) and nowhere else: during the first invoke's set-up, and once per later invoke (its input
refill after the previous invoke; one wait covers every launch before it, so the other inputs need none). The set-up
takes two staging buffers in turn and waits on a fence after the launch that read the one it refills, never for
every launch (``upload_drains``: waits that did, glFinish): its GPU keeps transforming the last weight meanwhile."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from harness import assert_close, signature_inputs
from sdlite import native


def _invokes(model: Path, inputs: dict, backend: str, times: int) -> tuple[list[dict], list[int]]:
    delegate = native.load(backend=backend, gemm_autotune=False, cache_dir="none")
    runner = Interpreter(model_path=str(model), experimental_delegates=[delegate]).get_signature_runner(
        "serving_default")
    outputs, waits = [], []
    for _ in range(times):
        outputs.append({k: v.copy() for k, v in runner(**inputs).items()})
        stats = native.stats(delegate)
        waits.append((stats["upload_waits"], stats["upload_drains"]))
    return outputs, waits


def test_refills_wait_for_the_launches_reading_them(tiny_export: Path, tiny_fused_winograd_models: Path,
                                                    rng) -> None:
    model = tiny_fused_winograd_models / "unet.tflite"
    reference = Interpreter(model_path=str(tiny_export / "unet.tflite")).get_signature_runner("serving_default")
    inputs = signature_inputs(reference, rng, timestep=500.0)
    outputs, counts = _invokes(model, inputs, "gl", 3)
    waits, drains = zip(*counts)
    # the set-up's staging refills: one per weight made on the device after the first two (tens in the tiny UNet),
    # each on a fence: no drain
    assert waits[0] >= 10 and drains[0] == 0, counts
    # each later invoke's input refill waits once, for everything (nothing uploaded during the invoke left a fence)
    assert [b - a for a, b in zip(waits, waits[1:])] == [1, 1], counts
    assert [b - a for a, b in zip(drains, drains[1:])] == [1, 1], counts
    expected = reference(**inputs)
    for out in outputs:
        for name, value in expected.items():
            assert_close(out[name], value, rtol=1e-4)


def test_opencl_needs_no_wait(tiny_export: Path, tiny_fused_winograd_models: Path, rng) -> None:
    """OpenCL's in-order queue runs a write after every command enqueued before it: nothing to count."""
    model = tiny_fused_winograd_models / "unet.tflite"
    inputs = signature_inputs(Interpreter(model_path=str(tiny_export / "unet.tflite")).get_signature_runner(
        "serving_default"), rng, timestep=500.0)
    _, counts = _invokes(model, inputs, "opencl", 1)
    assert counts == [(-1, -1)]


def test_a_large_weight_goes_up_through_the_mapped_range(tiny_export: Path) -> None:
    """GL copies uploads of 4 MiB or more into the mapped buffer range on all host cores (GlDevice::Upload); the tiny
    text encoder's token embedding is such a weight, read by the first op: a wrong copy changes every output."""
    model = tiny_export / "text_encoder.tflite"
    reference = Interpreter(model_path=str(model))
    largest = max(int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize for t in reference.get_tensor_details())
    assert largest >= 4 << 20, largest  # the premise: a constant above the mapped-copy threshold
    runner = reference.get_signature_runner("serving_default")
    (ids_name,) = runner.get_input_details()
    vocab = max(int(t["shape"][0]) for t in reference.get_tensor_details() if len(t["shape"]) == 2)
    inputs = {ids_name: np.linspace(0, vocab - 1, 77).astype(np.int32)[None]}  # rows from the whole table
    outputs, _ = _invokes(model, inputs, "gl", 2)
    for out in outputs:
        for name, value in runner(**inputs).items():
            assert_close(out[name], value, rtol=1e-4)
