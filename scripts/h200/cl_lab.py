"""Shared plumbing of the pyopencl kernel labs (skinny_lab.py, attn_lab.py): one context and profiling queue, the
delegate's own kernel source (the .cl files CMake embeds, in its order), a build cache, and event timing.

The labs compile kernels without rebuilding the delegate, so one device call can compare many variants on the
same data. pyopencl is imported lazily (the device machine gets it as carried wheels, see prepare.sh).
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# the delegate's build options (backends/opencl/opencl_device.cc): on NVIDIA's platform it adds NV_OPTION, and so
# does Lab.program unless the options set SDGPU_NV_PTX themselves (attn_lab.py --xs builds the library both ways)
BUILD_OPTIONS = "-cl-std=CL1.2"
NV_OPTION = "-DSDGPU_NV_PTX=1"


def delegate_options(options: str, nvidia: bool) -> str:
    """`options` as the delegate would build with them: NV_OPTION added on NVIDIA unless they set SDGPU_NV_PTX."""
    if nvidia and "SDGPU_NV_PTX" not in options:
        return f"{options} {NV_OPTION}".strip()
    return options


def program_files() -> list[str]:
    """The files of the delegate's OpenCL program in order (paths relative to custom_ops/): the kernel dialect's
    prelude, the portable kernels (gpu/kernel_sources.txt), then the OpenCL-only files
    (backends/opencl/kernel_sources.txt) -- the lists CMake embeds."""
    def listed(rel: str) -> list[str]:
        lines = (ROOT / "custom_ops" / rel).read_text().splitlines()
        return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]

    return ["gpu/dialect/prelude.h", *listed("gpu/kernel_sources.txt"), *listed("backends/opencl/kernel_sources.txt")]


def lib_source(through: str = "") -> str:
    """The delegate's OpenCL program source, as CMake embeds it; with `through` (a path as the lists name it, e.g.
    GEMM_SOURCES_END) only the files up to and including that one: a GEMM lab then does not wait for NVIDIA's
    compiler to build the attention and Winograd kernels too (the whole library took 90-120 s on an H100)."""
    files = program_files()
    if through:
        if through not in files:
            raise ValueError(f"lib_source: {through!r} is not one of the program's files {files}")
        files = files[: files.index(through) + 1]
    texts = [(ROOT / "custom_ops" / f).read_text().replace("#pragma once", "") for f in files]
    return "#define SD_API_OPENCL 1\n" + "\n".join(texts)


def attention_source() -> str:
    """The attention op's kernels, after what they call: the delegate's program up to the NVIDIA-only attention file
    (the dialect's prelude, the portable kernels with ops/attention/gpu.kern, the NVIDIA-only primitives and
    attention kernels), without the GEMM / Winograd files, which NVIDIA's compiler takes long to build."""
    return lib_source(through=ATTENTION_NV_FILE)


GEMM_SOURCES_END = "gpu/kernels/gemm_tiled.kern"  # lib_source(through=...) for GEMM-only labs
ATTENTION_FILE = "ops/attention/gpu.kern"  # the portable attention kernels (gpu/kernel_sources.txt)
ATTENTION_NV_FILE = "backends/opencl/nvidia/attention_nv.cl"  # the NVIDIA-only ones (OpenCL-only list)
NV_PTX_FILE = "backends/opencl/nvidia/nv_ptx.cl"  # the NVIDIA-only primitives the attention's PTX paths call


class Lab:
    """A device, its profiling queue and cached programs; `timed` is the median device time of a launch."""

    def __init__(self) -> None:
        import pyopencl as cl

        warnings.filterwarnings("ignore", category=cl.CompilerWarning)  # notes in the kernels' build logs
        self.cl = cl
        self.ctx = cl.create_some_context(interactive=False)
        self.dev = self.ctx.devices[0]
        self.queue = cl.CommandQueue(self.ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.nvidia = "NVIDIA" in self.dev.platform.name  # the delegate builds with NV_OPTION there
        self._programs: dict[tuple[str, str], Any] = {}

    def describe(self) -> str:
        return f"{self.dev.name} ({self.dev.platform.name}), {self.dev.max_compute_units} CUs"

    def program(self, source: str, options: str = "") -> Any:
        """`source` built as the delegate builds it on this device: NV_OPTION added on NVIDIA unless `options` set
        SDGPU_NV_PTX (e.g. -DSDGPU_NV_PTX=0 for the portable paths there)."""
        options = delegate_options(options, self.nvidia)
        key = (source, options)
        if key not in self._programs:
            self._programs[key] = self.cl.Program(self.ctx, source).build(options=f"{BUILD_OPTIONS} {options}")
        return self._programs[key]

    def buffer(self, host: np.ndarray | None = None, nbytes: int = 0) -> Any:
        mf = self.cl.mem_flags
        if host is not None:
            return self.cl.Buffer(self.ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=host)
        return self.cl.Buffer(self.ctx, mf.READ_WRITE, size=nbytes)

    def read(self, buf: Any, shape: tuple, dtype=np.float32) -> np.ndarray:
        out = np.empty(shape, dtype)
        self.cl.enqueue_copy(self.queue, out, buf)
        return out

    def launch(self, kernel: Any, global_size: tuple, local_size: tuple) -> Any:
        return self.cl.enqueue_nd_range_kernel(self.queue, kernel, global_size, local_size)

    def timed(self, launch: Callable[[], list], runs: int, warmup: int = 3) -> float:
        """Median over `runs` of the summed device time (ms) of the events one call of `launch` returns."""
        for _ in range(warmup):
            launch()
        self.queue.finish()
        times = []
        for _ in range(runs):
            events = launch()
            self.queue.finish()
            times.append(sum(e.profile.end - e.profile.start for e in events) * 1e-6)
        return float(np.median(times))


def tensor_core_lab(script: str, doc: str, add_args: Callable[[Any], None] | None = None) -> tuple[Any, Lab] | None:
    """The shared start of the inline-PTX labs (mma_lab.py, mma_attn_lab.py): parse --out / --runs (and what
    `add_args` adds to the parser), open the lab and print its device; None (after saying so) where the device is not
    NVIDIA's OpenCL, which alone compiles mma.sync."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--runs", type=int, default=10)
    if add_args is not None:
        add_args(ap)
    args = ap.parse_args()
    lab = Lab()
    print("device:", lab.describe(), flush=True)
    if not lab.nvidia:
        print(f"{script}: needs NVIDIA's OpenCL (inline PTX mma.sync); nothing measured", flush=True)
        return None
    return args, lab


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(out - ref).max() / np.abs(ref).max())
