"""OpenCL backend end to end (PoCL in CI): each tiny SD model runs as ONE delegated partition with no
CPU nodes, and matches the plain CPU interpreter to <= 1e-4 relative."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from harness import assert_close, signature_inputs
from sdlite import native

MODELS = ("text_encoder", "unet", "vae_decoder", "vae_encoder")


@pytest.mark.parametrize("model", MODELS)
def test_model_fully_delegated_and_matches_cpu(tiny_export: Path, rng, model):
    path = str(tiny_export / f"{model}.tflite")
    manifest = json.loads((tiny_export / "manifest.json").read_text())
    expected_ops = manifest["models"][model]["num_ops"]
    reference = Interpreter(model_path=path).get_signature_runner("serving_default")
    inputs = signature_inputs(reference, rng)
    expected = reference(**inputs)

    delegate = native.load(backend="opencl")
    runner = Interpreter(model_path=path, experimental_delegates=[delegate]).get_signature_runner("serving_default")
    actual = runner(**inputs)
    actual = runner(**inputs)  # second invoke: buffers reused, same answer
    stats = native.stats(delegate)
    assert stats["partitions"] == 1
    assert stats["claimed_nodes"] == expected_ops
    assert stats["declined_nodes"] == 0 and stats["declined"] == []
    assert stats["invocations"] == 2
    assert stats["max_arena_bytes"] > 0
    for name, value in expected.items():
        assert_close(actual[name], value, rtol=1e-4)
