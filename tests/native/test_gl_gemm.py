"""GEMM-shaped ops on the GL backend (llvmpipe in CI) vs float64 NumPy, where GL differs from OpenCL: half-stored
weights read as 32-bit words, and devices smaller than llvmpipe. GL ES 3.1 guarantees only 16 KiB of shared memory,
128 invocations per work-group and 4 storage blocks per compute shader, and phones sit near those minimums; the
delegate option gl_limits makes llvmpipe report such limits, and the planner must then pick only kernels the device
can run (never a failed launch). The tests every GPU backend shares (tile configs, split-K, convs, Winograd, tuner)
are in test_gpu_gemm.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import load_delegate

from harness import assert_close, make_interpreter, run
from sdlite import native
from test_opencl_layer_norm_fold import _model as layer_norm_model, _want as layer_norm_want
from tflite_gemm_models import conv2d_model, conv2d_ref, fully_connected_model, fully_connected_ref


def _run(model: bytes, inputs: dict[str, np.ndarray], **opts) -> np.ndarray:
    result = run(model, inputs, backend="gl", **opts)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert result.stats["partitions"] == 1
    return result.outputs["y"]


def _kernels(profile: Path) -> list[str]:
    return [k["name"] for n in json.loads(profile.read_text())["nodes"] for k in n["kernels"]]


@pytest.mark.parametrize("n,k", [(72, 96), (33, 37)])
def test_weights_fp16_reads_half_words(rng, n, k):
    """Half-stored packed weights (B as 32-bit words, unpackHalf2x16): exactly the fp32 GEMM on half-rounded
    weights; odd N * K puts the last weight in the low half of a partial word."""
    x = rng.standard_normal((1, 100, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    got = _run(fully_connected_model(x.shape, w, b), {"x": x}, weights_fp16=True)
    assert_close(got, fully_connected_ref(x, w.astype(np.float16).astype(np.float32), b), rtol=1e-5)
    fp32 = fully_connected_ref(x, w, b)
    err = float(np.abs(got - fp32).max() / np.abs(fp32).max())
    assert 1e-5 < err < 2e-3, err  # it really is half storage


def test_a_16_kib_device_gets_no_kernel_with_more_local_memory(rng, tmp_path):
    """A few rows plan on the skinny gemm_t16x64 (20736 bytes of shared memory); with the ES 3.1 minimum of 16 KiB the
    same FC plans on a tile config that fits (gemm_t128x128, 16896 bytes, is out too) and computes the same."""
    x = rng.standard_normal((1, 9, 200)).astype(np.float32)
    w = rng.standard_normal((256, 200)).astype(np.float32)
    b = rng.standard_normal(256).astype(np.float32)
    model, want = fully_connected_model(x.shape, w, b, "relu"), fully_connected_ref(x, w, b, "relu")
    for limits, skinny in ((None, True), ("shared_bytes=16384", False)):
        profile = tmp_path / f"{skinny}.json"
        opts = {"gl_limits": limits} if limits else {}
        got = _run(model, {"x": x}, profile_path=str(profile), gemm_autotune=False, **opts)
        assert_close(got, want, rtol=1e-5)
        kernels = _kernels(profile)
        assert kernels and ("gemm_t16x64" in kernels) == skinny, kernels
        assert "gemm_t128x128" not in kernels


def test_a_16_kib_device_tunes_only_configs_that_fit(rng):
    """The tuner's candidates come from the same planner: every one it launches must fit the device (a failed launch
    would fail the invoke)."""
    x = rng.standard_normal((1, 300, 600)).astype(np.float32)
    w = rng.standard_normal((200, 600)).astype(np.float32)
    got = _run(fully_connected_model(x.shape, w, None), {"x": x}, gemm_autotune=True,
               gl_limits="shared_bytes=16384,invocations=128")
    assert_close(got, fully_connected_ref(x, w, None), rtol=1e-5)


def test_a_128_invocation_device_runs_the_128_thread_configs(rng, tmp_path):
    """GL ES 3.1 guarantees 128 invocations per work-group: FCs and convs then plan on the 16 x 8 instances (n128), the
    split-K reduce launches 16 x 8 work-groups, and the results match."""
    x = rng.standard_normal((16, 4096)).astype(np.float32)  # one output tile, K = 4096: the cost model splits K
    w = rng.standard_normal((16, 4096)).astype(np.float32)
    profile = tmp_path / "fc.json"
    got = _run(fully_connected_model(x.shape, w, None), {"x": x}, profile_path=str(profile), gemm_autotune=False,
               gl_limits="invocations=128")
    assert_close(got, fully_connected_ref(x, w, None), rtol=1e-5)
    kernels = _kernels(profile)
    assert kernels[0].startswith("gemm_t") and kernels[0].endswith("n128") and kernels[1:] == ["gemm_splitk_reduce"]
    xc = rng.standard_normal((1, 12, 10, 32)).astype(np.float32)
    wc = rng.standard_normal((40, 3, 3, 32)).astype(np.float32)
    bc = rng.standard_normal(40).astype(np.float32)
    profile = tmp_path / "conv.json"
    got = _run(conv2d_model(xc.shape, wc, bc), {"x": xc}, profile_path=str(profile), gemm_autotune=False,
               gl_limits="invocations=128")
    assert_close(got, conv2d_ref(xc, wc, bc), rtol=1e-5)
    (kernel,) = _kernels(profile)
    assert kernel.startswith("conv_t") and kernel.endswith("n128"), kernel


def test_a_forced_config_the_device_cannot_hold_is_declined_with_the_reason(rng):
    x = rng.standard_normal((1, 20, 64)).astype(np.float32)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    result = run(fully_connected_model(x.shape, w, None), {"x": x}, backend="gl", gemm_tiles="128x128",
                 gl_limits="shared_bytes=16384")
    assert result.stats["claimed_nodes"] == 0
    (declined,) = result.stats["declined"]
    assert declined["reason"] == ("gemm_tiles config does not fit the device: gemm_t128x128 needs 16896 bytes of "
                                  "local memory, the device has 16384"), declined
    assert_close(result.outputs["y"], fully_connected_ref(x, w, None), rtol=1e-5)  # ran on the CPU instead


def test_kernels_above_the_storage_block_limit_run_compact_or_give_way(rng, tmp_path):
    """A shader's storage blocks are its buffers plus their vec4 / packed-half views (GLSL declares one block per
    element type of a binding): in float storage the LayerNorm twins (gemm_t*_ln: their column sums sit behind the
    bias, in its buffer) and the tiled GEMMs and convs declare 8, the skinny GEMM 6, and the compact variants (an
    aligned float4 read as four floats, no vec4 views; gpu/dialect/prelude.h) 6; with half activation storage the
    twins declare 10, compact 8. Many phones allow 8 (counting every stage of the program). Down to 6 (float) or 8
    (half) the LayerNorm stays inside the GEMM (its compact twin below 8 in float, the same numbers); below that it is
    its own launch and the FC runs on gemm_f32; with 5 the conv runs on the untiled conv2d_igemm."""
    model, gamma, beta, w, b = layer_norm_model(rng, 200, 64, 48, True, False)
    xv = (rng.standard_normal((200, 1, 64)) + 3.0).astype(np.float32)
    outputs = []
    for half, blocks, fc_kernel in ((False, 9, "gemm_t64x64_ln"), (False, 8, "gemm_t64x64_ln"),
                                    (False, 6, "gemm_t64x64_ln"), (False, 5, "gemm_f32"),
                                    (True, 10, "gemm_t64x64_ln"), (True, 8, "gemm_t64x64_ln"), (True, 7, "gemm_f32")):
        profile = tmp_path / f"ln{blocks}{half}.json"
        delegate = native.load(backend="gl", profile_path=str(profile), gemm_autotune=False,
                               gl_limits=f"storage_blocks={blocks}", activations_fp16=half)
        out = make_interpreter(model, delegate).get_signature_runner("serving_default")(x=xv)
        assert native.stats(delegate)["declined_nodes"] == 0
        assert_close(out["ff"][0], layer_norm_want(xv, gamma, beta, w, b, False), rtol=3e-3 if half else 1e-5)
        nodes = json.loads(profile.read_text())["nodes"]
        assert [k["name"] for n in nodes if n["op"] == "FULLY_CONNECTED" for k in n["kernels"]] == [fc_kernel], blocks
        outputs.append(out["ff"])
    # compact: the same sums (float 8 blocks normal, 6 compact; half 10 normal, 8 compact)
    assert np.array_equal(outputs[0], outputs[1]) and np.array_equal(outputs[0], outputs[2])
    assert np.array_equal(outputs[4], outputs[5])
    xc = rng.standard_normal((1, 8, 8, 16)).astype(np.float32)
    wc = rng.standard_normal((8, 3, 3, 16)).astype(np.float32)
    for blocks, conv_kernel in ((6, "conv_t64x64"), (5, "conv2d_igemm")):
        profile = tmp_path / f"conv{blocks}.json"
        got = _run(conv2d_model(xc.shape, wc, None), {"x": xc}, profile_path=str(profile), gemm_autotune=False,
                   gl_limits=f"storage_blocks={blocks}")  # untuned: the tuner may time 64x64n128 faster
        assert_close(got, conv2d_ref(xc, wc, None), rtol=1e-5)
        assert _kernels(profile) == [conv_kernel]


def test_half_storage_gemms_stay_tiled_with_8_storage_blocks(rng, tmp_path):
    """With half activation storage a tiled GEMM reads A and writes C both as floats and as packed halves: 10 blocks,
    so on a device allowing 8 only the skinny GEMM was left (the SD1.5 UNet with the phone preset on the H200 at that
    limit: 73.7 -> 149.4 ms a step; with the compact variants 73.4 ms, BENCHMARKS.md). Its compact variant has 8: the
    FC stays on gemm_t64x64, with the same numbers."""
    x = rng.standard_normal((1, 1024, 320)).astype(np.float32)
    w = (rng.standard_normal((640, 320)) / 20).astype(np.float32)
    model = fully_connected_model(x.shape, w, None)
    got = {}
    for blocks in (None, 8):
        profile = tmp_path / f"fc{blocks}.json"
        limits = {"gl_limits": f"storage_blocks={blocks}"} if blocks else {}
        got[blocks] = _run(model, {"x": x}, profile_path=str(profile), activations_fp16=True, gemm_autotune=False,
                           **limits)
        assert _kernels(profile) == ["gemm_t64x64"], blocks
    assert np.array_equal(got[None], got[8])
    assert_close(got[8], fully_connected_ref(x, w, None), rtol=3e-3)


@pytest.mark.parametrize("value", ["shared_bytes=0", "shared=16384", "invocations=128,", "compute_units", "pbuffer=2",
                                   "pbuffer=0"])
def test_gl_limits_is_validated(value):
    with pytest.raises(ValueError, match=f"option gl_limits='{value}' is malformed"):
        load_delegate(str(native.delegate_path()), {"backend": "gl", "gl_limits": value})
