"""OpenCL backend (run on PoCL in CI): Sd* fused-op kernels vs the shared numpy references, options, profiling."""
from __future__ import annotations

import json

import numpy as np
import pytest
from ai_edge_litert.interpreter import load_delegate

from harness import assert_close, run
from sdconvert.ops import attention as A
from sdconvert.ops import gelu as G
from sdconvert.ops import group_norm as GN
from sdlite import native
from tflite_models import attention_model, gelu_model, group_norm_model


@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n,sq,sk,heads,head_dim", [(1, 7, 77, 2, 8), (2, 130, 130, 1, 40), (1, 5, 3, 4, 80)])
def test_attention_matches_reference(rng, variant, causal, n, sq, sk, heads, head_dim):
    attrs = A.AttentionAttrs(heads=heads, head_dim=head_dim, scale=head_dim**-0.5, causal=causal, variant=variant)
    q, k, v = (rng.standard_normal((n, s, heads * head_dim)).astype(np.float32) for s in (sq, sk, sk))
    result = run(attention_model(n, sq, sk, heads, head_dim, A.SPEC.encode(attrs)), {"q": q, "k": k, "v": v},
                 backend="opencl")
    assert result.stats["backend"] == "opencl"
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    assert_close(result.outputs["o"], A.reference([q, k, v], attrs), rtol=1e-5)


def test_attention_head_dim_limit_declines_with_reason(rng):
    from harness import make_interpreter

    attrs = A.AttentionAttrs(heads=1, head_dim=300, scale=0.1, causal=False, variant="flash")
    q = rng.standard_normal((1, 4, 300)).astype(np.float32)
    delegate = native.load(backend="opencl")
    interpreter = make_interpreter(attention_model(1, 4, 4, 1, 300, A.SPEC.encode(attrs)), delegate)
    with pytest.raises(RuntimeError, match="unresolved custom op: SdAttention"):  # nothing else can run it
        interpreter.get_signature_runner("serving_default")(q=q, k=q, v=q)
    stats = native.stats(delegate)
    assert stats["claimed_nodes"] == 0 and stats["declined_nodes"] == 1
    assert stats["declined"][0]["reason"] == "head_dim 300 above the kernel limit 256"


@pytest.mark.parametrize("mode", ["none", "tanh", "quick"])
def test_gelu_matches_reference(rng, mode):
    attrs = G.GeluAttrs(approximate=mode)
    x = (3.0 * rng.standard_normal((3, 1000))).astype(np.float32)
    result = run(gelu_model(x.shape, G.SPEC.encode(attrs)), {"x": x}, backend="opencl")
    assert_close(result.outputs["y"], G.reference([x], attrs), rtol=1e-5)


@pytest.mark.parametrize("shape,groups,axis,act", [((2, 8, 8, 32), 8, -1, "silu"), ((1, 64, 6, 5), 32, 1, "none"),
                                                   ((2, 77, 12), 3, 2, "silu")])
def test_group_norm_matches_reference(rng, shape, groups, axis, act):
    attrs = GN.GroupNormAttrs(groups=groups, eps=1e-5, activation=act, channel_axis=axis)
    c = shape[axis]
    x = (rng.standard_normal(shape) * 2.0 + 3.0).astype(np.float32)
    gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    result = run(group_norm_model(shape, gamma, beta, GN.SPEC.encode(attrs)), {"x": x}, backend="opencl")
    assert_close(result.outputs["y"], GN.reference([x, gamma, beta], attrs), rtol=1e-5)


def test_profile_json_lists_every_node(rng, tmp_path):
    attrs = GN.GroupNormAttrs(groups=2, eps=1e-5, activation="silu", channel_axis=-1)
    x = rng.standard_normal((1, 4, 4, 8)).astype(np.float32)
    g = np.ones(8, np.float32)
    profile = tmp_path / "profile.json"
    run(group_norm_model(x.shape, g, g, GN.SPEC.encode(attrs)), {"x": x}, backend="opencl")  # warm cache
    from harness import make_interpreter

    delegate = load_delegate(str(native.delegate_path()), {"backend": "opencl", "profile_path": str(profile)})
    make_interpreter(group_norm_model(x.shape, g, g, GN.SPEC.encode(attrs)), delegate).get_signature_runner(
        "serving_default")(x=x)
    data = json.loads(profile.read_text())
    assert data["invocations"] == 1
    assert [n["op"] for n in data["nodes"]] == ["SdGroupNorm"]
    assert data["nodes"][0]["ms"] >= 0.0


def test_unknown_option_is_one_line_error():
    with pytest.raises(ValueError, match="unknown option 'opencl_typo'"):
        load_delegate(str(native.delegate_path()), {"backend": "opencl", "opencl_typo": "1"})
