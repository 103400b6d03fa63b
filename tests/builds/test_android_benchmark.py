"""scripts/android_benchmark.sh, the Android runbook: the exact adb / benchmark_model commands it prints when no
device is attached (dry run), what it runs when one is (a fake adb records the calls), and its argument errors."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "android_benchmark.sh"
DEV = "/data/local/tmp/sdconvert"

FAKE_ADB = """#!/bin/sh
echo "$*" >> "$ADB_LOG"
if [ "$1" = devices ]; then
  printf 'List of devices attached\\n'
  [ -z "$ADB_DEVICE" ] || printf '%s\\tdevice\\n' "$ADB_DEVICE"
fi
exit 0
"""


@pytest.fixture
def converted(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "sd-tiny"
    folder.mkdir()
    for name in ("text_encoder", "unet", "vae_decoder"):
        (folder / f"{name}.tflite").write_bytes(b"TFL3")
    (folder / "manifest.json").write_text("{}")
    delegate = tmp_path / "libsdgpu_delegate.so"
    delegate.write_bytes(b"\x7fELF")
    return folder, delegate


def _run(tmp_path: Path, *args: str, adb: str | None = None, device: str = "") -> subprocess.CompletedProcess:
    """Runs the script with PATH = a folder of the tools it needs (+ a fake adb when `adb` is its script)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("awk", "basename", "sed"):
        target = bin_dir / tool
        if not target.exists():
            target.symlink_to(shutil.which(tool))
    if adb is not None:
        (bin_dir / "adb").write_text(adb)
        (bin_dir / "adb").chmod(0o755)
    env = {"PATH": str(bin_dir), "ADB_LOG": str(tmp_path / "adb.log"), "ADB_DEVICE": device,
           "HOME": os.environ.get("HOME", "/")}
    return subprocess.run(["/bin/bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def _bench(model: str, options: str, binary: str = "/data/local/tmp/benchmark_model", runs: int = 10) -> str:
    return (f'+ adb shell "{binary} --graph={DEV}/sd-tiny/{model}.tflite --external_delegate_path={DEV}/'
            f"libsdgpu_delegate.so --external_delegate_options='{options}' --num_threads=4 --num_runs={runs} "
            f'--warmup_runs=1 --enable_op_profiling=true"')


def test_dry_run_without_adb_prints_every_command(tmp_path, converted):
    folder, delegate = converted
    r = _run(tmp_path, str(folder), str(delegate))
    assert r.returncode == 0, r.stderr
    opencl = f"backend:opencl;opencl_cache_dir:{DEV}/cache"
    assert r.stdout.splitlines() == [
        "android_benchmark.sh: adb not found: dry run, the commands are:",
        f'+ adb shell "mkdir -p {DEV}/cache"',
        f"+ adb push {delegate} {DEV}/libsdgpu_delegate.so",
        f"+ adb push {folder} {DEV}/",
        _bench("text_encoder", opencl),
        _bench("unet", opencl),
        _bench("vae_decoder", opencl),
    ]


def test_dry_run_when_no_device_is_attached(tmp_path, converted):
    folder, delegate = converted
    r = _run(tmp_path, "--backend", "gl", "--models", "unet", "--benchmark-model", str(delegate), "--num-runs", "3",
             "--delegate-options", "num_threads:4;log_level:info", str(folder), str(delegate), adb=FAKE_ADB)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "android_benchmark.sh: no device attached: dry run, the commands are:",
        f'+ adb shell "mkdir -p {DEV}/cache"',
        f"+ adb push {delegate} {DEV}/libsdgpu_delegate.so",
        f"+ adb push {folder} {DEV}/",
        f"+ adb push {delegate} {DEV}/benchmark_model",
        f'+ adb shell "chmod +x {DEV}/benchmark_model"',
        _bench("unet", "backend:gl;num_threads:4;log_level:info", binary=f"{DEV}/benchmark_model", runs=3),
    ]
    assert (tmp_path / "adb.log").read_text() == "devices\n"  # it only asked


def test_with_a_device_it_runs_the_commands(tmp_path, converted):
    folder, delegate = converted
    r = _run(tmp_path, "--serial", "R5CT", "--backend", "cpu", "--models", "unet,vae_decoder", str(folder),
             str(delegate), adb=FAKE_ADB, device="R5CT")
    assert r.returncode == 0, r.stderr
    assert "dry run" not in r.stdout
    bench = (f"shell /data/local/tmp/benchmark_model --graph={DEV}/sd-tiny/{{}}.tflite --external_delegate_path="
             f"{DEV}/libsdgpu_delegate.so --external_delegate_options='backend:cpu' --num_threads=4 --num_runs=10 "
             "--warmup_runs=1 --enable_op_profiling=true")
    assert (tmp_path / "adb.log").read_text().splitlines() == [
        "devices",
        f"-s R5CT shell mkdir -p {DEV}/cache",
        f"-s R5CT push {delegate} {DEV}/libsdgpu_delegate.so",
        f"-s R5CT push {folder} {DEV}/",
        "-s R5CT " + bench.format("unet"),
        "-s R5CT " + bench.format("vae_decoder"),
    ]


def test_a_device_with_another_serial_is_not_used(tmp_path, converted):
    folder, delegate = converted
    r = _run(tmp_path, "--serial", "R5CT", str(folder), str(delegate), adb=FAKE_ADB, device="EMU1")
    assert r.returncode == 0
    assert r.stdout.splitlines()[0] == "android_benchmark.sh: no device attached with serial R5CT: dry run, the commands are:"


@pytest.mark.parametrize("args, message", [
    ([], "expected CONVERTED_DIR and LIBSDGPU_DELEGATE_SO (see --help)"),
    (["{missing}", "{delegate}"], "{missing} is not a folder"),
    (["{folder}", "{missing}"], "{missing} does not exist"),
    (["--backend", "vulkan", "{folder}", "{delegate}"], "--backend must be opencl, gl or cpu, got vulkan"),
    (["--models", "vae_encoder", "{folder}", "{delegate}"], "{folder} has no vae_encoder.tflite"),
    (["--models", "refiner", "{folder}", "{delegate}"],
     "unknown model refiner (one of: text_encoder unet vae_decoder vae_encoder)"),
    (["--num-runs", "0", "{folder}", "{delegate}"], "--num-threads and --num-runs take positive integers"),
    (["--delegate-options", "a:$HOME", "{folder}", "{delegate}"],
     "--delegate-options must not contain quotes, $, ` or backslashes"),
    (["--serial"], "--serial needs a value"),
    (["--fast", "{folder}", "{delegate}"], "unknown option --fast"),
])
def test_argument_errors(tmp_path, converted, args, message):
    folder, delegate = converted
    names = {"folder": str(folder), "delegate": str(delegate), "missing": str(tmp_path / "missing")}
    r = _run(tmp_path, *(a.format(**names) for a in args))
    assert r.returncode == 2
    assert r.stderr == f"android_benchmark.sh: error: {message.format(**names)}\n"
    assert r.stdout == ""
