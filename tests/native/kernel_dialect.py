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


@lru_cache(maxsize=1)
def glsl_library() -> str:
    """The generated shader library text (gen_glsl.py --plain), computed once per test session."""
    proc = subprocess.run(
        [sys.executable, str(DIALECT / "gen_glsl.py"), "--cpp", cpp_command(), "--prelude", str(DIALECT / "prelude.h"),
         "--runtime", str(DIALECT / "glsl_runtime.glsl"), "--root", str(CUSTOM_OPS), "--plain", "--out", "/dev/stdout",
         *map(str, kernel_sources())],
        capture_output=True, text=True, check=True)
    return proc.stdout


def glsl_kernels() -> dict[str, tuple[str, str]]:
    """Kernel name -> (source file relative to custom_ops/, generated shader section)."""
    parts = _SECTION.split(glsl_library())  # [prelude, kind, name, body, kind, name, body, ...]
    out: dict[str, tuple[str, str]] = {}
    current_file = ""
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3]):
        if kind == "file":
            current_file = name
        else:
            out[name] = (current_file, body)
    return out
