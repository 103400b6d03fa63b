"""``sdlite generate --backend opencl`` makes the OpenCL device on a thread at process start (sdlite/early_device.py):
the models' delegates join that context instead of the first of them making it on the critical path (issue 31), and a
low-memory run, which releases each model before loading the next, keeps one context for all of them."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdlite.early_device import EarlyDevice


@pytest.mark.parametrize("low_memory", [False, True])
def test_every_model_joins_the_early_device(tiny_export: Path, tmp_path: Path, low_memory: bool) -> None:
    # a fresh process: in pytest's, a delegate of an earlier test could hold a context the models would join anyway
    cmd = [sys.executable, "-m", "sdlite", "generate", str(tiny_export), "-p", "a cat", "-o", str(tmp_path / "a.png"),
           "--steps", "2", "--num-threads", "1", "--json", "--backend", "opencl",
           "--delegate-options", "cache_dir:none", *(["--low-memory"] if low_memory else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    startup = json.loads(proc.stdout)["startup"]
    assert startup["early_device_s"] > 0
    models = startup["models"]
    assert set(models) == {"text_encoder", "unet", "vae_decoder"}
    for name, record in models.items():
        # made by none of the models: the UNet is loaded first, and would have made its own
        assert record["delegate"]["context_shared"] == 1, (name, record["delegate"])


def test_only_opencl_has_an_early_device() -> None:
    assert EarlyDevice.start("cpu", {}) is None
    assert EarlyDevice.start("gl", {}) is None


def test_a_device_that_cannot_be_made_is_silent(capfd: pytest.CaptureFixture[str]) -> None:
    """The hold's failure says nothing (the first model's own delegate reports it in full) and closes cleanly."""
    bad = EarlyDevice(backend="opencl", options={"backend": "opencl", "log_level": "silent", "tensor_cores": "bogus"})
    bad._make()
    assert bad.made_s is None
    bad.close()
    bad.close()  # idempotent
    assert capfd.readouterr().err == ""


def test_the_state_options_follow_the_activation_storage() -> None:
    early = EarlyDevice.start("opencl", {"activations_fp16": True, "profile_path": "/nonexistent/p.json"})
    assert early is not None
    try:
        # the program (and so the shared state) depends on the storage; a profile path would be written by the hold
        assert early.options == {"backend": "opencl", "log_level": "silent", "activations_fp16": "1"}
        # and with half storage the float-storage state is held too (the models' float storage islands use it)
        assert early._thread is not None
        early._thread.join(timeout=120)
        assert len(early._delegates) == 2 and early.made_s is not None
    finally:
        early.close()
    assert early._delegates == []
    plain = EarlyDevice.start("opencl", {})
    assert plain is not None and plain._thread is not None
    plain._thread.join(timeout=120)
    assert len(plain._delegates) == 1
    plain.close()


def test_the_command_line_is_parsed_before_numpy_is_imported(tiny_export: Path) -> None:
    """The early device starts once the options are parsed: that must not wait for numpy, LiteRT or PIL (0.1-0.3 s
    of imports the device's making overlaps)."""
    code = ("import sys\n"
            "from sdlite.cli import build_parser, parse_args\n"
            "from sdlite import native\n"
            f"args = parse_args(build_parser(), ['generate', {str(tiny_export)!r}, '-p', 'x', '--backend', 'opencl'])\n"
            "native.parse_options_text('activations_fp16:1')\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'PIL', 'ai_edge_litert'))\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_an_abandoned_device_is_released_when_made(capfd: pytest.CaptureFixture[str]) -> None:
    """A command that fails releases the hold without waiting for the device (its error is printed at once); the
    making thread releases what it makes when it ends."""
    early = EarlyDevice.start("opencl", {})
    assert early is not None
    early.abandon()
    thread = early._thread
    assert thread is not None
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert early._delegates == []  # released by the thread (or never made)
    early.close()  # still safe afterwards
    assert capfd.readouterr().err == ""


TWO_AT_ONCE = """
import threading
import torch  # noqa: F401 - the process the crash needed: PoCL's first initialisation beside torch's libraries
from sdlite import native
lib = native._lib()
made, errors = [], []
start = threading.Barrier(2)
def early():
    start.wait()
    handle = native.create_plugin_delegate(lib, {"backend": "opencl", "log_level": "silent"})
    (made if handle else errors).append("early")
def model():
    start.wait()
    try:
        made.append(native.load(backend="opencl"))
    except native.NativeDelegateError as exc:
        errors.append(str(exc))
threads = [threading.Thread(target=early), threading.Thread(target=model)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len(made), errors)
"""


def test_two_devices_made_at_once_both_succeed() -> None:
    """The early device and the first model's delegate made at the same moment, in fresh processes that loaded torch:
    before devices were made one at a time (OpenClDevice::Create), PoCL's first initialisation crashed 5 of 6 such
    processes, and sdlite's own tests had failed with 'no OpenCL device found on any platform'."""
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", TWO_AT_ONCE], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1] == "2 []", proc.stdout
