"""The OpenCL backend's program as the build assembles it from the shared kernel lists (gpu/kernel_sources.txt, then
backends/opencl/kernel_sources.txt; kernel_dialect.opencl_program_source reads the same files CMake and Bazel do),
compiled outside the delegate through pyopencl on this machine's OpenCL (PoCL in CI).

What the tests that compile the kernels for NVIDIA's PTX (test_opencl_tensor_core_gemm.py, test_attention_tilings.py)
and the device checks in lab/ start from: the listed files in list order form one program that builds, holds every
portable kernel family the planner launches, and compiles the NVIDIA-only kernels only where SDGPU_NV_PTX is set."""
from __future__ import annotations

import warnings

import pytest

from kernel_dialect import opencl_program_files, opencl_program_source

cl = pytest.importorskip("pyopencl")  # a test dependency (pyproject [test]); CI has it


def _kernel_names(options: str) -> set[str]:
    warnings.filterwarnings("ignore", category=cl.CompilerWarning)
    ctx = cl.create_some_context(interactive=False)
    program = cl.Program(ctx, opencl_program_source()).build(options=options)
    return set(program.get_info(cl.program_info.KERNEL_NAMES).split(";"))


@pytest.fixture(scope="module")
def kernel_names() -> set[str]:
    return _kernel_names("-cl-std=CL1.2")


def test_half_activation_storage_builds_the_same_kernels(kernel_names: set[str]) -> None:
    # delegate option activations_fp16: the same program with SD_ACT_HALF=1 (gpu/dialect/README.md, "Activation
    # storage": vload_half / vstore_half, no cl_khr_fp16), the layout kernels' _act twins included
    assert _kernel_names("-cl-std=CL1.2 -DSD_ACT_HALF=1") == kernel_names
    assert {"copy_nd_act", "copy_nd_act_v4", "gather_rows_act", "transpose_tiled_act", "reduce_f32_part"} <= kernel_names


def test_program_files_follow_the_lists() -> None:
    files = opencl_program_files()
    assert files[0] == "gpu/dialect/prelude.h" and len(files) == len(set(files))
    assert files.index("gpu/kernels/gemm_tiled.kern") < files.index("ops/attention/gpu.kern")
    assert all(f.startswith("backends/opencl/nvidia/") for f in files[files.index("ops/attention/gpu.kern") + 1:])
    with pytest.raises(ValueError, match="not one of the program's files"):
        opencl_program_source(through="gpu/kernels/missing.kern")


def test_program_builds_with_every_portable_kernel_family(kernel_names: set[str]) -> None:
    want = {"gemm_t16x64", "gemm_s16x128", "gemm_t64x64_gg_ln", "conv_t128x128", "gemm_splitk_reduce",
            "winograd_input_f4_gnsilu", "winograd_output_f6_sum", "winograd_filter_f2", "attn_flash_r40",
            "attn_flash_h80", "attn_flash_d512", "attn_flash_ks_r160", "attn_merge", "attn_short_q64",
            "group_norm_partial", "layer_norm_rows", "gelu_gated_f32_v4", "softmax_f32", "copy_nd_v4"}
    assert want <= kernel_names, sorted(want - kernel_names)


def test_nvidia_only_kernels_stay_out_without_sdgpu_nv_ptx(kernel_names: set[str]) -> None:
    nvidia = {n for n in kernel_names if n.startswith(("gemm_x", "conv_x", "gemm_d", "conv_d"))
              or n in {"attn_flash_m40", "attn_flash_m80", "attn_flash_f40", "attn_flash_f80"}}
    assert nvidia == set()


def test_the_program_defines_no_variadic_macro() -> None:
    # NVIDIA's OpenCL compiler rejects them ("variadic macros not supported in OpenCL", -cl-std=CL1.2) where PoCL's
    # clang and the GLSL generator's cpp accept them: CI would not notice, every OpenCL model on NVIDIA would fail
    import re

    variadic = [line for line in opencl_program_source().splitlines()
                if re.match(r"\s*#\s*define\s+\w+\([^)]*\.\.\.\s*\)", line) or "__VA_ARGS__" in line]
    assert variadic == [], variadic[:3]
