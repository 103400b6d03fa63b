"""The benchmark kit's side-by-side helpers (bench/README.md): nothing in bench/ is dead. Every file is documented in
the kit's README, every entry point starts (`python -m bench.NAME --help`), every shell script parses, and the two
kernel micro-benchmarks run their quick form on this machine's OpenCL (PoCL in CI), with the delegate's GEMM configs
all forced and the attention rows checked against float64. (prepare.sh, run.sh's bench.py and the e2e stage run end to
end in tests/sdlite/test_h200_kit.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdlite import native

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _run(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SDLITE_DELEGATE_PATH": str(native.delegate_path())}
    r = subprocess.run([str(a) for a in args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r


def entry_points() -> list[str]:
    return sorted(p.stem for p in BENCH.glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


def test_readme_names_every_file() -> None:
    readme = (BENCH / "README.md").read_text()
    files = sorted(p.name for p in BENCH.iterdir() if p.is_file() and p.name not in ("README.md", "__init__.py"))
    assert len(files) > 15
    assert [f for f in files if f not in readme] == []


@pytest.mark.parametrize("name", entry_points())
def test_entry_point_starts(name: str) -> None:
    out = _run(sys.executable, "-m", f"bench.{name}", "--help", timeout=120).stdout
    assert "usage:" in out or name == "cl_info"  # cl_info takes no options: it lists the OpenCL devices


def test_every_entry_point_is_covered() -> None:
    assert {"bench", "worker", "pack", "weights", "lib_ab", "option_sweep", "precision_ab", "opencl_gemm_bench",
            "opencl_attn_bench", "cl_info"} <= set(entry_points())


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.sh")))
def test_shell_script_parses(script: str) -> None:
    _run("bash", "-n", BENCH / script)


def test_gemm_micro_benchmark_forces_every_config(tmp_path: Path) -> None:
    _run(sys.executable, "-m", "bench.opencl_gemm_bench", "--lib", native.delegate_path(), "--out", tmp_path, "--quick",
         "--phases", "micro")
    rows = json.loads((tmp_path / "gemm_bench.json").read_text())["micro"]
    cases = {r["case"] for r in rows}
    assert cases == {"small fc", "small bmm", "small 3x3", "small F4"}
    assert {(r["case"], r["config"]) for r in rows} == {(c, k) for c in cases for k in ("auto", "64x64", "128x64",
                                                                                       "128x128")}
    assert all(r["device_ms"] > 0 and r["kernels"] for r in rows)


def test_attention_micro_benchmark_checks_every_row(tmp_path: Path) -> None:
    _run(sys.executable, "-m", "bench.opencl_attn_bench", "--lib", native.delegate_path(), "--out", tmp_path, "--quick")
    data = json.loads((tmp_path / "attn_bench.json").read_text())
    assert len(data["attn"]) >= 10 and all(r["device_ms"] > 0 and r["rel_to_ref"] < 1e-4 for r in data["attn"])
    assert set(data["attn_per_step_ms"]) == {"unfused", "fused_auto_flash", "fused_auto_partial", "fused_best"}


def test_no_test_imports_a_script_or_the_lab_by_path() -> None:
    """Tests import the kit as the package it is and never put scripts/, bench/ or lab/ on sys.path or load a file of
    theirs by path; lab/ is imported by nothing."""
    bad = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__).resolve():
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            by_path = "sys.path" in line or "spec_from_file_location" in line
            named = any(f'"{d}"' in line or f"'{d}'" in line or f"/{d}/" in line for d in ("scripts", "bench", "lab"))
            if by_path and named:
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
            if "import tc_gemm_check" in line or "import tc_attention_check" in line or "from lab" in line:
                bad.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert bad == []
