"""``Interpreter.warm_up`` / ``sdlite generate``: every model's first inference (our GPU delegates' one-time set-up)
runs at once, one thread per model, before the pipeline starts; the pixels do not change, each model's first real
call is its second inference, a failure is one line naming the model, and the set-up progress bars reach the terminal
while the inference holds fd 2 (sdlite._native_stderr). On PoCL (opencl) and llvmpipe (gl)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sdlite import native
from sdlite._native_stderr import capture_native_stderr
from sdlite.backends import BackendOptions
from sdlite.errors import SdliteError
from sdlite.interpreter import Interpreter
from sdlite.runner import ModelRunner
from sdlite.setup_monitor import SetupMonitor

from test_low_memory import MODELS, _generate  # (gemm_autotune off: the same kernels, the same pixels)


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_generate_warms_every_model_up_at_once_with_the_same_pixels(capsys, tiny_fused_export: Path, tmp_path: Path,
                                                                    backend: str) -> None:
    warm = _generate(capsys, tiny_fused_export, tmp_path / "warm.png", backend)
    # --low-memory loads the models one at a time, as the pipeline reaches them: no warm-up
    cold = _generate(capsys, tiny_fused_export, tmp_path / "cold.png", backend, "--low-memory")
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "warm.png")),
                                  np.asarray(Image.open(tmp_path / "cold.png")))
    marks = warm["startup"]["timeline"]
    assert marks["models_loaded"] <= marks["models_ready"] <= marks["png_0"]
    assert "models_ready" not in cold["startup"]["timeline"]
    for name in MODELS:
        w, c = warm["startup"]["models"][name], cold["startup"]["models"][name]
        assert w["warmed_up"] is True and c["warmed_up"] is False
        # one inference more than the pipeline's own calls: the warm-up's
        assert w["calls"] == c["calls"] + 1, (name, w["calls"], c["calls"])
        assert w["delegate"]["weights_on_device"] + w["delegate"]["weights_on_host"] > 0
    # the UNet's first pipeline call was a steady one: 4 PNDM evaluations, each a second or later inference
    assert len(warm["timings"]["unet_step_s"]) == 4


def test_the_python_pipeline_warms_up_before_its_first_image(tiny_fused_export: Path) -> None:
    """``StableDiffusionPipeline(...)(prompt)`` sets every model up at once too, once: the second image runs no
    warm-up inference (nor, for the same prompt, the text encoder), and the pixels equal a low-memory pipeline's
    (which sets each model up when it reaches it)."""
    from sdlite.pipeline import StableDiffusionPipeline

    opts = {"gemm_autotune": False}
    with StableDiffusionPipeline.from_pretrained(tiny_fused_export, backend="opencl", delegate_options=opts) as pipe, \
            StableDiffusionPipeline.from_pretrained(tiny_fused_export, backend="opencl", delegate_options=opts,
                                                    low_memory=True) as low:
        a = pipe("a red boat", num_inference_steps=2, generator=3, output_type="np")
        runners = pipe.interpreter.used_runners()
        assert all(runners[n].warmed_up for n in MODELS)
        calls = {n: runners[n].calls for n in MODELS}
        pipe("a red boat", num_inference_steps=2, generator=4, output_type="np")
        # PNDM: 2 steps = 3 UNet calls of batch 2 (CFG), one VAE call per image: no second warm-up; the same prompts
        # again: their embeddings are reused, no text encoder call
        assert {n: runners[n].calls - calls[n] for n in MODELS} == {"text_encoder": 0,
                                                                     "unet": calls["unet"] - 1,
                                                                     "vae_decoder": calls["vae_decoder"] - 1}
        pipe("a blue boat", num_inference_steps=2, generator=4, output_type="np")
        assert runners["text_encoder"].calls - calls["text_encoder"] == calls["text_encoder"] - 1
        b = low("a red boat", num_inference_steps=2, generator=3, output_type="np")
        assert not any(r.warmed_up for r in low.interpreter.used_runners().values())
        np.testing.assert_array_equal(a.images, b.images)


def test_every_unet_call_of_an_image_is_fed_the_embeddings_stacked_once(tiny_fused_export: Path) -> None:
    """The CFG pair of text embeddings is stacked into the UNet's batch once per image, not at every step; what each
    call is fed is still exactly the pair; a caller's writable embeddings are stacked every time (they may change)."""
    from sdlite.pipeline import StableDiffusionPipeline

    with StableDiffusionPipeline.from_pretrained(tiny_fused_export, backend="opencl",
                                                 delegate_options={"gemm_autotune": False}) as pipe:
        unet, _, _, ehs_name, _ = pipe._unet_io()
        fed: list[np.ndarray] = []
        run = unet.run

        def spy(**feeds: np.ndarray) -> dict[str, np.ndarray]:
            fed.append(feeds[ehs_name])
            return run(**feeds)

        unet.run = spy
        per_step = 2 // unet.inputs[ehs_name].shape[0]  # UNet calls of a CFG step: 1 (batch 2) or 2 (batch 1)
        n = 4 * per_step  # PNDM: 3 steps = 4 UNet evaluations of the CFG pair
        for k, prompt in enumerate(("a red boat", "a blue boat")):
            pipe(prompt, num_inference_steps=3, generator=3)
            image = fed[k * n : (k + 1) * n]
            assert len(image) == n and all(f is image[i % per_step] for i, f in enumerate(image))
            np.testing.assert_array_equal(np.concatenate(image[:per_step]), pipe.prompt_embeds(["", prompt]))
        writable = np.array(pipe.prompt_embeds(["", "a blue boat"]))
        first = pipe._embeds_batches(writable[0:1], writable[1:2], 1, 2)
        assert pipe._embeds_batches(writable[0:1], writable[1:2], 1, 2)[0] is not first[0]


def test_warm_up_leaves_cpu_models_alone(tiny_export: Path) -> None:
    """Off our GPU delegates there is no set-up to overlap: no inference runs."""
    with Interpreter(tiny_export, "cpu") as interp:
        interp.warm_up(MODELS)
        assert all(interp.runner(n).calls == 0 and not interp.runner(n).warmed_up for n in MODELS)


def test_a_failed_warm_up_is_one_line_naming_the_model(tiny_fused_export: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = ModelRunner.warm_up

    def failing(self: ModelRunner, progress_fd: int | None = None) -> None:
        if self.path.stem == "unet":
            raise SdliteError("unet.tflite on backend opencl: inference failed: out of device memory")
        real(self, progress_fd)

    monkeypatch.setattr(ModelRunner, "warm_up", failing)
    with Interpreter(tiny_fused_export, BackendOptions(name="opencl")) as interp:
        with pytest.raises(SdliteError) as info:
            interp.warm_up(MODELS)
        message = str(info.value)
        assert message.startswith("unet: first inference failed: ") and "out of device memory" in message
        assert "\n" not in message
        # the others were warmed up all the same
        assert interp.runner("text_encoder").warmed_up and interp.runner("vae_decoder").warmed_up


def test_stats_read_while_the_set_up_runs_always_parse(tiny_fused_export: Path) -> None:
    """The stats text grows while the delegate works (set-up phases, counters): a reader on another thread must get
    whole JSON every time (it used to get a cut text, and the progress bar gave up), and get it while kernels compile
    (it used to wait for the build's lock, so a bar froze for the longest wait of a first start)."""
    import threading

    with native.extra_options(cache_dir="none"):  # the set-up compiles: long enough to poll many times
        runner = Interpreter(tiny_fused_export, BackendOptions(name="opencl"))
        runner.load_all(("unet",))
    try:
        unet = runner.runner("unet")
        delegate = unet.setup_delegate()
        done = threading.Event()
        seen: list[str] = []
        failures: list[BaseException] = []

        def poll() -> None:
            while not done.is_set():
                try:
                    seen.append(str(native.stats(delegate).get("setup_phase") or ""))
                except Exception as exc:  # noqa: BLE001 - counted
                    failures.append(exc)

        t = threading.Thread(target=poll)
        t.start()
        try:
            unet.warm_up()
        finally:
            done.set()
            t.join()
        assert not failures, failures[:3]
        assert len(seen) > 20 and any(seen), seen[:5]
        # and without waiting for the build: a read used to block on the device's lock for a whole compile
        assert seen.count("compiling kernels") >= 3, sorted(set(seen))
    finally:
        runner.close()


class _FakeDelegate:
    pass


def _fake_stats(phases: list[str]):
    start = time.perf_counter()

    def read(self: SetupMonitor) -> dict:
        i = min(int((time.perf_counter() - start) / 0.05), len(phases) - 1)
        return {"setup_phase": phases[i], "setup_done": i, "setup_total": len(phases), "setup_detail": ""}

    return read


def test_progress_bar_reaches_the_terminal_while_the_inference_holds_fd2(capfd, monkeypatch) -> None:
    """The monitor starts before the inference captures fd 2 (runner._timed_invoke): its bar goes to its own copy of
    the terminal's fd 2, not into the capture, which only native log lines belong to."""
    monkeypatch.setattr(SetupMonitor, "_read", _fake_stats(["compiling kernels", "preparing weights"]))
    with SetupMonitor(_FakeDelegate(), "unet", interval_s=0.01, show_after_s=0.0):
        with capture_native_stderr() as log:
            time.sleep(0.3)
    err = capfd.readouterr().err
    assert "unet: compiling kernels" in err and "unet: preparing weights" in err
    assert "unet:" not in log.text


def test_progress_bar_of_a_warm_up_thread_goes_to_the_given_fd(monkeypatch) -> None:
    """Interpreter.warm_up captures fd 2 around all its threads at once and hands each monitor a copy of the
    terminal's fd 2 taken before."""
    monkeypatch.setattr(SetupMonitor, "_read", _fake_stats(["compiling kernels"]))
    r, w = os.pipe()
    try:
        with capture_native_stderr() as log:
            with SetupMonitor(_FakeDelegate(), "vae_decoder", interval_s=0.01, show_after_s=0.0, fd=w):
                time.sleep(0.2)
        os.close(w)
        w = -1
        with os.fdopen(r, "r", encoding="utf-8", errors="replace") as f:
            r = -1
            text = f.read()
    finally:
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)
    assert "vae_decoder: compiling kernels" in text
    assert "vae_decoder" not in log.text


LATE_IMPORTS_PROBE = """
import json, sys
from sdlite import interpreter, images
seen = {}
warm_up, save_png = interpreter.Interpreter.warm_up, images.save_png
def probe_warm_up(self, *args, **kwargs):
    warm_up(self, *args, **kwargs)
    seen.setdefault("ready", set(sys.modules))
def probe_save_png(*args, **kwargs):
    seen.setdefault("png", set(sys.modules))
    save_png(*args, **kwargs)
interpreter.Interpreter.warm_up, images.save_png = probe_warm_up, probe_save_png
from sdlite.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "late": sorted(seen["png"] - seen["ready"])}))
"""


def test_the_first_image_imports_nothing_once_the_models_are_ready(tiny_fused_export: Path, tmp_path: Path) -> None:
    """What the denoising loop and the PNG need is imported beside the warm-ups (sdlite.pipeline.warm_progress_bars,
    sdlite.images.warm_png_writer), not between the models being ready and the first PNG: tqdm's import (asyncio)
    and its write lock (multiprocessing) had cost the first image 35-45 ms there, with the bar disabled."""
    proc = subprocess.run([sys.executable, "-c", LATE_IMPORTS_PROBE, "generate", str(tiny_fused_export), "-p", "a boat",
                           "--steps", "2", "--backend", "opencl", "--no-progress", "-o", str(tmp_path / "boat.png"),
                           "--delegate-options", "gemm_autotune:0"],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "late": []}, result
