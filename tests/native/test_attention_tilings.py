"""The SdAttention planner's tiling table (gpu/attention_tiling.cc) against the kernels it describes.

The planner skips a tiling whose local memory a device lacks (GL ES guarantees 16 KiB, llvmpipe has 32 KiB), so the
table's byte counts must be the kernels' own: here every kernel of ops/attention/gpu.kern (and of NVIDIA's
attention_nv.cl) is compiled with clang's NVPTX back end (no NVIDIA device needed) and its static local memory read
from the PTX. NVIDIA's vendor tilings (f40 / m40 / m80 / f80 / h160x) reach the planner through the OpenCL device's
capability hook; merged, the candidates must keep the order and fields of the single table NVIDIA used before they
moved out of the backend-neutral one.
"""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from attention_cases import FLASH_LOCAL_BYTES
from kernel_dialect import attention_source

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "custom_ops"

# (suffix, head_dim, max_head_dim, bq, nt, min_keys, bk, auto_split, max_groups_per_cu, tc): the planner's table on
# NVIDIA's OpenCL before the vendor tilings moved to backends/opencl/nvidia/ (tc: 1 = 3xTF32, 2 = FP64).
FORCED_ONLY = 1 << 30
NVIDIA_TABLE = [
    ("f40", 40, 40, 128, 128, 256, 0, 0, 0, 2), ("m40", 40, 40, 128, 128, 256, 0, 0, 0, 1),
    ("r40", 40, 40, 128, 128, 256, 16, 0, 0, 0), ("h80", 80, 80, 64, 256, 256, 16, 0, 1, 0),
    ("m80", 80, 80, 64, 128, 256, 0, 0, 0, 1), ("f80", 80, 80, 128, 256, 256, 0, 0, 0, 2),
    ("r80", 80, 80, 64, 128, 256, 16, 1, 0, 0), ("r40s", 40, 40, 64, 64, 256, 16, 0, 0, 0),
    ("r80s", 80, 80, 32, 64, 256, 16, 1, 0, 0), ("d40", 40, 40, 64, 128, 0, 0, 0, 0, 0),
    ("d80", 80, 80, 32, 128, 0, 0, 0, 0, 0), ("h160", 160, 160, 16, 256, 256, 16, 0, 1, 0),
    ("h160x", 160, 160, 32, 256, 256, 16, 0, 1, 0), ("h160w", 160, 160, 32, 256, 256, 16, 0, 1, 0),
    ("r160", 160, 160, 16, 128, 0, 16, 0, 0, 0), ("d160", 160, 160, 32, 128, FORCED_ONLY, 0, 0, 0, 0),
    ("d512", 512, 512, 32, 256, 0, 0, 0, 0, 0), ("dyn", 0, 512, 32, 256, 0, 0, 0, 0, 0),
    ("dyn128", 0, 512, 16, 128, 0, 0, 0, 0, 0),
]
VENDOR = {"f40", "m40", "m80", "f80", "h160x"}


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    assert cxx, "a C++17 compiler is required for the native planner tests"
    out = tmp_path_factory.mktemp("attn") / "libattn_tilings_test.so"
    srcs = [SRC / "ops/attention/testing_c_api.cc", SRC / "gpu/attention_tiling.cc",
            SRC / "backends/opencl/nvidia/attention_tilings.cc"]
    subprocess.run([cxx, "-O1", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{SRC}", *map(str, srcs),
                    "-o", str(out)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.sdattn_tiling_table.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    return lib


def _table(lib: ctypes.CDLL, nvidia: bool) -> list[tuple]:
    buf = ctypes.create_string_buffer(8192)
    n = lib.sdattn_tiling_table(int(nvidia), buf, len(buf))
    assert n > 0
    rows = [line.split() for line in buf.value.decode().splitlines()]
    return [(r[0], *map(int, r[1:])) for r in rows]


def _kernel_local_bytes(tmp_path: Path, nvidia: bool) -> dict[str, int]:
    """Static local memory of every attention kernel, from clang's NVPTX compile of the delegate's attention source
    (as NVIDIA's OpenCL builds it with `nvidia`: SDGPU_NV_PTX and SDGPU_NV_SM90)."""
    src = tmp_path / "attn.cl"
    src.write_text(attention_source())
    clang = next((c for c in ("clang-15", "clang-16", "clang-17", "clang-14", "clang") if shutil.which(c)), None)
    assert clang, "clang (installed with PoCL) is needed to compile the kernels for NVPTX"
    ptx = tmp_path / "attn.ptx"
    nv = ["-DSDGPU_NV_PTX=1", "-DSDGPU_NV_SM90=1"] if nvidia else []
    r = subprocess.run([clang, "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl", "-Xclang",
                        "-finclude-default-header", "-Dasm=__asm__", "-O0", "-S", *nv, "-o", str(ptx), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    local: dict[str, int] = {}
    for name, size in re.findall(r"\.shared \.align \d+ \.b8 (attn_\w+?)_\$_\w+\[(\d+)\]", ptx.read_text()):
        local[name] = local.get(name, 0) + int(size)
    return local


def test_backend_neutral_order_and_the_nvidia_merge_keep_the_old_table(lib):
    neutral, nvidia = _table(lib, False), _table(lib, True)
    assert [r[:10] for r in nvidia] == NVIDIA_TABLE
    assert [r[:10] for r in neutral] == [r for r in NVIDIA_TABLE if r[0] not in VENDOR]
    assert {r[0]: r[10] for r in neutral} == {t: b for t, b in FLASH_LOCAL_BYTES.items() if not t.startswith("short")}


@pytest.mark.parametrize("nvidia", [False, True])
def test_local_memory_of_every_tiling_is_the_kernels_own(lib, tmp_path, nvidia):
    kernels = _kernel_local_bytes(tmp_path, nvidia)
    for suffix, *_, flash, stats, pv in _table(lib, nvidia):
        own = {"flash": flash, "stats": stats, "pv": pv}
        for kind, want in own.items():
            name = f"attn_{kind}_{suffix}"
            if suffix in ("f40", "f80", "m40", "m80"):  # flash only: SD_ATTN_MMA
                if kind == "flash":
                    assert kernels[name] == want, name
                continue
            if nvidia and suffix in ("h80", "h160", "h160w"):  # the shuffle exchange needs no local-memory buffer
                assert kernels[name] <= want, name
            else:
                assert kernels[name] == want, name
        if flash and f"attn_flash_ks_{suffix}" in kernels:  # the key split: attn_flash's local arrays
            assert kernels[f"attn_flash_ks_{suffix}"] <= flash
    for bq in (16, 32, 64):
        assert kernels[f"attn_short_q{bq}"] == FLASH_LOCAL_BYTES[f"short{bq}"]
    # NVIDIA allows 48 KiB per work-group: every kernel of its build fits
    if nvidia:
        assert max(kernels.values()) <= 48 * 1024
