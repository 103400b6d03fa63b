"""The C ABI declarations (custom_ops/abi/tflite_abi.h) pin the LP64 layout with static asserts: they compile for
aarch64 Linux with the cross compiler (as in the aarch64 builds), and an ILP32 Arm target fails on them."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "custom_ops"
CROSS = "aarch64-linux-gnu-g++"  # scripts/install_build_tools.sh


def _syntax_check(*flags: str) -> subprocess.CompletedProcess:
    assert shutil.which(CROSS), f"{CROSS} is missing: run scripts/install_build_tools.sh"
    return subprocess.run([CROSS, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", f"-I{SRC}", *flags,
                           "-x", "c++", "-"], input='#include "abi/tflite_abi.h"\n', capture_output=True, text=True)


def test_static_asserts_hold_for_lp64_aarch64():
    r = _syntax_check()
    assert r.returncode == 0, r.stderr


def test_static_asserts_reject_an_ilp32_target():
    r = _syntax_check("-mabi=ilp32")
    assert r.returncode != 0
    assert "static assertion failed: sdgpu delegate supports LP64 targets only" in r.stderr
