"""The pyopencl kernel labs of scripts/h200 (skinny_lab.py, attn_lab.py, wino_lab.py, lds_lab.py; ptx_probe.py and
mma_lab.py / mma_attn_lab.py, NVIDIA only) on this machine's OpenCL (PoCL in CI).

They compile the delegate's own kernel source outside the delegate, so a change to the kernel files or to
CMake's list of them can break them silently; and their candidate kernels must compute what they time. Each lab
checks every timed kernel against a float64 numpy reference and exits non-zero on a wrong result, so these runs
fail on a broken kernel, not only on a crash.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

LABS = Path(__file__).resolve().parents[2] / "scripts" / "h200"


def _run(tmp_path: Path, script: str, *args: str) -> dict:
    out = tmp_path / "lab.json"
    proc = subprocess.run([sys.executable, str(LABS / script), "--quick", "--runs", "1", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("mode", [[], ["--layout"], ["--rsplit"], ["--v4"], ["--v4", "--splits", "1,3"], ["--tm32"]])
def test_skinny_lab_checks_every_kernel(tmp_path: Path, mode: list[str]) -> None:
    rows = _run(tmp_path, "skinny_lab.py", *mode)["rows"]
    shapes = {r["shape"] for r in rows}
    assert shapes == {"quick F4", "quick F2 m13", "quick m32"}
    for shape in shapes:
        mine = [r for r in rows if r["shape"] == shape]
        assert [r["config"] for r in mine][:2] == ["lib gemm_t16x64", "read (U bytes)"]
        checked = [r for r in mine if r["config"].startswith(("lib", "sv", "v4")) and "NO" not in r["config"]
                   and not r["config"].endswith("gemm-only")]  # timings without a result to check
        assert len(checked) >= 3 and all(r["err"] < 1e-5 and r["ms"] > 0 for r in checked)
    if mode == ["--rsplit"]:
        assert any("RSPLIT2" in r["config"] for r in rows) and any("NOLOAD1" in r["config"] for r in rows)
    if mode == ["--v4"]:  # the library's gemm_s16x128 at other instantiations, one with split-K
        assert any(r["config"].startswith("v4") and r["config"].endswith("S2") for r in rows)
    if mode[1:] == ["--splits", "1,3"]:  # two base instantiations at 1 and 3 splits, + the 3-split GEMMs alone
        v4 = [r["config"] for r in rows if r["shape"] == "quick F4" and r["config"].startswith("v4")]
        assert len(v4) == 6 and sum(c.endswith("S3 gemm-only") for c in v4) == 2
    if mode == ["--tm32"]:  # the 32-row tiles (two work-items per column) on every shape, M = 13 and 32 included
        assert sum("TM32" in r["config"] for r in rows) == 3 * 4
    if mode == ["--layout"]:
        assert any("BL1" in r["config"] for r in rows) and any(r["config"] == "read per-wg slabs" for r in rows)


def test_attn_lab_checks_every_variant(tmp_path: Path) -> None:
    rows = _run(tmp_path, "attn_lab.py")["rows"]
    configs = {(r["shape"], r["config"]) for r in rows}
    assert ("quick d40", "lib attn_flash_r40") in configs and ("quick d80", "lib attn_flash_r80") in configs
    assert len(rows) == 7  # 2 library builds x 2 shapes + 2 + 1 extra instantiations, every one within 1e-4
    assert all(r["err"] < 1e-4 for r in rows)


def test_attn_lab_key_split_sweep_checks_every_split(tmp_path: Path) -> None:
    # quick d80: 19 key tiles, all of 1 / 2 / 7 splits; quick d160: 5 tiles, so 7 splits is skipped
    rows = _run(tmp_path, "attn_lab.py", "--splits", "1,2,7")["rows"]
    assert sorted((r["shape"], r["splits"]) for r in rows) == [
        ("quick d160", 1), ("quick d160", 2), ("quick d80", 1), ("quick d80", 2), ("quick d80", 7),
        ("quick d80 h80", 1), ("quick d80 h80", 2), ("quick d80 h80", 7)]
    assert all(r["err"] < 1e-4 for r in rows)


def test_attn_lab_small_runs_every_kernel_family(tmp_path: Path) -> None:
    # the short-sequence sweep: all four d40 kernels (tiled, row-wise, dyn, fallback) and the three one-launch
    # attn_short_q* on a cross-attention shape (77 keys), all six d160 ones and attn_short_q* on a 40-key
    # self-attention shape, each checked against float64 before it is timed
    rows = _run(tmp_path, "attn_lab.py", "--small")["rows"]
    short = {f"attn_short_q{bq}" for bq in (64, 32, 16)}
    assert {(r["shape"], r["config"]) for r in rows} == {
        (shape, f"attn_flash{k}") for shape, kernels in (("quick cross d40", ("_d40", "_r40", "_dyn", "")),
                                                          ("quick self d160",
                                                           ("_r160", "_h160", "_h160w", "_d160", "_dyn", "")))
        for k in kernels} | {(shape, k) for shape in ("quick cross d40", "quick self d160") for k in short}
    assert all(r["err"] < 1e-4 for r in rows)


def test_attn_lab_xs_checks_every_head_dim_split(tmp_path: Path) -> None:
    # --xs on PoCL: the library's row-wise tilings and every XS_EXTRA instantiation (4 / 8 lanes per row, built with
    # the local-memory exchange here; the shfl.sync build needs NVIDIA) checked against float64 before timing
    rows = _run(tmp_path, "attn_lab.py", "--xs")["rows"]
    labels = {(r["shape"], r["config"].split(" (")[0]) for r in rows}
    assert labels == ({("quick d40", "lib r40")} | {("quick d40", f"local x{i}") for i in (1, 2, 3, 4, 5, 6, 7)}
                      | {("quick d80", f"lib {t}") for t in ("r80", "h80")}
                      | {("quick d80", f"local y{i}") for i in (1, 2, 4, 5, 6)}
                      | {("quick d160", f"lib {t}") for t in ("r160", "h160", "h160w")}
                      | {("quick d160", f"local z{i}") for i in (1, 2, 3)})
    assert all(r["err"] < 1e-4 for r in rows)


def test_attn_lab_reqd_checks_both_builds(tmp_path: Path) -> None:
    # --reqd: the attention file as the library has it and with reqd_work_group_size on the row-wise kernels (PoCL
    # rejects a launch whose local size differs, so this also checks the attribute matches the host's NT)
    rows = _run(tmp_path, "attn_lab.py", "--reqd")["rows"]
    assert {(r["shape"], r["config"]) for r in rows} == {
        (shape, f"{b} attn_flash_{t}") for shape, t in (("quick d40", "r40"), ("quick d80", "h80"))
        for b in ("lib", "reqd")}
    assert all(r["err"] < 1e-4 for r in rows)


def test_lds_lab_times_every_load_kind(tmp_path: Path) -> None:
    """The local-memory / FMA microbenchmark (no numerical result to check): every load kind at both quick FMA
    counts builds, runs and reports a positive time and rate."""
    out = tmp_path / "lds.json"
    proc = subprocess.run([sys.executable, str(LABS / "lds_lab.py"), "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["kind"], r["fma_per_load"]) for r in rows} == {
        (k, f) for k in ("lds4_bcast", "lds4_distinct", "l1_4_bcast", "lds1_bcast", "none") for f in (4, 8)}
    assert all(r["ms"] > 0 and r["tfma_s"] > 0 for r in rows)


def test_wino_lab_checks_every_split_transform(tmp_path: Path) -> None:
    """wino_lab.py's split transforms (wino_split.cl) against the library's, every quick shape and transform: the
    lab exits 1 on a mismatch, and every row here must carry both timings."""
    rows = _run(tmp_path, "wino_lab.py")["rows"]
    assert {r["shape"] for r in rows} == {"b1 12x12 40 F6", "b2 9x9 24 F4", "b1 8x8 70 F2"}
    assert len(rows) == 9 and {r["transform"] for r in rows} == {"input gnsilu", "output", "output + residual"}
    assert all(r["err"] < 1e-5 and r["lib_ms"] > 0 and r["split_ms"] > 0 for r in rows)


def test_skinny_lab_async_ring_needs_nvidia_and_builds_its_instantiations(tmp_path: Path) -> None:
    """--async (cp.async ring, inline PTX) refuses a non-NVIDIA device before building anything; its source is the
    library plus skinny_ring.cl with one SD_GEMM_SKINNY4A line per distinct ring inside the SDGPU_NV_PTX block."""
    proc = subprocess.run([sys.executable, str(LABS / "skinny_lab.py"), "--async", "--quick", "--out",
                           str(tmp_path / "ring.json")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "needs NVIDIA's OpenCL" in proc.stdout
    assert not (tmp_path / "ring.json").exists()
    sys.path.insert(0, str(LABS))
    try:
        import skinny_lab
    finally:
        sys.path.remove(str(LABS))
    cfgs = skinny_lab.async_configs(False)
    src = skinny_lab.v4_source(cfgs)
    block = src[src.rindex("#if defined(SDGPU_NV_PTX)"):]
    rings = {(c["CW"], c["KL"], c["KC"], c["PD"], c["NG"], c["LY"], c["NOMATH"]) for c in cfgs if "NG" in c}
    assert block.count("SD_GEMM_SKINNY4A(ga_") == len(rings) > 0
    assert block.index("SD_GEMM_SKINNY4A(ga_") < block.index("#endif  // SDGPU_NV_PTX")
    assert src.count("SD_GEMM_SKINNY4(gv_128_4_128_4_1_16") == 1  # the library's gemm_s16x128, side by side
    # every ring fits NVIDIA's 48 KB of local memory with room to spare (A chunk + ring, float4 = 16 bytes)
    assert all((kc * 4 + pd * ng * cw // 4 * kl) * 16 <= 40 * 1024 for cw, kl, kc, pd, ng, _, _ in rings)


def test_labs_build_the_library_as_the_delegate_does() -> None:
    """On NVIDIA the delegate builds with -DSDGPU_NV_PTX=1 (opencl_device.cc), so the labs' library rows do too,
    unless a variant sets SDGPU_NV_PTX itself (attn_lab --xs builds the portable exchange with =0); elsewhere
    nothing is added."""
    sys.path.insert(0, str(LABS))
    try:
        from cl_lab import delegate_options
    finally:
        sys.path.remove(str(LABS))
    assert delegate_options("", True) == "-DSDGPU_NV_PTX=1"
    assert delegate_options("-DKIND=1", True) == "-DKIND=1 -DSDGPU_NV_PTX=1"
    assert delegate_options("-DSDGPU_NV_PTX=0", True) == "-DSDGPU_NV_PTX=0"
    assert delegate_options("-DKIND=1", False) == "-DKIND=1" and delegate_options("", False) == ""


def test_tensor_core_labs_need_nvidia_opencl(tmp_path: Path) -> None:
    """ptx_probe.py / mma_lab.py / mma_attn_lab.py use inline PTX (mma.sync), which only NVIDIA's OpenCL compiles.
    Elsewhere (PoCL in CI) the probe reports the refused build in its JSON and exits 1, and the GEMM and attention
    labs refuse before building; none reports a number."""
    out = tmp_path / "ptx.json"
    probe = subprocess.run([sys.executable, str(LABS / "ptx_probe.py"), "--out", str(out)], capture_output=True,
                           text=True, timeout=600)
    report = json.loads(out.read_text())
    if "NVIDIA" in report["device"]:
        pytest.fail("this test expects a non-NVIDIA OpenCL device (PoCL in CI)")
    assert probe.returncode == 1 and "build failed" in probe.stdout
    assert report["build"] != "ok" and "mma_rate" not in report
    for script in ("mma_lab.py", "mma_attn_lab.py"):
        lab = subprocess.run([sys.executable, str(LABS / script), "--out", str(tmp_path / "mma.json")],
                             capture_output=True, text=True, timeout=600)
        assert lab.returncode == 2 and "needs NVIDIA's OpenCL" in lab.stdout, script
        assert not (tmp_path / "mma.json").exists()
