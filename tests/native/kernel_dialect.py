"""The GL backend's shaders as the build generates them from the kernel dialect (custom_ops/gpu/dialect/), for tests
that check properties of the generated GLSL itself (the build embeds the same text)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

CUSTOM_OPS = Path(__file__).resolve().parents[2] / "custom_ops"
DIALECT = CUSTOM_OPS / "gpu" / "dialect"
_SECTION = re.compile(r"^//== (file|kernel) (\S+)$", re.M)


def kernel_sources() -> list[Path]:
    """gpu/kernel_sources.txt: the portable kernel files in program order."""
    lines = (CUSTOM_OPS / "gpu" / "kernel_sources.txt").read_text().splitlines()
    return [CUSTOM_OPS / ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


def cpp_command() -> str:
    for cc in ("c++", "g++", "clang++", "cc"):
        if shutil.which(cc):
            return f"{cc} -E"
    raise RuntimeError("no C/C++ compiler on PATH to preprocess the kernel dialect")


@lru_cache(maxsize=2)
def glsl_library(act_half: bool = False) -> str:
    """The generated shader library text (gen_glsl.py --plain; ``act_half``: --act-half, the half activation
    storage library), computed once per test session."""
    proc = subprocess.run(
        [sys.executable, str(DIALECT / "gen_glsl.py"), "--cpp", cpp_command(), "--prelude", str(DIALECT / "prelude.h"),
         "--runtime", str(DIALECT / "glsl_runtime.glsl"), "--root", str(CUSTOM_OPS), "--plain",
         *(["--act-half"] if act_half else []), "--out", "/dev/stdout", *map(str, kernel_sources())],
        capture_output=True, text=True, check=True)
    return proc.stdout


def glsl_kernels(act_half: bool = False) -> dict[str, tuple[str, str]]:
    """Kernel name -> (source file relative to custom_ops/, generated shader section)."""
    parts = _SECTION.split(glsl_library(act_half))  # [prelude, kind, name, body, kind, name, body, ...]
    out: dict[str, tuple[str, str]] = {}
    current_file = ""
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3]):
        if kind == "file":
            current_file = name
        else:
            out[name] = (current_file, body)
    return out


def opencl_program_files() -> list[str]:
    """The files of the OpenCL backend's program in order (paths relative to custom_ops/): the kernel dialect's
    prelude, the portable kernels (gpu/kernel_sources.txt), then the OpenCL-only files
    (backends/opencl/kernel_sources.txt): the lists the build embeds."""
    def listed(rel: str) -> list[str]:
        lines = (CUSTOM_OPS / rel).read_text().splitlines()
        return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]

    return ["gpu/dialect/prelude.h", *listed("gpu/kernel_sources.txt"), *listed("backends/opencl/kernel_sources.txt")]


ATTENTION_NV_FILE = "backends/opencl/nvidia/attention_nv.cl"  # the NVIDIA-only attention kernels (OpenCL-only list)


def opencl_program_source(through: str = "") -> str:
    """The OpenCL backend's program source as the build embeds it; with ``through`` (a path as the lists name it)
    only the files up to and including that one (the attention tests leave out the GEMM files after it)."""
    files = opencl_program_files()
    if through:
        if through not in files:
            raise ValueError(f"opencl_program_source: {through!r} is not one of the program's files {files}")
        files = files[: files.index(through) + 1]
    texts = [(CUSTOM_OPS / f).read_text().replace("#pragma once", "") for f in files]
    return "#define SD_API_OPENCL 1\n" + "\n".join(texts)


def attention_source() -> str:
    """The attention op's kernels after what they call: the program up to the NVIDIA-only attention file."""
    return opencl_program_source(through=ATTENTION_NV_FILE)
