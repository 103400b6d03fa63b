"""tensor_cores=3xtf32 / fp64 for the GEMMs and convolutions (gemm_tc.cl: gemm_x* / conv_x*, and the FP64 gemm_d* /
conv_d*, inline PTX mma.sync + cp.async, built only where the delegate compiles with SDGPU_NV_PTX, i.e. NVIDIA's
OpenCL; FP64 with SDGPU_NV_SM90 too). CI has no NVIDIA device, so here: the NVIDIA-only source compiles for sm_80 (and
with the sm_90 kernels) with clang's NVPTX back end (the compiler PoCL itself installs), on PoCL the
option leaves every GEMM / conv on the same fp32 kernels with bitwise the same results, and gemm_tiles' "BMxBNtc"
form parses and falls back cleanly where the kernels are missing. Numbers and parity on an H200:
lab/tc_gemm_check.py [--mode fp64] and BENCHMARKS.md."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import load_delegate

from harness import make_interpreter
from kernel_dialect import opencl_program_source
from sdconvert.ops.conv2d_winograd import SPEC as WSPEC, Conv2DWinogradAttrs
from sdlite import native
from tflite_gemm_models import (batch_matmul_model, batch_matmul_ref, conv2d_model, conv2d_ref, fully_connected_model,
                                fully_connected_ref, winograd_model)



def _clang() -> str:
    for name in ("clang-15", "clang-16", "clang-17", "clang-14", "clang"):
        if shutil.which(name):
            return name
    raise AssertionError("clang (installed with PoCL) is needed to compile the NVIDIA-only kernels for NVPTX")


@pytest.mark.parametrize("sm90", [False, True])
def test_nvidia_only_kernels_compile_for_sm80(tmp_path, sm90):
    """The delegate's whole kernel source as NVIDIA's OpenCL builds it (SDGPU_NV_PTX; on sm_90 also SDGPU_NV_SM90),
    through clang's NVPTX back end: the tensor-core GEMM / conv / attention kernels are all there (the FP64 ones only
    with SDGPU_NV_SM90: mma.sync m16n8k8 .f64 does not exist before sm_90) and fit 48 KB of local memory each."""
    src = tmp_path / "lib.cl"
    src.write_text(opencl_program_source())  # the whole library: gemm_tc.cl and the attention's SD_ATTN_MMA instances
    ptx = tmp_path / "lib.ptx"
    r = subprocess.run([_clang(), "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl", "-Xclang",
                        "-finclude-default-header", "-Dasm=__asm__", "-DSDGPU_NV_PTX=1", "-O1", "-S", "-o", str(ptx),
                        *(["-DSDGPU_NV_SM90=1"] if sm90 else []), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    text = ptx.read_text()
    entries = set(re.findall(r"\.entry (\w+)\(", text))
    want = {f"{kind}_x{tile}{twin}" for kind in ("gemm",) for tile in ("128x128", "128x64", "64x64")
            for twin in ("", "_gg", "_ln", "_gg_ln")} | {f"conv_x{t}" for t in ("128x128", "128x64", "64x64")}
    fp64 = {f"gemm_d64x64{twin}" for twin in ("", "_gg", "_ln", "_gg_ln")} | {"conv_d64x64"}
    assert want | {"attn_flash_m40", "attn_flash_m80"} <= entries, sorted(want - entries)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in text and "cp.async.cg.shared.global" in text
    f64_mma = "mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64"
    if sm90:
        assert fp64 | {"attn_flash_f40", "attn_flash_f80"} <= entries, sorted(fp64 - entries)
        assert f64_mma in text
        want |= fp64
    else:
        assert not entries & (fp64 | {"attn_flash_f40", "attn_flash_f80"}) and f64_mma not in text
    # every tensor-core kernel fits NVIDIA's 48 KB of static local memory per work-group
    local: dict[str, int] = {}
    for name, size in re.findall(r"\.shared \.align \d+ \.b8 (\w+?)_\$_\w+\[(\d+)\]", text):
        local[name] = local.get(name, 0) + int(size)
    tc_local = {n: v for n, v in local.items() if n.startswith(("gemm_x", "conv_x", "gemm_d", "conv_d"))}
    assert set(tc_local) == want and max(tc_local.values()) <= 48 * 1024, tc_local


def _profiled(model: bytes, inputs: dict, op: str, tmp_path: Path, **options) -> tuple[np.ndarray, list[str]]:
    prof = tmp_path / f"p{len(list(tmp_path.iterdir()))}.json"
    delegate = native.load("opencl", profile_path=str(prof), gemm_autotune=False, **options)
    runner = make_interpreter(model, delegate).get_signature_runner("serving_default")
    out = next(iter(runner(**inputs).values()))
    assert native.stats(delegate)["partitions"] == 1 and native.stats(delegate)["declined_nodes"] == 0
    kernels = [k["name"] for n in json.loads(prof.read_text())["nodes"] if n["op"] == op for k in n["kernels"]]
    return out, kernels


def _cases(rng):
    r = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    x, w, b = r(1, 130, 96), r(72, 96) * 0.1, r(72)
    yield "FULLY_CONNECTED", fully_connected_model(x.shape, w, b, "relu"), {"x": x}, fully_connected_ref(x, w, b, "relu")
    a, bt = r(2, 70, 40), r(2, 90, 40)
    yield "BATCH_MATMUL", batch_matmul_model(a.shape, bt.shape, [2, 70, 90], False, True), {"a": a, "b": bt}, \
        batch_matmul_ref(a, bt, False, True)
    x, w, b = r(1, 12, 12, 32), r(24, 3, 3, 32) * 0.05, r(24)
    yield "CONV_2D", conv2d_model(x.shape, w, b, 2), {"x": x}, conv2d_ref(x, w, b, 2)
    x, w, b = r(1, 16, 16, 32), r(40, 3, 3, 32) * 0.05, r(40)
    opts = WSPEC.encode(Conv2DWinogradAttrs(tile=4, padding="SAME", activation="none"))
    from sdconvert.winograd.reference import direct_conv2d  # noqa: PLC0415

    yield "SdConv2DWinograd", winograd_model(x.shape, w, b, opts), {"x": x}, direct_conv2d(x, w, b, padding="SAME")


@pytest.mark.parametrize("mode", ["3xtf32", "fp64", "auto"])
def test_without_nvidia_the_option_keeps_the_fp32_gemms(tmp_path, rng, mode):
    for op, model, inputs, want in _cases(rng):
        off, k_off = _profiled(model, inputs, op, tmp_path, tensor_cores="off")
        on, k_on = _profiled(model, inputs, op, tmp_path, tensor_cores=mode)
        assert k_on == k_off and not any(k.startswith(("gemm_x", "conv_x", "gemm_d", "conv_d")) for k in k_on), \
            (op, k_on)
        assert np.array_equal(on, off), op
        np.testing.assert_allclose(on.reshape(-1), np.asarray(want).reshape(-1), rtol=1e-4, atol=1e-4)


def test_forced_tensor_core_tiles_fall_back_where_missing(tmp_path, rng):
    """gemm_tiles "64x64tc" names a tensor-core config; PoCL has none, so the GEMM falls back to the untiled kernel
    (same numbers), as for any config a backend lacks."""
    op, model, inputs, want = next(_cases(rng))
    out, kernels = _profiled(model, inputs, op, tmp_path, gemm_tiles="64x64tc")
    assert kernels and not any(k.startswith(("gemm_x", "gemm_t")) for k in kernels), kernels
    np.testing.assert_allclose(out.reshape(-1), np.asarray(want).reshape(-1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("value", ["64x64tc", "128x64tc/2"])
def test_gemm_tiles_tc_form_is_accepted(value):
    load_delegate(str(native.delegate_path()), {"backend": "opencl", "gemm_tiles": value})


@pytest.mark.parametrize("value", ["64x64tcn128", "64x64t", "tc64x64"])
def test_gemm_tiles_tc_form_malformed(value):
    with pytest.raises(ValueError, match=r"expected BMxBN\[nTHREADS\|tc\]\[/splits\]"):
        load_delegate(str(native.delegate_path()), {"backend": "opencl", "gemm_tiles": value})
