"""GL ES 3.1 guarantees only 16 MiB per storage block (GL_MAX_SHADER_STORAGE_BLOCK_SIZE), and phones report from
128 MiB up; SD's arenas are larger (the unfused b2 UNet's 2.1 GB did not load on NVIDIA's GL). The arena is therefore
bound per kernel argument as a range around the tensor (glBindBufferRange at the aligned offset, the element offset
rebased), and a node with a tensor larger than one binding can address runs on the CPU kernels instead of failing
the load. llvmpipe plays the small device through gl_limits=storage_block_bytes=N (capped, never raised)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from sdlite import native


def _run(model: Path, delegate) -> tuple[list[np.ndarray], Interpreter]:
    interp = Interpreter(model_path=str(model), experimental_delegates=[delegate])
    interp.allocate_tensors()
    rng = np.random.default_rng(7)
    for d in interp.get_input_details():
        if d["dtype"] == np.float32:
            interp.set_tensor(d["index"], rng.standard_normal(d["shape"]).astype(np.float32))
        else:
            interp.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()], interp


def _rel(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.abs(g - w).max() / (np.abs(w).max() + 1e-12)) for g, w in zip(got, want, strict=True))


def _largest_tensor_bytes(model: Path) -> int:
    interp = Interpreter(model_path=str(model))
    return max(int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize for t in interp.get_tensor_details())


# Half activation storage (activations_fp16) halves the arena and every tensor, so its runs take half the block: the
# same ranges, with offsets in halves where a kernel reads one parameter as float and as half (gpu::Arg::elem_bytes;
# without it the ranges started at the wrong place and llvmpipe wrote outside the buffer). Its parity bound is
# test_act_half_models.py's.
STORAGE = [pytest.param(False, 1, 1e-4, id="float"), pytest.param(True, 2, 6e-3, id="half")]


@pytest.mark.parametrize(("act_half", "shrink", "bound"), STORAGE[:1])  # half: no block both above the arena
def test_an_arena_above_the_storage_block_size_is_bound_in_ranges(tiny_export: Path, act_half: bool, shrink: int,
                                                                  bound: float) -> None:  # and every tensor
    """The tiny UNet's arena (~350 KB) above a 300 KiB block, every tensor below it: one partition, nothing declined,
    the CPU backend's numbers. Before, the arena's creation failed the load ("exceeds this driver's
    GL_MAX_SHADER_STORAGE_BLOCK_SIZE")."""
    model = tiny_export / "unet.tflite"
    limit = 300 * 1024 // shrink
    assert _largest_tensor_bytes(model) // shrink < limit - 64
    gl = native.load("gl", gl_limits=f"storage_block_bytes={limit}", activations_fp16=act_half)
    got, _ = _run(model, gl)
    stats = native.stats(gl)
    assert stats["max_arena_bytes"] > limit, stats["max_arena_bytes"]  # the arena is bound in ranges
    assert stats["partitions"] == 1 and stats["declined_nodes"] == 0
    want, _ = _run(model, native.load("cpu"))
    assert _rel(got, want) <= bound


@pytest.mark.parametrize(("act_half", "shrink", "bound"), STORAGE)
@pytest.mark.parametrize("limit", [64 * 1024, 300 * 1024])
def test_a_tensor_above_one_binding_sends_its_node_to_the_cpu(tiny_fused_winograd_models: Path, limit: int,
                                                               act_half: bool, shrink: int, bound: float,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    """The fused + Winograd F4 UNet with blocks smaller than some of its tensors: those nodes stay on the CPU (TFLite's
    kernels, or the delegate's CPU kernels for Sd* ops) with the reason in the log, the model loads and runs, and the
    outputs match the CPU backend."""
    model = tiny_fused_winograd_models / "unet.tflite"
    gl = native.load("gl", gl_limits=f"storage_block_bytes={limit // shrink}", log_level="warning",
                     activations_fp16=act_half)
    got, _ = _run(model, gl)
    stats = native.stats(gl)
    err = capfd.readouterr().err
    assert "-byte limit for one kernel operand" in err
    assert stats["partitions"] > 1
    # with 64 KiB blocks the GPU partitions' arena is still bound in ranges; with 300 KiB it fits one block
    assert (stats["max_arena_bytes"] > limit // shrink) == (limit == 64 * 1024), stats["max_arena_bytes"]
    want, _ = _run(model, native.load("cpu"))
    assert _rel(got, want) <= bound


def test_the_limit_option_is_validated() -> None:
    with pytest.raises(native.NativeDelegateError, match="storage_block_bytes"):
        native.load("gl", gl_limits="storage_block_bytes=0")


def test_half_storage_ranges_of_the_plain_unet(tiny_export: Path) -> None:
    """The unfused UNet (its BATCH_MATMULs read a half B through the same parameter as float weights, the GEMMs' A
    and C likewise) with half storage and blocks below its arena: the ranges start where the offsets in halves say
    (before, relative error 0.6 and llvmpipe writing outside the buffer)."""
    model = tiny_export / "unet.tflite"
    limit = 136 * 1024
    gl = native.load("gl", gl_limits=f"storage_block_bytes={limit}", activations_fp16=True, log_level="error")
    got, _ = _run(model, gl)
    assert native.stats(gl)["max_arena_bytes"] > limit
    want, _ = _run(model, native.load("cpu"))
    assert _rel(got, want) <= 6e-3


def test_winograd_operands_above_one_binding_run_as_direct_convolutions(tiny_export: Path, tmp_path: Path) -> None:
    """A Winograd conv's transformed filter U (a^2 / 9 x the filter's bytes: SD1.5's 1280-channel F4 U is 236 MB) and
    its V / M are kernel operands the model does not list, so the claim-time tensor check cannot see them: on a GL
    device whose storage block is smaller (128 MiB on many phones) the first invoke failed ("a 1048576-byte buffer
    exceeds this driver's GL_MAX_SHADER_STORAGE_BLOCK_SIZE"; the fused + Winograd SD1.5 UNet likewise on the H200 with
    128 and 256 MiB blocks). Such a conv runs as the implicit-GEMM convolution, still on the GPU; the smaller ones
    stay Winograd convs."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_file

    model = tmp_path / "vae_decoder.tflite"
    optimize_file(tiny_export / "vae_decoder.tflite", model, GraphOptions(fuse=True, winograd="6"))
    limit = 600 * 1024  # above every tensor of the model, below its largest U (1 MiB: 64 x 64 x 64 floats)
    assert _largest_tensor_bytes(model) < limit - 64
    profile = tmp_path / "profile.json"
    gl = native.load("gl", gl_limits=f"storage_block_bytes={limit}", profile_path=str(profile), gemm_autotune=False)
    got, _ = _run(model, gl)
    stats = native.stats(gl)
    assert (stats["partitions"], stats["declined_nodes"], stats["host_fallback_nodes"]) == (1, 0, 0), stats
    kernels = {k["name"] for n in json.loads(profile.read_text())["nodes"] for k in n["kernels"]}
    assert any(k.startswith("conv_t") for k in kernels), kernels  # the large ones: direct
    assert any(k.startswith("winograd_output_f6") for k in kernels), kernels  # the small ones: still Winograd
    want, _ = _run(model, native.load("cpu"))
    assert _rel(got, want) <= 1e-4


@pytest.mark.parametrize("act_half", [False, True], ids=["float", "half"])
def test_winograd_v_and_m_above_one_binding_run_in_bands(tiny_export: Path, tmp_path: Path, act_half: bool) -> None:
    """With storage blocks above every tensor of the tiny F6 VAE decoder and above the 32-channel convs' U but below
    their V (64 x 121 tiles x 32 channels, float32 whatever the activation storage), those convs stay Winograd convs
    and run their three launches per band of tiles (they ran as direct convolutions before: SD1.5's VAE at 512 x 512
    has 242 MB F6 V per 128-channel conv, above a phone's 128 MiB block); the CPU backend's numbers."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_file

    model = tmp_path / "vae_decoder.tflite"
    optimize_file(tiny_export / "vae_decoder.tflite", model, GraphOptions(fuse=True, winograd="6"))
    limit = 700 * 1024
    assert _largest_tensor_bytes(model) < limit - 64
    profile = tmp_path / "profile.json"
    gl = native.load("gl", gl_limits=f"storage_block_bytes={limit}", profile_path=str(profile), gemm_autotune=False,
                     activations_fp16=act_half)
    got, _ = _run(model, gl)
    stats = native.stats(gl)
    assert (stats["partitions"], stats["declined_nodes"], stats["host_fallback_nodes"]) == (1, 0, 0), stats
    nodes = json.loads(profile.read_text())["nodes"]
    bands = [sum(k["launches"] for k in n["kernels"] if k["name"].startswith("winograd_input_f6")) for n in nodes]
    assert max(bands) >= 2 and 1 in bands, bands  # the large convs in bands, the small ones whole
    want, _ = _run(model, native.load("cpu"))
    assert _rel(got, want) <= (6e-3 if act_half else 1e-4)


def test_split_k_partials_above_one_binding_are_not_planned(tiny_fused_export: Path) -> None:
    """Split-K partials (splits x M x N float32, arena scratch) are one kernel operand the model does not list: a
    split plan whose partials exceeded the storage block read and wrote past their binding (llvmpipe: relative error
    0.04-0.29 with 16-way splits forced; the SD1.5 UNet b2 on the H200 with 256 MiB blocks: 5.6e-2). Such a GEMM now
    keeps K whole. The fused UNet (no Winograd scratch) with blocks of 0.6 x its largest tensor: the nodes with larger
    tensors run on the CPU, the GEMMs left on the GPU keep every node's scratch within one block."""
    model = tiny_fused_export / "unet.tflite"
    limit = int(_largest_tensor_bytes(model) * 0.6) // 16 * 16
    gl = native.load("gl", gl_limits=f"storage_block_bytes={limit}", gemm_tiles="64x64/16", log_level="error")
    got, _ = _run(model, gl)
    stats = native.stats(gl)
    assert stats["max_node_scratch_bytes"] <= limit, (stats, limit)
    want, _ = _run(model, native.load("cpu"))
    assert _rel(got, want) <= 1e-4


def test_a_tensor_of_exactly_the_block_size_stays_on_the_gpu(tiny_export: Path) -> None:
    """The arena's tensors start at 64-byte offsets, so where the binding alignment divides 64 (llvmpipe, NVIDIA) a
    range starts exactly at its tensor and a tensor may fill a whole block. SD's VAE decoder at 512 x 512 has tensors
    of exactly 128 MiB (half storage: 256 channels) and 256 MiB (float32), the storage block sizes phones report; the
    16-byte slack kept before sent their nodes to the CPU (H200, float32 VAE, 256 MiB blocks: one conv on the CPU
    took the decode from 43 ms to 0.76 s)."""
    model = tiny_export / "unet.tflite"
    limit = _largest_tensor_bytes(model)
    assert limit % 64 == 0
    gl = native.load("gl", gl_limits=f"storage_block_bytes={limit}", log_level="error")
    got, _ = _run(model, gl)
    stats = native.stats(gl)
    assert (stats["partitions"], stats["declined_nodes"]) == (1, 0), stats
    assert stats["max_arena_bytes"] > limit  # bound in ranges
    want, _ = _run(model, native.load("cpu"))
    assert _rel(got, want) <= 1e-4


@pytest.mark.parametrize("act_half", [False, True])
def test_a_constant_read_in_place_counts_at_its_stored_size(tiny_export: Path, act_half: bool) -> None:
    """The token embedding table is read in place by EMBEDDING_LOOKUP, in activation storage: half with
    activations_fp16, so SD1.5's 152 MB float32 table is 76 MB on the device and fits a phone's 128 MiB block, but
    the claim check counted it at its float32 bytes and left the lookup on the CPU (the text encoder in two
    partitions). The tiny table (49408 x 32, 6.3 MB) against a 4 MiB block plays it: on the GPU with half storage,
    on the CPU with float32 storage, with the reason."""
    model = tiny_export / "text_encoder.tflite"
    table = _largest_tensor_bytes(model)
    limit = 4 << 20
    assert table // 2 <= limit < table
    gl = native.load("gl", gl_limits=f"storage_block_bytes={limit}", activations_fp16=act_half, log_level="error")
    got, _ = _run(model, gl)
    stats = native.stats(gl)
    if act_half:
        assert (stats["partitions"], stats["declined_nodes"]) == (1, 0), stats["declined"]
    else:
        assert [(d["op"], d["reason"]) for d in stats["declined"]] == [
            ("EMBEDDING_LOOKUP", f"a {table}-byte tensor is above the gl device's {limit}-byte limit for one kernel "
                                 "operand")]
    want, _ = _run(model, native.load("cpu"))
    assert _rel(got, want) <= (3e-3 if act_half else 1e-4)
