"""OpenCL backend (run on PoCL in CI): Sd* fused-op kernels vs the shared numpy references, options, profiling."""
from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import load_delegate

import gpu_cases
from sdconvert.ops import attention as A
from sdlite import native
from tflite_models import attention_model

BACKEND = "opencl"


@pytest.mark.parametrize("variant", gpu_cases.ATTENTION_VARIANTS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,sq,sk,heads,head_dim", gpu_cases.ATTENTION_SHAPES)
def test_attention_matches_reference(rng, variant, causal, n, sq, sk, heads, head_dim):
    gpu_cases.check_attention(BACKEND, rng, variant, causal, n, sq, sk, heads, head_dim)


def test_attention_head_dim_limit_runs_on_the_cpu_kernels_with_the_reason(rng):
    # The fallback kernels (a backend without the tiled ones; forced here) stop at head_dim 256.
    from harness import assert_close, make_interpreter

    attrs = A.AttentionAttrs(heads=1, head_dim=300, scale=0.1, causal=False, variant="flash")
    q = rng.standard_normal((1, 4, 300)).astype(np.float32)
    delegate = native.load(backend="opencl", attention_tiling="legacy")
    interpreter = make_interpreter(attention_model(1, 4, 4, 1, 300, A.SPEC.encode(attrs)), delegate)
    (out,) = interpreter.get_signature_runner("serving_default")(q=q, k=q, v=q).values()
    assert_close(out, A.reference([q, q, q], attrs), rtol=1e-5)
    stats = native.stats(delegate)
    assert stats["claimed_nodes"] == 0 and stats["declined_nodes"] == 1 and stats["host_fallback_nodes"] == 1
    assert stats["declined"][0]["reason"] == "head_dim 300 above the kernel limit 256"


@pytest.mark.parametrize("storage", ["float32", "half"])
@pytest.mark.parametrize("mode", gpu_cases.GELU_MODES)
def test_gelu_matches_reference(rng, mode, storage):
    gpu_cases.check_gelu(BACKEND, rng, mode, half=storage == "half")


@pytest.mark.parametrize("shape,groups,axis,act", gpu_cases.GROUP_NORM_CASES)
def test_group_norm_matches_reference(rng, shape, groups, axis, act):
    gpu_cases.check_group_norm(BACKEND, rng, shape, groups, axis, act)


def test_profile_json_lists_every_node(rng, tmp_path):
    data = gpu_cases.profile_group_norm(BACKEND, rng, tmp_path / "profile.json")
    assert data["method"] == "events"  # OpenCL event timestamps


def test_unknown_option_is_one_line_error():
    with pytest.raises(ValueError, match="unknown option 'opencl_typo'"):
        load_delegate(str(native.delegate_path()), {"backend": "opencl", "opencl_typo": "1"})
