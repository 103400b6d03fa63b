"""Vector exp / erfc of the CPU kernels (custom_ops/common/cpu_simd_math.inc) vs float64, on every instruction set.

The softmax of SdAttention, SiLU of SdGroupNorm and SdGelu all use these instead of libm, so their accuracy is
the kernels' accuracy budget: exp must stay within 1e-6 relative of the exact value (measured: <= 1.31 ulp),
with libm's special values. The fixture compiles tests/native/cpu_simd_math_api.cc (all instruction sets, picked by
argument) into a throwaway library, like test_winograd_kernels.py does for the conv kernels.
"""
from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cpu_isa import ENV, ISA_NAMES, best_isa

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "custom_ops"
F32P = np.ctypeslib.ndpointer(dtype=np.float32, flags="C_CONTIGUOUS")
EXP, ERFC = 0, 1
TINY = np.finfo(np.float32).tiny


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    assert cxx, "a C++17 compiler is required for the native kernel tests"
    out = tmp_path_factory.mktemp("simd") / "libsimd_math_test.so"
    subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", f"-I{SRC}",
                    f"-I{HERE}", str(HERE / "cpu_simd_math_api.cc"), "-o", str(out)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.sdsimd_map.argtypes = [ctypes.c_int, ctypes.c_int, F32P, F32P, ctypes.c_int64]
    return lib


@pytest.fixture
def isas(lib, monkeypatch) -> list[int]:
    monkeypatch.delenv(ENV, raising=False)
    best = lib.sdsimd_active_isa()
    assert best == best_isa()
    return list(range(best + 1))


def _map(lib, isa: int, fn: int, x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    y = np.full_like(x, np.nan)
    assert lib.sdsimd_map(isa, fn, x, y, x.size) == 0
    return y


def test_exp_relative_error_over_the_whole_range(lib, isas):
    rng = np.random.default_rng(0)
    # Every normal result: x in [-87.3, 88.7]; an odd count so every tail length of the masked path is used.
    x = np.concatenate([np.linspace(-87.33, 88.72, 1_000_003, dtype=np.float32),
                        rng.uniform(-5, 5, 100_001).astype(np.float32),  # softmax's typical s - m
                        -rng.exponential(3.0, 100_001).astype(np.float32)])
    ref = np.exp(x.astype(np.float64))
    for isa in isas:
        rel = np.abs(_map(lib, isa, EXP, x) / ref - 1.0)
        assert rel.max() <= 2.5e-7, (ISA_NAMES[isa], float(rel.max()), float(x[rel.argmax()]))


def test_exp_special_values_and_gradual_underflow(lib, isas):
    x = np.array([0.0, -0.0, -np.inf, np.inf, np.nan, 88.7, 88.73, 89.0, 1e30, -87.5, -100.0, -103.9, -104.0,
                  -200.0, -1e30], np.float32)
    with np.errstate(over="ignore", under="ignore"):
        expected = np.exp(x.astype(np.float64)).astype(np.float32)  # float32 rounding: denormals, inf, 0
    for isa in isas:
        y = _map(lib, isa, EXP, x)
        assert y[0] == 1.0 and y[1] == 1.0 and y[2] == 0.0 and y[3] == np.inf and np.isnan(y[4]), ISA_NAMES[isa]
        assert np.isfinite(y[5]) and y[6] == np.inf and y[7] == np.inf and y[8] == np.inf
        assert (y[12:] == 0.0).all(), (ISA_NAMES[isa], y[12:])
        # Denormal results (x < -87.3): within one denormal step of the correctly rounded float.
        np.testing.assert_allclose(y[9:12], expected[9:12], rtol=1e-6, atol=2 * 2.0**-149)


def test_erfc_relative_error(lib, isas):
    z = np.concatenate([np.linspace(-4.0, 9.0, 200_003, dtype=np.float32), np.float32([0.0, -0.0, 1e-30, -1e-30])])
    ref = np.array([math.erfc(float(v)) for v in z])
    normal = ref > 1e3 * TINY  # results far from the denormal range
    for isa in isas:
        y = _map(lib, isa, ERFC, z).astype(np.float64)
        rel = np.abs(y[normal] / ref[normal] - 1.0)
        assert rel.max() <= 1e-6, (ISA_NAMES[isa], float(rel.max()), float(z[normal][rel.argmax()]))
        assert np.all(np.abs(y[~normal] - ref[~normal]) <= 1e3 * TINY)


def test_erfc_special_values(lib, isas):
    z = np.array([np.inf, -np.inf, np.nan, 10.5, 11.0, 1e30, -1e30, -6.0], np.float32)
    for isa in isas:
        y = _map(lib, isa, ERFC, z)
        assert y[0] == 0.0 and y[1] == 2.0 and np.isnan(y[2]), (ISA_NAMES[isa], y)
        assert y[3] == 0.0 and y[4] == 0.0 and y[5] == 0.0 and y[6] == 2.0 and y[7] == 2.0


def test_unavailable_isa_is_refused(lib, monkeypatch):
    monkeypatch.setenv(ENV, "generic")
    assert lib.sdsimd_active_isa() == 0  # the cap the kernels honour on every launch
    x = np.zeros(3, np.float32)
    assert lib.sdsimd_map(1, EXP, x, np.empty_like(x), 3) == -1
    assert lib.sdsimd_map(0, 2, x, np.empty_like(x), 3) == -1
