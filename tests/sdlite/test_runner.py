"""Runtime plumbing: manifest loading, the model runner on each backend, placement reports, clear errors."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sdlite_models import fused_gelu_model, fused_gelu_reference
from sdlite import native
from sdlite.backends import BackendOptions
from sdlite.errors import BackendUnavailableError, SdliteError
from sdlite.interpreter import Interpreter
from sdlite.manifest import load_manifest
from sdlite.runner import open_runner
from sdlite.tflite_info import read_model_info

ONE_THREAD = BackendOptions("cpu", num_threads=1)


@pytest.fixture
def gelu_path(tmp_path: Path) -> Path:
    path = tmp_path / "gelu.tflite"
    path.write_bytes(fused_gelu_model())
    return path


def _unet_feeds(runner, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s.shape).astype(s.dtype) for n, s in runner.inputs.items()}


# -- manifest -------------------------------------------------------------------------------------------------
def test_manifest_of_tiny_export(tiny_export: Path) -> None:
    m = load_manifest(tiny_export)
    assert (m.height, m.width, m.latent_height, m.latent_width) == (64, 64, 8, 8)
    assert m.cfg_batch in (1, 2) and m.vae_scaling_factor == pytest.approx(0.18215)
    assert {"text_encoder", "unet", "vae_decoder", "vae_encoder"} <= set(m.models)
    assert m.scheduler_dict()["_class_name"] == "PNDMScheduler"
    m.verify_checksums()


def test_manifest_errors(tmp_path: Path, tiny_export: Path) -> None:
    with pytest.raises(SdliteError, match=r"^model folder not found: "):
        load_manifest(tmp_path / "nope")
    with pytest.raises(SdliteError, match=r"is not a converted model folder \(no manifest.json; run `sdconvert`"):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(SdliteError, match=r"^cannot read .*manifest.json: "):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(SdliteError, match="is not an sdconvert manifest"):
        load_manifest(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_export, copy)
    (copy / "unet.tflite").unlink()
    with pytest.raises(SdliteError, match=r"^model file missing: .*unet.tflite \(listed in manifest.json\)$"):
        load_manifest(copy)
    raw = json.loads((copy / "manifest.json").read_text())
    raw["version"] = 99
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(SdliteError, match="manifest version 99 not supported"):
        load_manifest(copy, require=())


# -- runners ---------------------------------------------------------------------------------------------------
def test_cpu_and_litert_cpu_agree_on_the_unet(tiny_export: Path) -> None:
    cpu = open_runner(tiny_export / "unet.tflite", ONE_THREAD)
    lit = open_runner(tiny_export / "unet.tflite", BackendOptions("litert-cpu", num_threads=1))
    try:
        feeds = _unet_feeds(cpu)
        a, b = cpu.run(**feeds), lit.run(**feeds)
        assert set(a) == set(b) == {"noise_pred"}
        assert a["noise_pred"].shape == cpu.outputs["noise_pred"].shape
        np.testing.assert_allclose(a["noise_pred"], b["noise_pred"], rtol=1e-4, atol=1e-5)
        assert np.abs(a["noise_pred"]).max() > 1e-3
        assert cpu.last_invoke_s > 0 and lit.last_invoke_s > 0
    finally:
        cpu.close()
        lit.close()


def test_placement_covers_every_op(tiny_export: Path) -> None:
    runner = open_runner(tiny_export / "unet.tflite", ONE_THREAD)
    info = runner.info
    p = runner.placement
    assert len(p.node_executor) == len(info.ops)
    by_exec = p.ops_by_executor(info)
    assert set(by_exec) <= {"xnnpack", "tflite-cpu"}
    assert sum(sum(c.values()) for c in by_exec.values()) == len(info.ops)
    assert by_exec["xnnpack"]["CONV_2D"] == info.op_histogram["CONV_2D"]  # XNNPACK takes every conv
    assert p.partitions["xnnpack"] >= 1
    assert p.summary(info).startswith("xnnpack: ")
    runner.close()


def test_input_validation(tiny_export: Path) -> None:
    runner = open_runner(tiny_export / "unet.tflite", ONE_THREAD)
    feeds = _unet_feeds(runner)
    with pytest.raises(SdliteError, match=r"missing \['timestep'\]"):
        runner.run(**{k: v for k, v in feeds.items() if k != "timestep"})
    bad = dict(feeds, sample=np.zeros((3, 4, 8, 8), np.float32))
    with pytest.raises(SdliteError, match=r"input 'sample' must have shape \(\d, 4, 8, 8\), got \(3, 4, 8, 8\)"):
        runner.run(**bad)
    with pytest.raises(SdliteError, match="input 'sample' must be float32, got int64"):
        runner.run(**dict(feeds, sample=feeds["sample"].astype(np.int64)))
    out64 = runner.run(**dict(feeds, sample=feeds["sample"].astype(np.float64)))["noise_pred"]  # same kind: cast
    np.testing.assert_array_equal(out64, runner.run(**feeds)["noise_pred"])
    runner.close()


def test_fused_model_without_delegate_is_a_clear_error(gelu_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_model_info(gelu_path).fused_ops == ("SdGelu",)
    monkeypatch.setenv(native.ENV_DELEGATE_PATH, str(gelu_path.parent / "missing" / native.LIBRARY_NAME))
    with pytest.raises(BackendUnavailableError,
                       match=r"^gelu.tflite: model has fused ops \(SdGelu\); native delegate not built \("):
        open_runner(gelu_path, ONE_THREAD)
    with pytest.raises(BackendUnavailableError, match=r"^backend opencl unavailable: native delegate not built"):
        open_runner(gelu_path, BackendOptions("opencl"))
    with pytest.raises(BackendUnavailableError, match=r"backend litert-gpu cannot run the fused ops of gelu.tflite"):
        open_runner(gelu_path, BackendOptions("litert-gpu"))


def test_fused_model_runs_on_native_delegate(gelu_path: Path) -> None:
    native.delegate_path()  # a missing build fails here with its one-line message
    runner = open_runner(gelu_path, ONE_THREAD)
    x = np.linspace(-3.0, 3.0, 16, dtype=np.float32).reshape(1, 16)
    np.testing.assert_allclose(runner.run(x=x)["y"], fused_gelu_reference(x), rtol=1e-5, atol=1e-6)
    assert runner.placement.node_executor == ("xnnpack", "sdgpu", "xnnpack")
    assert "sdgpu: 1 ops in 1 partition (SdGelu 1)" in runner.placement.summary(runner.info)
    runner.close()


def test_unavailable_gpu_backend_is_one_line(tiny_export: Path) -> None:
    # This machine has no GPU adapter: LiteRT's GPU accelerator cannot be created.
    with pytest.raises(BackendUnavailableError) as err:
        open_runner(tiny_export / "vae_decoder.tflite", BackendOptions("litert-gpu"))
    msg = str(err.value)
    assert msg.startswith("backend litert-gpu unavailable: LiteRT GPU accelerator could not be created: ")
    assert "\n" not in msg


def test_unknown_backend_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(SdliteError, match=r"^unknown backend 'tpu'; choose one of cpu, opencl, gl, litert-gpu"):
        BackendOptions("tpu")
    with pytest.raises(SdliteError, match=r"^model file not found: "):
        open_runner(tmp_path / "none.tflite")
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"\0" * 64)
    with pytest.raises(SdliteError, match=r"^junk.tflite is not a .tflite model \(no TFL3 identifier\)$"):
        open_runner(junk)


# -- folder-level interpreter ----------------------------------------------------------------------------------
def test_interpreter_loads_lazily_and_reports_placement(tiny_export: Path) -> None:
    with Interpreter(tiny_export, ONE_THREAD) as interp:
        assert interp.placement() == {}
        dec = interp.runner("vae_decoder")
        out = interp.run("vae_decoder", latents=np.zeros(dec.inputs["latents"].shape, np.float32))
        assert out["image"].shape == (1, 3, 64, 64)
        assert set(interp.placement()) == {"vae_decoder"}
        with pytest.raises(SdliteError, match="lists no 'controlnet' model"):
            interp.runner("controlnet")


class _FailingWrapper:
    """The interpreter wrapper of a runner, whose call ``fail`` raises as LiteRT does (RuntimeError)."""

    def __init__(self, wrapper, fail: str) -> None:
        self._wrapper, self._fail = wrapper, fail

    def __getattr__(self, name: str):
        if name == self._fail:
            def fails(*args, **kwargs):
                raise RuntimeError(f"{name} went wrong")
            return fails
        return getattr(self._wrapper, name)


@pytest.mark.parametrize("fail, stage", [("SetTensor", "setting the inputs"), ("Invoke", "inference"),
                                         ("GetTensor", "reading the outputs")])
def test_a_later_run_names_the_stage_that_failed(gelu_path: Path, fail: str, stage: str) -> None:
    # Calls after the first hold fd 2 back once around inputs, inference and outputs (InterpreterRunner.run); a
    # failure still names its stage, and successful calls are counted and timed as before.
    runner = open_runner(gelu_path, ONE_THREAD)
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(runner.inputs["x"].shape)
    first = runner.run(x=x)["y"]
    second = runner.run(x=x)["y"]
    np.testing.assert_array_equal(first, second)
    assert runner.calls == 2 and runner.second_call_s is not None and runner.second_call_s == runner.last_invoke_s
    runner._wrapper = _FailingWrapper(runner._wrapper, fail)
    with pytest.raises(SdliteError, match=rf"^gelu.tflite on backend cpu: {stage} failed: {fail} went wrong$"):
        runner.run(x=x)
    assert runner.calls == (2 if fail != "GetTensor" else 3)


def test_a_capture_inside_another_passes_our_delegate_lines_on(capfd) -> None:
    # Interpreter.warm_up holds fd 2 for all warm-up threads while it loads the next model inside a capture of its
    # own: what a warm-up thread's delegate printed meanwhile (its warnings, set-up progress) used to end in the
    # inner capture and be dropped with it. Our lines now reach the enclosing capture; LiteRT's noise stays back.
    import os
    import threading

    from sdlite._native_stderr import capture_native_stderr

    def other_thread() -> None:
        os.write(2, b"sdgpu: WARNING: opencl: a cache entry was rebuilt\nINFO: Created TensorFlow Lite delegate\n")

    with capture_native_stderr() as outer:
        with capture_native_stderr() as inner:
            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
    assert inner.lines == ["sdgpu: WARNING: opencl: a cache entry was rebuilt", "INFO: Created TensorFlow Lite delegate"]
    assert outer.lines == ["sdgpu: WARNING: opencl: a cache entry was rebuilt"]
    with capture_native_stderr() as alone:  # not nested: held back whole, nothing reaches the terminal
        other_thread()
    assert len(alone.lines) == 2 and capfd.readouterr().err == ""
