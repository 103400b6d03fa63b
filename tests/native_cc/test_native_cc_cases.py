"""The op-case file of the native C++ test (data/tiny_unet_ops.bin) and the test program itself.

The stored references must be what the ops mean (float64 numpy definitions of sdconvert.ops) and what the x86-64
delegate computes through ai-edge-litert, within 1e-5 relative; the C++ program (tiny_unet_ops_test.cc, compiled here
against the installed delegate, as Bazel builds it) must pass on the file and fail, naming the case, on a file with
one perturbed value. Bazel runs the same program on x86-64 and, under qemu, on aarch64 (scripts/test_native_builds.sh).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import harness
from make_tiny_unet_ops import delegate_outputs, numpy_reference
from op_cases import OUTPUT, Case, read_cases, sample_indices, write_cases

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES = HERE / "data" / "tiny_unet_ops.bin"
RTOL = 1e-5


def _check_against(case: Case, full: dict[int, np.ndarray]) -> None:
    """The stored sample and sums of each output agree with `full` (complete outputs) as the C++ test demands."""
    for i, t in enumerate(case.tensors):
        if t.kind != OUTPUT:
            continue
        flat = full[i].reshape(-1).astype(np.float64)
        expected = t.sample.astype(np.float64)
        bound = RTOL * (np.abs(expected) + t.max_abs)
        assert (np.abs(flat[sample_indices(flat.size)] - expected) <= bound).all(), case.name
        sum_bound = RTOL * (t.abs_sum + flat.size * t.max_abs)
        assert abs(flat.sum() - t.sum) <= sum_bound and abs(np.abs(flat).sum() - t.abs_sum) <= sum_bound, case.name


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return read_cases(CASES)


def test_cases_cover_every_fused_op_and_a_chain(cases):
    ops = {n.op for c in cases for n in c.nodes}
    assert ops == {"SdAttention", "SdConv2DWinograd", "SdGelu", "SdGroupNorm"}
    assert len(cases) == 37
    chain = next(c for c in cases if c.name == "resnet_chain_8x8x32")
    assert [n.op for n in chain.nodes] == ["SdGroupNorm", "SdConv2DWinograd"] * 2


def test_references_are_the_numpy_definitions(cases):
    for case in cases:
        _check_against(case, numpy_reference(case))


def test_references_are_what_the_x86_delegate_computes(cases):
    for case in cases:
        _check_against(case, delegate_outputs(case))


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cxx = shutil.which("c++") or shutil.which("g++")
    assert cxx, "a C++17 compiler is required for the native tests"
    out = tmp_path_factory.mktemp("native_cc") / "tiny_unet_ops_test"
    srcs = [HERE / f for f in ("tiny_unet_ops_test.cc", "mini_runtime.cc", "op_cases.cc")]
    subprocess.run([cxx, "-O2", "-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{ROOT}", f"-I{ROOT / 'custom_ops'}",
                    *map(str, srcs), "-o", str(out), "-ldl"], check=True)
    return out


def test_native_program_passes_on_the_stored_cases(program, delegate_lib):
    r = subprocess.run([str(program), str(delegate_lib), str(CASES)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "built for x86-64, backend cpu, 37 cases" in r.stdout
    assert r.stdout.rstrip().endswith("PASS: 37 of 37 cases passed")


def test_native_program_fails_on_a_perturbed_reference(program, delegate_lib, cases, tmp_path):
    victim = next(c for c in cases if c.name.startswith("SdAttention"))
    out = next(t for t in victim.tensors if t.kind == OUTPUT)
    out.sample = out.sample.copy()
    out.sample[3] += np.float32(3 * RTOL * (abs(out.sample[3]) + out.max_abs))
    bad = tmp_path / "bad.bin"
    write_cases(bad, cases)
    r = subprocess.run([str(program), str(delegate_lib), str(bad)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout
    failed = [line for line in r.stdout.splitlines() if line.startswith("FAIL ")]
    assert len(failed) == 1 and failed[0].split()[1] == victim.name, r.stdout
    element = sample_indices(int(np.prod(out.dims)))[3]
    assert f"output {victim.tensors.index(out)}: element {element}:" in failed[0]
    assert r.stdout.rstrip().endswith("FAIL: 36 of 37 cases passed")


def test_native_program_rejects_bad_input(program, delegate_lib, tmp_path):
    r = subprocess.run([str(program), str(delegate_lib)], capture_output=True, text=True)
    assert r.returncode == 2 and "usage:" in r.stderr
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(CASES.read_bytes()[:1000])
    r = subprocess.run([str(program), str(delegate_lib), str(truncated)], capture_output=True, text=True)
    assert r.returncode == 2 and "truncated or malformed case" in r.stderr
    r = subprocess.run([str(program), str(tmp_path / "missing.so"), str(CASES)], capture_output=True, text=True)
    assert r.returncode == 2 and "dlopen failed" in r.stderr


def test_native_program_reports_delegate_option_errors(program, delegate_lib):
    r = subprocess.run([str(program), str(delegate_lib), str(CASES), "--backend", "vulkan"], capture_output=True,
                       text=True)
    assert r.returncode == 2
    assert r.stderr.strip().endswith(
        "tflite_plugin_create_delegate failed: sdgpu: unknown backend 'vulkan' (expected cpu, opencl or gl)")
