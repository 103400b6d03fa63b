"""The kernel dialect's GLSL translation (custom_ops/gpu/dialect/gen_glsl.py) on small kernels: what a rule accepts,
what it refuses, and the GLSL it writes (the shaders themselves are compiled and run on llvmpipe by the GL tests)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernel_dialect import CUSTOM_OPS, DIALECT, cpp_command


def _translate(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    kern = tmp_path / "k.kern"
    kern.write_text(source)
    return subprocess.run(
        [sys.executable, str(DIALECT / "gen_glsl.py"), "--cpp", cpp_command(), "--prelude", str(DIALECT / "prelude.h"),
         "--runtime", str(DIALECT / "glsl_runtime.glsl"), "--root", str(CUSTOM_OPS), "--plain", "--out", "/dev/stdout",
         str(kern)],
        capture_output=True, text=True)


def test_local_array_sizes_may_multiply(tmp_path):
    """A LOCAL array sized by an expression with `*` (gemm_tiled.kern's As4[GT_BK * (BM + GT_PAD) / 4]) is an array,
    not a pointer: it becomes a `shared` array of the same size."""
    proc = _translate(tmp_path, "#define BM 64\n"
                                "KERNEL void k(GLOBAL float* y, int yo) {\n"
                                "  LOCAL float4 t[16 * ((BM) + 4) / 4];\n"
                                "  t[get_local_id(0)] = (float4)(1.0f);\n"
                                "  BARRIER();\n"
                                "  y[yo] = t[0].x;\n"
                                "}\n")
    assert proc.returncode == 0, proc.stderr
    assert "shared vec4 t[16 * ((64) + 4) / 4];" in proc.stdout


def test_local_pointers_are_refused(tmp_path):
    proc = _translate(tmp_path, "KERNEL void k(GLOBAL float* y, int yo) {\n"
                                "  LOCAL float* p;\n"
                                "  y[yo] = 0.0f;\n"
                                "}\n")
    assert proc.returncode == 1
    assert "kernel k: LOCAL declaration 'float* p'" in proc.stderr and "no pointers" in proc.stderr


def test_unaligned_half4_loads_read_the_packed_view(tmp_path):
    """LDH4 (any half offset, OpenCL's vload_half4) reads four halves through the buffer's 32-bit view."""
    proc = _translate(tmp_path, "KERNEL void k(GLOBAL float* y, int yo, GLOBAL const float* h, int ho) {\n"
                                "  const float4 v = LDH4(h, ho + 1);\n"
                                "  y[yo] = v.x + v.w;\n"
                                "}\n")
    assert proc.returncode == 0, proc.stderr
    assert "readonly buffer SdBuf1_u32 { uint h_u32[]; };" in proc.stdout
    assert "unpackHalf2x16(h_u32[((ho + 1) + 3) >> 1])[((ho + 1) + 3) & 1]" in proc.stdout
