"""The FUSED tiny SD models (SdAttention / SdGelu / SdGroupNorm from ``sdconvert optimize --fuse``) on the OpenCL
backend (PoCL in CI): ONE delegated partition, no CPU nodes, parity <= 1e-4 relative with the CPU interpreter
running the same fused graph (our cpu delegate executes the Sd* nodes there, TFLite the builtins)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from harness import assert_close, signature_inputs
from sdlite import native
from sdlite.tflite_info import read_model_info

MODELS = ("text_encoder", "unet", "vae_decoder", "vae_encoder")
SD_OPS = {"SdAttention", "SdGelu", "SdGroupNorm"}


@pytest.mark.parametrize("model", MODELS)
def test_fused_model_fully_delegated_and_matches_cpu(tiny_fused_export: Path, rng, model):
    path = str(tiny_fused_export / f"{model}.tflite")
    info = read_model_info(path)
    fused = {op.op_name for op in info.ops} & SD_OPS
    assert fused, f"{model}: nothing was fused"  # the test is about the fused graph

    cpu = native.load(backend="cpu")
    reference = Interpreter(model_path=path, experimental_delegates=[cpu]).get_signature_runner("serving_default")
    inputs = signature_inputs(reference, rng)
    expected = reference(**inputs)

    delegate = native.load(backend="opencl")
    runner = Interpreter(model_path=path, experimental_delegates=[delegate]).get_signature_runner("serving_default")
    runner(**inputs)
    actual = runner(**inputs)  # second invoke: same buffers, same answer
    stats = native.stats(delegate)
    assert stats["partitions"] == 1
    assert stats["claimed_nodes"] == len(info.ops)
    assert stats["declined_nodes"] == 0 and stats["declined"] == []
    assert stats["invocations"] == 2
    for name, value in expected.items():
        assert_close(actual[name], value, rtol=1e-4)


def _opencl_profile_matching_cpu(path: Path, rng, tmp_path: Path) -> dict[int, dict]:
    """Runs `path` on OpenCL with the device profile on, checks parity with the CPU delegate (rel 1e-4) and returns
    the profile's nodes by node index."""
    import json

    from ai_edge_litert.interpreter import load_delegate

    profile = tmp_path / "profile.json"
    delegate = load_delegate(str(native.delegate_path()), {"backend": "opencl", "profile_path": str(profile)})
    runner = Interpreter(model_path=str(path), experimental_delegates=[delegate]).get_signature_runner(
        "serving_default")
    inputs = signature_inputs(runner, rng)
    actual = runner(**inputs)
    cpu = native.load(backend="cpu")
    expected = Interpreter(model_path=str(path), experimental_delegates=[cpu]).get_signature_runner(
        "serving_default")(**inputs)
    for name, value in expected.items():
        assert_close(actual[name], value, rtol=1e-4)
    return {n["node"]: n for n in json.loads(profile.read_text())["nodes"]}


def test_merged_projection_slices_launch_nothing(tiny_fused_export: Path, rng, tmp_path):
    """`--fuse` merges sibling projections into one FULLY_CONNECTED + column SLICEs; on the GPU the bias-free
    merges (q/k/v, cross-attention k/v) run as one batched GEMM whose column blocks ARE the slices, and the
    biased time-embedding merge's slices are contiguous runs at batch 1 (the tiny UNet's): no SLICE launches.
    (Slices that are neither stay copies: test_opencl_aliasing.py.)"""
    path = tiny_fused_export / "unet.tflite"
    info = read_model_info(path)
    readers: dict[int, list] = {}
    for op in info.ops:
        for t in op.inputs:
            readers.setdefault(t, []).append(op)
    split = set()
    for op in info.ops:
        if op.op_name == "FULLY_CONNECTED" and (len(op.inputs) < 3 or op.inputs[2] < 0):
            rd = readers.get(op.outputs[0], [])
            if len(rd) >= 2 and all(r.op_name == "SLICE" for r in rd):
                split.update(r.index for r in rd)
    slices = [op.index for op in info.ops if op.op_name == "SLICE"]
    runs = {op.index for op in info.ops if op.op_name == "SLICE" and op.index not in split
            and all(d == 1 for d in info.tensors[op.inputs[0]].shape[:-1])}
    assert len(split) >= 6 and len(runs) >= 6 and set(slices) == split | runs  # both kinds, nothing else

    nodes = _opencl_profile_matching_cpu(path, rng, tmp_path)
    for i in slices:
        assert nodes[i]["kernels"] == [] and nodes[i]["ms"] == 0.0, (i, nodes[i])
    assert any(n["kernels"] for n in nodes.values() if n["op"] == "FULLY_CONNECTED")


def test_residual_adds_launch_nothing(tiny_fused_export: Path, rng, tmp_path):
    """Every ADD of the fused tiny UNet is a residual of an FC / CONV_2D output (ResNet outputs, time-embedding
    adds, transformer residuals) and is folded into that op's epilogue, the first ResNet's time-embedding add
    included: `--fuse` hoists the merged time projection (and the SiLU it reads, which the export places after that
    ResNet's conv1) to just after the time embedding, so its SLICE exists before every conv that adds it."""
    path = tiny_fused_export / "unet.tflite"
    info = read_model_info(path)
    producer = {t: op for op in info.ops for t in op.outputs}
    adds = [op for op in info.ops if op.op_name == "ADD"]
    temb = [op for op in adds if sorted(producer[t].op_name for t in op.inputs) == ["CONV_2D", "SLICE"]]
    late = [op.index for op in temb
            if max(producer[t].index for t in op.inputs if producer[t].op_name == "SLICE")
            > max(producer[t].index for t in op.inputs if producer[t].op_name == "CONV_2D")]
    assert len(adds) > 20 and len(temb) >= 4 and late == []

    nodes = _opencl_profile_matching_cpu(path, rng, tmp_path)
    assert [op.index for op in adds if nodes[op.index]["kernels"]] == []


def test_gated_gelus_launch_nothing(tiny_fused_export: Path, rng, tmp_path):
    """Every SdGelu(gated) of the fused tiny UNet (GEGLU: its feed-forward input) reads an FC output and is folded
    into that FC's epilogue: the GELU node launches nothing and the whole UNet still matches the CPU delegate."""
    path = tiny_fused_export / "unet.tflite"
    info = read_model_info(path)
    producer = {t: op for op in info.ops for t in op.outputs}
    gelus = [op for op in info.ops if op.op_name == "SdGelu"]
    assert len(gelus) == 7 and all(producer[op.inputs[0]].op_name == "FULLY_CONNECTED" for op in gelus)

    nodes = _opencl_profile_matching_cpu(path, rng, tmp_path)
    assert [nodes[op.index]["kernels"] for op in gelus] == [[]] * len(gelus)
    assert all(nodes[producer[op.inputs[0]].index]["kernels"] for op in gelus)  # the FC's GEMM writes the product
