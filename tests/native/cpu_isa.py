"""Which SIMD instruction sets the delegate's CPU kernels can use here, and how tests force each one.

The kernels pick AVX-512, AVX2+FMA or portable 4-lane code at every launch; ``SDGPU_CPU_ISA`` caps the choice
(common/cpu_simd.h), so one machine can run every code path.
"""
from __future__ import annotations

from pathlib import Path

ISA_NAMES = ("generic", "avx2", "avx512")  # index = the C++ CpuIsa value
ENV = "SDGPU_CPU_ISA"


def best_isa() -> int:
    """The best set /proc/cpuinfo promises on x86-64 (1 avx2+fma, 2 avx512f), 0 elsewhere."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return 0
    words = set(flags.split())
    if not {"avx2", "fma"} <= words:
        return 0
    return 2 if "avx512f" in words else 1


def available_isas() -> tuple[str, ...]:
    """Names of every set this machine runs, generic first."""
    return ISA_NAMES[: best_isa() + 1]
