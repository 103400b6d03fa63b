"""GL devices at a phone's limits. The phone preset (weights_fp16 + activations_fp16) at GL ES 3.1's minimums of 16
KiB of shared memory and 128 invocations per work-group, 8 storage blocks per shader (many phones' combined limit;
the delegate needs 5) and 128 MiB storage blocks: every tiny model and variant runs as one partition with no node
declined and nothing on the CPU, near the CPU interpreter's float32 answer (the tolerances of
test_act_half_models.py); the device refuses any launch above its limits, so every kernel fits them. Before
gemm_f32 and conv2d_igemm took 16 x 8 work-groups (two rows per work-item) and attention had the dyn128 tiling, the
convs of Ci = 4 (the UNet's and VAE's conv_in), the Winograd convs' direct fallbacks and the VAE's 512-wide attention
head went to the CPU there (the SD1.5 UNet in 2 partitions, the VAE in 3). The two-stage GroupNorm and the row-wise
attention tilings r40s / r80s run there too (before, one work-group per group and dyn128). Also: a display without
EGL_KHR_surfaceless_context (the Android emulator's)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from attention_cases import profile_attention
from harness import HALF_STORAGE_RTOL, assert_close, run, signature_inputs
from sdlite import native
from tflite_gemm_models import conv2d_model, conv2d_ref, fully_connected_model, fully_connected_ref

PHONE_GL = "shared_bytes=16384,invocations=128,storage_blocks=8,storage_block_bytes=134217728"
MODELS = ("text_encoder", "unet", "vae_decoder")


@pytest.mark.parametrize("variant", ["plain", "fused", "f4"])
def test_phone_preset_at_phone_gl_limits_runs_as_one_partition(tiny_export: Path, tiny_variant_folders, rng, tmp_path,
                                                               variant):
    for model in MODELS:
        reference = Interpreter(model_path=str(tiny_export / f"{model}.tflite")).get_signature_runner(
            "serving_default")
        inputs = signature_inputs(reference, rng, timestep=999.0)
        expected = reference(**inputs)
        profile = tmp_path / f"{model}.json"
        delegate = native.load(backend="gl", gemm_autotune=False, weights_fp16=True, activations_fp16=True,
                               gl_limits=PHONE_GL, profile_path=str(profile))
        actual = Interpreter(model_path=str(tiny_variant_folders[variant] / f"{model}.tflite"),
                             experimental_delegates=[delegate]).get_signature_runner("serving_default")(**inputs)
        stats = native.stats(delegate)
        assert (stats["partitions"], stats["declined_nodes"], stats["host_fallback_nodes"]) == (1, 0, 0), \
            (model, stats["declined"])
        nodes = json.loads(profile.read_text())["nodes"]
        assert any(k for n in nodes for k in n["kernels"]), model
        for name, value in expected.items():
            loose = model == "vae_decoder" or (model == "unet" and variant == "plain")
            assert_close(actual[name], value, rtol=6e-3 if loose else HALF_STORAGE_RTOL)


def test_naive_gemm_and_conv_with_128_invocations(rng, tmp_path):
    """gemm_f32 (a GEMM whose tiled kernels do not fit 4 KiB of shared memory) and conv2d_igemm (Ci = 4: no tiled
    conv) on 16 x 16 work-groups, and on 16 x 8 where the device allows 128 invocations: the same sums in the same
    order, bit for bit, at ragged M / N edges (37 rows: three row tiles, the last partial in both halves)."""
    x = rng.standard_normal((1, 37, 40)).astype(np.float32)
    w = rng.standard_normal((23, 40)).astype(np.float32)
    b = rng.standard_normal(23).astype(np.float32)
    xc = rng.standard_normal((1, 7, 5, 4)).astype(np.float32)
    wc = rng.standard_normal((9, 3, 3, 4)).astype(np.float32)
    cases = ((fully_connected_model(x.shape, w, b), {"x": x}, fully_connected_ref(x, w, b), "gemm_f32"),
             (conv2d_model(xc.shape, wc, None), {"x": xc}, conv2d_ref(xc, wc, None), "conv2d_igemm"))
    for model, inputs, want, kernel in cases:
        got = []
        for limits in ("shared_bytes=4096", "shared_bytes=4096,invocations=128"):
            profile = tmp_path / "profile.json"
            result = run(model, inputs, backend="gl", gemm_autotune=False, gl_limits=limits, profile_path=str(profile))
            assert result.stats["declined_nodes"] == 0, (limits, result.stats["declined"])
            assert [k["name"] for n in json.loads(profile.read_text())["nodes"] for k in n["kernels"]] == [kernel]
            assert_close(result.outputs["y"], want, rtol=1e-5)
            got.append(result.outputs["y"])
        assert np.array_equal(got[0], got[1]), kernel


@pytest.mark.parametrize("variant", ["flash", "partial_softmax"])
@pytest.mark.parametrize("head_dim", [80, 512])
def test_attention_at_gl_es_minimums_runs_the_small_tiled_kernels(rng, tmp_path, variant, head_dim):
    """At 16 KiB of shared memory and 128 invocations the tiled attention kernels for SD's head dims do not fit (dyn:
    32 KB, 256 work-items); dyn128 (15 KB, 128) does, at any head dim up to 512: the VAE's 512-wide head, which the
    row-wise fallback (up to 256) could not take, stays on the GPU (profile_attention checks the answer)."""
    p = profile_attention(tmp_path, rng, 100, 100, 1, head_dim, variant=variant, backend="gl",
                          gl_limits="shared_bytes=16384,invocations=128")
    assert p.kernels == (["attn_flash_dyn128"] if variant == "flash" else ["attn_stats_dyn128", "attn_pv_dyn128"])


@pytest.mark.parametrize("variant", ["flash", "partial_softmax"])
@pytest.mark.parametrize("head_dim,tiling", [(40, "r40s"), (80, "r80s")])
def test_long_self_attention_at_gl_es_minimums_runs_row_wise(rng, tmp_path, variant, head_dim, tiling):
    """The UNet's 64x64 (d40) and 32x32 (d80) self-attentions: at 16 KiB and 128 invocations r40 (22 KB) and r80
    (43 KB) do not fit; r40s / r80s (11 KB, 64 work-items) do, instead of dyn128. 300 keys: past the row-wise
    tilings' 256-key floor, a partial last key tile."""
    p = profile_attention(tmp_path, rng, 300, 300, 2, head_dim, variant=variant, backend="gl",
                          gl_limits="shared_bytes=16384,invocations=128")
    assert p.kernels == ([f"attn_flash_{tiling}"] if variant == "flash" else
                         [f"attn_stats_{tiling}", f"attn_pv_{tiling}"])


@pytest.mark.parametrize("variant", ["fused", "f4"])
def test_a_work_group_x_size_below_the_invocation_limit(tiny_export: Path, tiny_variant_folders, rng, variant):
    """GL ES 3.1 requires 128 for both GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS and GL_MAX_COMPUTE_WORK_GROUP_SIZE's x,
    and lets a device pair more invocations with a 128-wide x. The 1-D launches size their work-groups by the lower of
    the two: with group_size_x=128 every tiny model runs as one partition (a 256- or 512-wide 1-D work-group, as the
    two-stage GroupNorm and the channels-last one launch by the invocation limit alone, was refused at launch) and
    matches the run without that limit."""
    for model in MODELS:
        path = tiny_variant_folders[variant] / f"{model}.tflite"
        inputs = signature_inputs(Interpreter(model_path=str(path)).get_signature_runner("serving_default"), rng)
        outputs = []
        for limits in ({"gl_limits": "group_size_x=128"}, {}):
            delegate = native.load(backend="gl", gemm_autotune=False, **limits)
            runner = Interpreter(model_path=str(path), experimental_delegates=[delegate]).get_signature_runner(
                "serving_default")
            outputs.append(runner(**inputs))
            stats = native.stats(delegate)
            assert (stats["partitions"], stats["declined_nodes"], stats["host_fallback_nodes"]) == (1, 0, 0), \
                (model, limits, stats["declined"])
        for name, value in outputs[1].items():
            assert_close(outputs[0][name], value, rtol=1e-4)


def test_a_display_without_surfaceless_contexts_gets_a_pbuffer(tiny_export: Path, rng, capfd):
    """The Android emulator's EGL (and some older drivers) lack EGL_KHR_surfaceless_context: a context there must be
    current on a surface. gl_limits=pbuffer=1 plays such a display: the context is made current on a 1x1 pbuffer
    (the log says so), and the text encoder computes bit for bit what it computes without one."""
    path = tiny_export / "text_encoder.tflite"
    inputs = signature_inputs(Interpreter(model_path=str(path)).get_signature_runner("serving_default"), rng)
    outputs = []
    for limits in ("pbuffer=1", None):
        delegate = native.load(backend="gl", gemm_autotune=False, log_level="info",
                               **({"gl_limits": limits} if limits else {}))
        runner = Interpreter(model_path=str(path), experimental_delegates=[delegate]).get_signature_runner(
            "serving_default")
        outputs.append(runner(**inputs))
        assert native.stats(delegate)["partitions"] == 1
        log = capfd.readouterr().err
        assert ("1x1 pbuffer" in log) == (limits is not None), log[-2000:]
    for name, value in outputs[1].items():
        assert np.array_equal(outputs[0][name], value), name


@pytest.mark.parametrize("channels_last", [True, False], ids=["rows", "groups"])
def test_large_group_norms_run_two_stage_on_128_invocations(rng, tmp_path, channels_last):
    """Groups above one chunk (4096 elements) take the two-stage GroupNorm: partials per chunk, finalize, apply. Its
    partial kernels ran on 256-wide work-groups only, so with 128 invocations every large group went to the
    one-kernel path (one work-group per group: 32 work-groups for the VAE's 512 x 512 GroupNorms). Now they run on
    128-wide work-groups there: the same kernels as with no limit, the answer within float32 rounding of numpy's.
    rows: channels last, C % 4 == 0 (group_norm_partial_rows); groups: channels first (group_norm_partial)."""
    from sdconvert.ops import group_norm as GN
    from tflite_models import group_norm_model

    shape, axis = ((1, 64, 80, 128), -1) if channels_last else ((1, 64, 48, 48), 1)
    channels = shape[axis]
    attrs = GN.GroupNormAttrs(groups=32, eps=1e-6, activation="silu", channel_axis=axis)
    x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
    gamma = rng.standard_normal(channels).astype(np.float32)
    beta = rng.standard_normal(channels).astype(np.float32)
    model = group_norm_model(shape, gamma, beta, GN.SPEC.encode(attrs))
    partial = "group_norm_partial_rows" if channels_last else "group_norm_partial"
    for limits in ("storage_blocks=8", "invocations=128"):
        profile = tmp_path / "profile.json"
        result = run(model, {"x": x}, backend="gl", gl_limits=limits, profile_path=str(profile))
        assert result.stats["declined_nodes"] == 0, (limits, result.stats["declined"])
        kernels = [k["name"] for n in json.loads(profile.read_text())["nodes"] for k in n["kernels"]]
        assert kernels == [partial, "group_norm_finalize", "group_norm_apply4"], (limits, kernels)
        assert_close(result.outputs["y"], GN.reference([x, gamma, beta], attrs), rtol=1e-5)


def test_a_large_half_group_norm_at_128_invocations(rng):
    """The SD1.5 VAE's 512 x 512 GroupNorms are 64-128 MiB as half. At 128 invocations they went to the one-kernel
    path (group_norm_f32), whose half output came back zero past a size-dependent point on llvmpipe (this 96 MiB
    case: everything past 64 MiB; the VAE decoder's image rel 0.95 from the CPU's), while NVIDIA's GL computed the
    same case right (H200, rel 7e-4): llvmpipe's fault, but the two-stage path now takes these groups anyway."""
    from harness import relative_error
    from sdconvert.ops import group_norm as GN
    from tflite_models import group_norm_model

    shape = (1, 1024, 256, 192)  # 96 MiB as half
    attrs = GN.GroupNormAttrs(groups=32, eps=1e-6, activation="none", channel_axis=-1)
    x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
    gamma, beta = np.ones(192, np.float32), np.zeros(192, np.float32)
    result = run(group_norm_model(shape, gamma, beta, GN.SPEC.encode(attrs)), {"x": x}, backend="gl",
                 activations_fp16=True, gl_limits="invocations=128")
    assert result.stats["declined_nodes"] == 0
    assert relative_error(result.outputs["y"], GN.reference([x, gamma, beta], attrs)) <= HALF_STORAGE_RTOL
