"""The OpenCL kernel library split into kernel units (backends/opencl/kernel_library.h) on the program CMake embeds:
the kernel dialect's prelude, the portable .kern files, the OpenCL-only files. For each build-option set the
delegate's list of kernels is exactly what a C preprocessor's expansion of the program defines, in program order
(macro-instantiated kernels such as ATT_INSTANTIATE's included; the NVIDIA-only ones only under SDGPU_NV_PTX), and
the program composed for one unit defines that kernel, only it, and everything it calls (the NVIDIA primitives the
prelude declares ahead of nv_ptx.cl included)."""
from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sdlite.backends import find_native_delegate

CUSTOM_OPS = Path(__file__).resolve().parents[2] / "custom_ops"
NV = "-cl-mad-enable -DSDGPU_NV_PTX=1 -DSDGPU_NV_SM90=1"
OPTION_SETS = ("", "-cl-fast-relaxed-math", NV)
KERNEL_RE = re.compile(r"__kernel\s+(?:__attribute__\s*\(\(.*?\)\)\s*)*void\s+(\w+)\s*\(", re.S)


def _listed(rel: str) -> list[str]:
    lines = (CUSTOM_OPS / rel).read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def _program(through_portable: bool = False) -> str:
    """The OpenCL program as custom_ops/CMakeLists.txt embeds it (or only the prelude and the portable kernels)."""
    files = ["gpu/dialect/prelude.h", *_listed("gpu/kernel_sources.txt"),
             *([] if through_portable else _listed("backends/opencl/kernel_sources.txt"))]
    return "#define SD_API_OPENCL 1\n" + "".join(
        f"// ---- {f}\n{(CUSTOM_OPS / f).read_text().replace('#pragma once', '')}\n" for f in files)


def _preprocess(source: str, options: str) -> str:
    cpp = shutil.which("cpp") or shutil.which("gcc")
    assert cpp is not None, "a C preprocessor (cpp) is needed"
    defines = [w for w in options.split() if w.startswith("-D")]
    cmd = [cpp, *(["-E"] if not cpp.endswith("cpp") else []), "-P", "-x", "c", *defines, "-"]
    return subprocess.run(cmd, input=source, capture_output=True, text=True, check=True).stdout


def _preprocessed_kernels(source: str, options: str) -> list[str]:
    return KERNEL_RE.findall(_preprocess(source, options))


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    path, why = find_native_delegate()
    assert path is not None, why
    lib = ctypes.CDLL(str(path))
    lib.sdgpu_opencl_kernels.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.sdgpu_opencl_kernels.restype = ctypes.c_int
    lib.sdgpu_opencl_unit_source.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.sdgpu_opencl_unit_source.restype = ctypes.c_int
    return lib


def _kernels(lib: ctypes.CDLL, options: str) -> dict:
    buf = ctypes.create_string_buffer(1 << 20)
    n = lib.sdgpu_opencl_kernels(options.encode(), buf, len(buf))
    assert 0 < n < len(buf)
    return json.loads(buf.value.decode())


def _unit_source(lib: ctypes.CDLL, options: str, kernel: str) -> str:
    buf = ctypes.create_string_buffer(4 << 20)
    n = lib.sdgpu_opencl_unit_source(options.encode(), kernel.encode(), buf, len(buf))
    assert 0 < n < len(buf), (kernel, n)
    return buf.value.decode()


@pytest.mark.parametrize("options", OPTION_SETS)
def test_kernel_names_match_the_preprocessor(lib: ctypes.CDLL, options: str) -> None:
    got = _kernels(lib, options)
    assert got["ok"], got
    names = [name for _, name in got["kernels"]]
    assert names == _preprocessed_kernels(_program(), options)
    # the units a model asks for by name: the dialect's macro-instantiated families and the device-side weight prep
    for k in ("attn_flash_d40", "attn_flash_dyn", "gemm_t64x64", "gemm_t64x64_gg_ln", "winograd_input_f4_gnsilu",
              "winograd_output_f6_sum_st", "winograd_filter_f2", "winograd_filter_f4", "winograd_filter_f6",
              "transpose_tiled", "group_norm_apply4", "gelu_gated_f32_v4"):
        assert k in names, k
    nv_only = {"gemm_d64x64"}
    assert nv_only <= set(names) if options == NV else not nv_only & set(names)
    # kernels of one macro instantiation share a unit; units are numbered in program order
    units = [u for u, _ in got["kernels"]]
    assert units == sorted(units) and got["units"] == len(set(units))


@pytest.mark.parametrize("options", ("", NV))
def test_a_unit_program_defines_its_kernels_and_what_they_call(lib: ctypes.CDLL, options: str) -> None:
    got = _kernels(lib, options)
    by_unit: dict[int, list[str]] = {}
    for unit, name in got["kernels"]:
        by_unit.setdefault(unit, []).append(name)
    portable = set(_preprocessed_kernels(_program(through_portable=True), options))
    definition, marker = "float nv_shfl_xor(float v, int mask) {", "// ---- backends/opencl/nvidia/nv_ptx.cl"
    shuffling = 0
    for kernels in by_unit.values():
        source = _unit_source(lib, options, kernels[0])
        assert _preprocessed_kernels(source, options) == kernels
        # the prelude declares nv_shfl_xor (NVIDIA only) ahead of nv_ptx.cl's definition: a unit that calls it goes
        # on to the definition, a portable one that does not stops at its own end
        expanded = _preprocess(source, options)
        has_definition = definition in source
        calls = expanded.count("nv_shfl_xor(") - (options == NV) - has_definition
        assert calls == 0 or has_definition, kernels
        if kernels[0] in portable:
            shuffling += calls > 0
            assert (marker in source) == (calls > 0), kernels
    assert (shuffling > 0) == (options == NV)  # the attention kernels with warp shuffles
    assert _unit_source(lib, options, "winograd_filter_f4").count("#pragma OPENCL EXTENSION cl_khr_fp64 : enable") == 1
    none = lib.sdgpu_opencl_unit_source(options.encode(), b"no_such_kernel", None, 0)
    assert none == -2
