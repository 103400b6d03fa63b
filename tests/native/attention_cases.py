"""One SdAttention node through the delegate next to the float64 numpy reference (shared by the attention tests)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import load_delegate

from harness import assert_close, make_interpreter, run
from sdconvert.ops import attention as A
from sdlite import native
from tflite_models import attention_model


def run_attention(rng: np.random.Generator, variant: str, causal: bool, n: int, sq: int, sk: int, heads: int,
                  head_dim: int, scale: float | None = None, spread: float = 1.0, q: np.ndarray | None = None,
                  k: np.ndarray | None = None, v: np.ndarray | None = None,
                  backend: str = "opencl", **delegate_opts) -> tuple[np.ndarray, np.ndarray]:
    """``(delegate output, reference)``; random Q/K/V (``spread`` x N(0, 1)) unless given; asserts 1 claimed node.
    ``delegate_opts``: more :class:`sdlite.native.DelegateOptions` fields (e.g. ``attention_key_splits``)."""
    scale = head_dim**-0.5 if scale is None else scale
    attrs = A.AttentionAttrs(heads=heads, head_dim=head_dim, scale=scale, causal=causal, variant=variant)
    if q is None:
        q, k, v = (spread * rng.standard_normal((n, s, heads * head_dim)).astype(np.float32) for s in (sq, sk, sk))
    result = run(attention_model(n, sq, sk, heads, head_dim, A.SPEC.encode(attrs)), {"q": q, "k": k, "v": v},
                 backend=backend, **delegate_opts)
    assert result.stats["claimed_nodes"] == 1 and result.stats["declined_nodes"] == 0
    return result.outputs["o"], A.reference([q, k, v], attrs)


# The GPU backends every attention test runs on: PoCL (OpenCL) and llvmpipe (GL) in CI.
BACKENDS = ("opencl", "gl")

# Local memory of each tiling's attn_flash_<t> kernel (gpu/attention_tiling.h, mirroring ops/attention/gpu.kern's
# instantiations): a device runs a tiling only where it fits. llvmpipe allows 32 KiB, so there r40, "dyn" and the
# 16- / 32-query short kernels run and the others are skipped; PoCL and NVIDIA (48 KiB) take all of them.
FLASH_LOCAL_BYTES = {"r40": 22528, "h80": 43008, "r80": 43008, "r40s": 11264, "r80s": 10752, "d40": 33280, "d80": 37376, "h160": 45056,
                     "h160w": 45056, "r160": 41984, "d160": 45312, "d512": 43008, "dyn": 32256, "dyn128": 15104,
                     "short64": 38400, "short32": 26240, "short16": 20160}


@dataclass
class AttentionProfile:
    kernels: list[str]  # the kernels the node launched, in order
    compute_units: int  # of the device (0 where the backend does not know: GL)
    local_memory_bytes: int  # per work-group, of the device

    def fits(self, tiling: str) -> bool:
        return FLASH_LOCAL_BYTES[tiling] <= self.local_memory_bytes


def profile_attention(tmp_path: Path, rng: np.random.Generator, sq: int, sk: int, heads: int, head_dim: int,
                      variant: str = "flash", causal: bool = False, backend: str = "opencl",
                      **opts) -> AttentionProfile:
    """One SdAttention node (batch 1) on `backend` with a profile: the kernels it launched and the device's limits
    (from the same profile); the output is checked against the float64 reference first."""
    attrs = A.AttentionAttrs(heads=heads, head_dim=head_dim, scale=head_dim**-0.5, causal=causal, variant=variant)
    q, k, v = (rng.standard_normal((1, s, heads * head_dim)).astype(np.float32) for s in (sq, sk, sk))
    profile = tmp_path / "profile.json"
    delegate = load_delegate(str(native.delegate_path()),
                             {"backend": backend, "profile_path": str(profile),
                              **{key: str(value) for key, value in opts.items()}})
    runner = make_interpreter(attention_model(1, sq, sk, heads, head_dim, A.SPEC.encode(attrs)),
                              delegate).get_signature_runner("serving_default")
    got = runner(q=q, k=k, v=v)["o"]
    assert_close(got, A.reference([q, k, v], attrs), rtol=1e-5)
    report = json.loads(profile.read_text())
    (node,) = report["nodes"]
    return AttentionProfile([kern["name"] for kern in node["kernels"]], int(report["compute_units"]),
                            int(report["local_memory_bytes"]))


def profiled_kernels(tmp_path: Path, rng: np.random.Generator, sq: int, sk: int, heads: int, head_dim: int,
                     variant: str = "flash", causal: bool = False, backend: str = "opencl",
                     **opts) -> tuple[list[str], int]:
    """(kernels, compute units) of profile_attention."""
    p = profile_attention(tmp_path, rng, sq, sk, heads, head_dim, variant, causal, backend, **opts)
    return p.kernels, p.compute_units
