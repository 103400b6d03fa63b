"""Delegate option tensor_cores (auto | off | 3xtf32 | fp64; auto = fp64 where built, i.e. NVIDIA sm_90). The tensor-core attention kernels (attn_flash_m40 / m80, and the
FP64 attn_flash_f40 / f80, sm_90) are inline PTX, compiled only on NVIDIA's OpenCL; on PoCL (CI) the option must leave the fp32 kernels running, exactly, and the option itself
must be validated on both sides. Its numbers on NVIDIA are in BENCHMARKS.md (session 21: the device check of the
whole fused UNet against the CPU delegate)."""
from __future__ import annotations

import pytest
from ai_edge_litert.interpreter import load_delegate

from attention_cases import profiled_kernels
from sdlite import native


@pytest.mark.parametrize("mode", ["3xtf32", "fp64", "auto"])
@pytest.mark.parametrize("variant", ["flash", "partial_softmax"])
@pytest.mark.parametrize("head_dim", [40, 80])
def test_without_nvidia_the_option_keeps_the_fp32_kernels(tmp_path, rng, variant, head_dim, mode):
    # 300 x 300: the long self-attention shape class m40 / m80 / f40 / f80 are candidates for (Sk >= 256)
    on, _ = profiled_kernels(tmp_path, rng, 300, 300, 2, head_dim, variant=variant, tensor_cores=mode)
    off, _ = profiled_kernels(tmp_path, rng, 300, 300, 2, head_dim, variant=variant, tensor_cores="off")
    assert on == off
    if head_dim == 40:
        assert on == (["attn_flash_r40"] if variant == "flash" else ["attn_stats_r40", "attn_pv_r40"])
    else:
        assert on and not any(k.startswith(("attn_flash_m", "attn_flash_f")) for k in on), on


@pytest.mark.parametrize("value", ["on", "3xTF32", "tf32", ""])
def test_tensor_cores_option_is_validated(value):
    with pytest.raises(ValueError, match="tensor_cores='.*' must be auto, off, 3xtf32 or fp64"):
        load_delegate(str(native.delegate_path()), {"backend": "opencl", "tensor_cores": value})
    if value:
        with pytest.raises(native.NativeDelegateError, match="tensor_cores must be one of auto, off, 3xtf32, fp64"):
            native.DelegateOptions(backend="opencl", tensor_cores=value)
    for mode in ("auto", "3xtf32", "fp64"):
        assert native.DelegateOptions(backend="opencl", tensor_cores=mode).as_strings()["tensor_cores"] == mode


def test_options_text_in_benchmark_model_form():
    assert native.parse_options_text("tensor_cores:3xtf32; gemm_autotune:0;attention_key_splits:2;") == {
        "tensor_cores": "3xtf32", "gemm_autotune": False, "attention_key_splits": 2}
    assert native.parse_options_text("") == {}
    for text, message in (("tensor_cores", "is not key:value"), ("backend:gl", "unknown delegate option 'backend'"),
                          ("gemm_autotune:yes", "takes 1/0/true/false"),
                          ("attention_key_splits:two", "takes an integer"),
                          ("attention_key_splits:99", "attention_key_splits must be an int in 0..64"),
                          ("tensor_cores:fp16", "tensor_cores must be one of auto, off, 3xtf32, fp64")):
        with pytest.raises(native.NativeDelegateError, match=message):
            native.parse_options_text(text)
