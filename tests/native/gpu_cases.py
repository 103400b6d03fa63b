"""Sd* op cases shared by the GPU backend tests (test_opencl_ops.py, test_gl_ops.py): each backend runs the
same shapes against the same numpy references, so a kernel port cannot silently cover less."""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import load_delegate

from harness import HALF_STORAGE_RTOL, assert_close, make_interpreter, relative_error, run
from kernel_dialect import CUSTOM_OPS, glsl_kernels
from sdconvert.ops import attention as A
from sdconvert.ops import gelu as G
from sdconvert.ops import group_norm as GN
from sdlite import native
from tflite_models import attention_model, gelu_model, group_norm_model

GPU_BACKENDS = ["opencl", "gl"]
# (n, sq, sk, heads, head_dim): cross-attention with odd lengths, a batched self-attention over more than
# two 64-key blocks, and fewer keys than queries; head dims 8, 40 (SD1.5's first level) and 80.
ATTENTION_SHAPES = [(1, 7, 77, 2, 8), (2, 130, 130, 1, 40), (1, 5, 3, 4, 80)]
ATTENTION_VARIANTS = ["partial_softmax", "flash"]
GELU_MODES = ["none", "tanh", "quick"]
# (shape, groups, channel axis, activation)
GROUP_NORM_CASES = [((2, 8, 8, 32), 8, -1, "silu"), ((1, 64, 6, 5), 32, 1, "none"), ((2, 77, 12), 3, 2, "silu")]


def check_attention(backend: str, rng: np.random.Generator, variant: str, causal: bool, n: int, sq: int, sk: int,
                    heads: int, head_dim: int) -> None:
    attrs = A.AttentionAttrs(heads=heads, head_dim=head_dim, scale=head_dim**-0.5, causal=causal, variant=variant)
    q, k, v = (rng.standard_normal((n, s, heads * head_dim)).astype(np.float32) for s in (sq, sk, sk))
    result = run(attention_model(n, sq, sk, heads, head_dim, A.SPEC.encode(attrs)), {"q": q, "k": k, "v": v},
                 backend=backend)
    assert result.stats["backend"] == backend
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert_close(result.outputs["o"], A.reference([q, k, v], attrs), rtol=1e-5)


def check_gelu(backend: str, rng: np.random.Generator, mode: str, half: bool = False) -> None:
    """``half``: activations_fp16 (unary_f32 on half storage), checked to HALF_STORAGE_RTOL in one partition."""
    attrs = G.GeluAttrs(approximate=mode)
    x = (3.0 * rng.standard_normal((3, 1000))).astype(np.float32)
    result = run(gelu_model(x.shape, G.SPEC.encode(attrs)), {"x": x}, backend=backend, activations_fp16=half)
    assert result.stats["claimed_nodes"] == 1
    if half:
        assert result.stats["partitions"] == 1 and result.stats["declined_nodes"] == 0
        assert relative_error(result.outputs["y"], G.reference([x], attrs)) <= HALF_STORAGE_RTOL
    else:
        assert_close(result.outputs["y"], G.reference([x], attrs), rtol=1e-5)


def check_group_norm(backend: str, rng: np.random.Generator, shape: tuple[int, ...], groups: int, axis: int,
                     act: str, profile: Path | None = None, mean: float = 3.0, half: bool = False) -> list[str]:
    """One SdGroupNorm node on ``backend`` vs the numpy reference (data N(mean, 2^2)); with ``profile`` (a file
    path), also return the names of the kernels the node launched, in order. ``half``: activations_fp16 (x and y
    stored as half; gamma and beta stay float32), checked to HALF_STORAGE_RTOL in one partition."""
    attrs = GN.GroupNormAttrs(groups=groups, eps=1e-5, activation=act, channel_axis=axis)
    c = shape[axis]
    x = (rng.standard_normal(shape) * 2.0 + mean).astype(np.float32)
    gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    opts = {"backend": backend} if profile is None else {"backend": backend, "profile_path": str(profile)}
    if half:
        opts["activations_fp16"] = True
    result = run(group_norm_model(shape, gamma, beta, GN.SPEC.encode(attrs)), {"x": x}, **opts)
    assert result.stats["claimed_nodes"] == 1
    expected = GN.reference([x, gamma, beta], attrs)
    if half:
        assert result.stats["partitions"] == 1 and result.stats["declined_nodes"] == 0
        assert relative_error(result.outputs["y"], expected) <= HALF_STORAGE_RTOL
    else:
        assert_close(result.outputs["y"], expected, rtol=1e-5)
    if profile is None:
        return []
    (node,) = json.loads(profile.read_text())["nodes"]
    return [k["name"] for k in node["kernels"]]


def profile_group_norm(backend: str, rng: np.random.Generator, profile: Path, invocations: int = 1) -> dict:
    """Run a one-node SdGroupNorm graph with ``profile_path`` set; return the parsed profile JSON."""
    attrs = GN.GroupNormAttrs(groups=2, eps=1e-5, activation="silu", channel_axis=-1)
    x = rng.standard_normal((1, 4, 4, 8)).astype(np.float32)
    g = np.ones(8, np.float32)
    delegate = load_delegate(str(native.delegate_path()), {"backend": backend, "profile_path": str(profile)})
    runner = make_interpreter(group_norm_model(x.shape, g, g, GN.SPEC.encode(attrs)), delegate).get_signature_runner(
        "serving_default")
    for _ in range(invocations):
        runner(x=x)
    data = json.loads(profile.read_text())
    assert data["invocations"] == invocations
    assert [node["op"] for node in data["nodes"]] == ["SdGroupNorm"]
    assert data["nodes"][0]["ms"] >= 0.0
    kernels = data["nodes"][0]["kernels"]  # the launches, by kernel name, summing to the node's time
    assert kernels and all(k["name"].startswith("group_norm") for k in kernels), kernels
    assert sum(k["ms"] for k in kernels) == pytest.approx(data["nodes"][0]["ms"], rel=1e-4, abs=1e-5)
    return data


@lru_cache(maxsize=1)
def gl_kernel_names() -> frozenset[str]:
    """The kernels of the GL backend's shader library: generated from the kernel dialect, plus the GL-only shader
    files (backends/gl/shaders/*.glsl)."""
    names = set(glsl_kernels())
    for path in (CUSTOM_OPS / "backends" / "gl" / "shaders").glob("*.glsl"):
        names.update(re.findall(r"^//== kernel (\w+)$", path.read_text(), re.M))
    return frozenset(names)


def winograd_tiles(shape: tuple[int, ...], tile: int) -> int:
    """T, the Winograd GEMM's rows, of a SAME conv over an NHWC `shape` with F(tile x tile, 3 x 3)."""
    n, h, w = shape[:3]
    return n * -(-h // tile) * -(-w // tile)


def mark_gl_gemm_gap(request: pytest.FixtureRequest, backend: str, tiles: int | None = None,
                     forced: str | None = None) -> None:
    """Marks a Winograd case as a strict expected failure on GL while GL's tiled GEMM lacks the skinny kernel
    gemm_t16x64 that the OpenCL plan uses: without it SdConv2DWinograd needs 64 tiles (ops/conv2d_winograd/gpu.cc
    kMinTilesNoSkinny) and runs smaller maps as direct convs, and a forced `gemm_tiles` 16x64 config names no GL
    kernel. The case runs either way (a plan that differs from OpenCL's then fails it, as expected); once the GEMM
    family runs on GL (gemm_tiled as a dialect file) the condition is false and the case must pass as on OpenCL."""
    if backend != "gl" or "gemm_t16x64" in gl_kernel_names():
        return
    if (tiles is not None and tiles < 64) or (forced is not None and forced.startswith("16x64")):
        request.node.add_marker(pytest.mark.xfail(
            strict=True, reason="GL's tiled GEMM has no gemm_t16x64 yet: this Winograd plan differs from OpenCL's"))
