"""C++ CPU conv kernels (Winograd F2/F4/F6 + direct) vs the float64 numpy reference, called via ctypes.

The fixture compiles ``custom_ops/ops/conv2d_winograd/{cpu,testing_c_api}.cc`` and the thread pool with the
system C++ compiler into a throwaway library (about 2 s), so these tests exercise the kernels themselves,
independently of TFLite and of the delegate build; test_winograd_delegate.py covers the op end to end.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cpu_isa import ENV as ISA_ENV
from cpu_isa import available_isas
from sdconvert.winograd.accuracy import SMALL_SHAPES, measure, random_problem
from sdconvert.winograd.buffers import kernel_buffers
from sdconvert.winograd.convspec import ConvSpec
from sdconvert.ops.conv2d_reference import ACTIVATIONS
from sdconvert.winograd.reference import direct_conv2d, direct_error_bound, winograd_error_bound

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "custom_ops"
F32P = np.ctypeslib.ndpointer(dtype=np.float32, flags="C_CONTIGUOUS")
I64 = ctypes.c_int64


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    assert cxx, "a C++17 compiler is required for the native kernel tests"
    out = tmp_path_factory.mktemp("wino") / "libwino_test.so"
    srcs = [SRC / "ops/conv2d_winograd/cpu.cc", SRC / "ops/conv2d_winograd/testing_c_api.cc",
            SRC / "common/thread_pool.cc"]
    subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-Wall", "-Werror", f"-I{SRC}",
                    *map(str, srcs), "-o", str(out), "-lpthread"], check=True)
    lib = ctypes.CDLL(str(out))
    lib.sdwino_winograd_conv.argtypes = [ctypes.c_int] * 4 + [F32P, I64, I64, I64, I64, F32P, I64, F32P, F32P,
                                                              ctypes.POINTER(I64), ctypes.POINTER(I64)]
    lib.sdwino_direct_conv.argtypes = [ctypes.c_int] * 3 + [I64] * 4 + [F32P, I64, I64, I64, I64, F32P, I64, I64, I64,
                                                                       ctypes.c_void_p, F32P]
    return lib


def native_winograd(lib: ctypes.CDLL, x: np.ndarray, w: np.ndarray, b: np.ndarray, m: int = 4,
                    padding: str = "SAME", activation: str = "none", threads: int = 2,
                    sizes: dict | None = None) -> np.ndarray:
    n, h, wd, cin = x.shape
    cout = w.shape[0]
    ho, wo = (h, wd) if padding == "SAME" else (h - 2, wd - 2)
    y = np.full((n, ho, wo, cout), np.nan, dtype=np.float32)
    scratch, tw = I64(), I64()
    rc = lib.sdwino_winograd_conv(m, padding == "SAME", ACTIVATIONS.index(activation), threads,
                                  np.ascontiguousarray(x, np.float32), n, h, wd, cin,
                                  np.ascontiguousarray(w, np.float32), cout, np.ascontiguousarray(b, np.float32), y,
                                  ctypes.byref(scratch), ctypes.byref(tw))
    assert rc == 0
    if sizes is not None:
        sizes.update(scratch_bytes=scratch.value, transformed_weight_elements=tw.value)
    return y


def native_direct(lib: ctypes.CDLL, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int = 1,
                  dilation: int = 1, padding: str = "SAME", activation: str = "none") -> np.ndarray:
    n, h, wd, cin = x.shape
    cout, kh, kw, _ = w.shape
    if padding == "SAME":
        ho, wo = -(-h // stride), -(-wd // stride)
    else:
        ho, wo = (h - (kh - 1) * dilation - 1) // stride + 1, (wd - (kw - 1) * dilation - 1) // stride + 1
    y = np.full((n, ho, wo, cout), np.nan, dtype=np.float32)
    bias = None if b is None else np.ascontiguousarray(b, np.float32)
    rc = lib.sdwino_direct_conv(padding == "SAME", ACTIVATIONS.index(activation), 2, stride, stride, dilation,
                                dilation, np.ascontiguousarray(x, np.float32), n, h, wd, cin,
                                np.ascontiguousarray(w, np.float32), cout, kh, kw,
                                None if bias is None else bias.ctypes.data, y)
    assert rc == 0
    return y


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("m", [2, 4, 6])
@pytest.mark.parametrize("shape", [(1, 16, 16, 32, 32), (2, 8, 8, 64, 48), (1, 13, 11, 70, 33), (1, 3, 4, 3, 5)])
def test_winograd_kernel_within_bound(lib: ctypes.CDLL, shape: tuple[int, ...], m: int, padding: str) -> None:
    x, w, b = random_problem(shape, seed=m)
    got = native_winograd(lib, x, w, b, m, padding)
    want = direct_conv2d(x, w, b, padding)
    assert got.shape == want.shape and np.isfinite(got).all()
    err = np.abs(got - want)
    assert (err <= winograd_error_bound(x, w, b, m, padding)).all(), err.max()
    assert err.max() <= 5e-5 * np.abs(want).max()


def test_native_error_per_tile_reported_and_ordered(lib: ctypes.CDLL, capsys: pytest.CaptureFixture[str]) -> None:
    def conv(x, w, b, m, padding):  # noqa: ANN001, ANN202 - accuracy.measure's conv signature
        return native_winograd(lib, x, w, b, m, padding)

    rows = measure(SMALL_SHAPES, conv=conv, include_direct=False)
    with capsys.disabled():
        for r in rows:
            print(f"\n  native F{r.tile} {r.shape}: max abs err {r.max_abs_err:.2e}, rel {r.max_rel_err:.2e}, "
                  f"err/bound {r.bound_ratio:.1e}", end="")
    for shape in SMALL_SHAPES:
        errs = [r.max_abs_err for r in rows if r.shape == shape]
        assert errs == sorted(errs), (shape, errs)
        assert all(r.bound_ratio <= 1 for r in rows)


@pytest.mark.parametrize("activation", ["relu", "relu6", "relu_n1_to_1", "tanh"])
def test_winograd_kernel_activation(lib: ctypes.CDLL, activation: str) -> None:
    x, w, b = random_problem((1, 9, 9, 16, 24), seed=7)
    x *= 4
    got = native_winograd(lib, x, w, b, 6, "SAME", activation)
    np.testing.assert_allclose(got, direct_conv2d(x, w, b, "SAME", activation), rtol=0, atol=1e-4)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_kernel_buffer_sizes_match_the_planner(lib: ctypes.CDLL, m: int) -> None:
    x, w, b = random_problem((2, 13, 11, 24, 40), seed=1)
    sizes: dict = {}
    native_winograd(lib, x, w, b, m, "VALID", sizes=sizes)
    bufs = kernel_buffers(ConvSpec("c", 2, 13, 11, 24, 40, padding="VALID"), m)
    assert sizes == {"scratch_bytes": 4 * bufs.scratch, "transformed_weight_elements": bufs.transformed_weights}


def test_threads_do_not_change_results(lib: ctypes.CDLL) -> None:
    x, w, b = random_problem((2, 12, 12, 40, 40), seed=2)
    one = native_winograd(lib, x, w, b, 4, threads=1)
    four = native_winograd(lib, x, w, b, 4, threads=4)
    np.testing.assert_array_equal(one, four)


@pytest.mark.parametrize("kernel, stride, dilation, padding", [
    (3, 1, 1, "SAME"), (3, 2, 1, "SAME"), (3, 2, 1, "VALID"), (1, 1, 1, "SAME"), (3, 1, 2, "SAME"),
    (4, 2, 1, "SAME"), (5, 3, 1, "VALID")])
def test_direct_kernel(lib: ctypes.CDLL, kernel: int, stride: int, dilation: int, padding: str) -> None:
    import torch

    rng = np.random.default_rng(kernel * 10 + stride)
    x = rng.standard_normal((2, 11, 10, 12)).astype(np.float32)
    w = (rng.standard_normal((9, kernel, kernel, 12)) / np.sqrt(kernel * kernel * 12)).astype(np.float32)
    b = rng.standard_normal(9).astype(np.float32)
    got = native_direct(lib, x, w, b, stride, dilation, padding, "relu6")
    # torch in float64 with TFLite SAME padding (extra row/column at the bottom/right)
    xt = torch.from_numpy(x.astype(np.float64)).permute(0, 3, 1, 2)
    if padding == "SAME":
        eff = (kernel - 1) * dilation + 1
        pads = []
        for size in (10, 11):                                    # width first for F.pad
            out = -(-size // stride)
            total = max((out - 1) * stride + eff - size, 0)
            pads += [total // 2, total - total // 2]
        xt = torch.nn.functional.pad(xt, pads)
    want = torch.nn.functional.conv2d(xt, torch.from_numpy(w.astype(np.float64)).permute(0, 3, 1, 2),
                                      torch.from_numpy(b.astype(np.float64)), stride=stride, dilation=dilation)
    want = want.clamp(0, 6).permute(0, 2, 3, 1).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    if kernel == 3 and stride == 1 and dilation == 1:
        bound = direct_error_bound(x, w, b, padding)
        assert (np.abs(got - direct_conv2d(x, w, b, padding, "relu6")) <= bound).all()


def test_direct_kernel_without_bias(lib: ctypes.CDLL) -> None:
    x, w, _ = random_problem((1, 6, 6, 5, 7), seed=4)
    np.testing.assert_allclose(native_direct(lib, x, w, None), direct_conv2d(x, w), rtol=0, atol=1e-5)


@pytest.mark.parametrize("isa", available_isas())
@pytest.mark.parametrize("m", [2, 4, 6])
def test_every_instruction_set_within_bound(lib: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch, isa: str,
                                            m: int) -> None:
    # The batched GEMM's register tiles: 70 output channels = full vector panels + a partial last vector on
    # every width (4/8/16); 2 x 9 x 10 pixels give tile counts that are not multiples of the 4/8-row groups.
    monkeypatch.setenv(ISA_ENV, isa)
    x, w, b = random_problem((2, 9, 10, 37, 70), seed=3)
    got = native_winograd(lib, x, w, b, m, "SAME", threads=3)
    want = direct_conv2d(x, w, b, "SAME")
    assert (np.abs(got - want) <= winograd_error_bound(x, w, b, m, "SAME")).all()
