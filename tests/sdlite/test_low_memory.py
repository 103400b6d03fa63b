"""``sdlite generate --low-memory`` / ``StableDiffusionPipeline(low_memory=True)``: one model on the device at a time
(text encoder, then UNet, then VAE decoder), so the pipeline's peak GPU memory is the largest model's instead of the
sum, with the same pixels. The memory figures of ``--json`` are the delegates' own accounting (device weights +
arena), checked here on PoCL (opencl) and llvmpipe (gl)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sdlite.cli import main
from sdlite.pipeline import StableDiffusionPipeline

MODELS = ("text_encoder", "unet", "vae_decoder")


def _generate(capsys: pytest.CaptureFixture[str], folder: Path, out: Path, backend: str, *extra: str) -> dict:
    # gemm_autotune off: a run whose delegates tune (the first on a device, or one with the cache off) may pick another
    # tile (another float rounding) than the run it is compared with; the pixels below must be equal because the same
    # kernels ran.
    rc = main(["generate", str(folder), "-p", "a red boat", "--steps", "3", "--seed", "5", "--backend", backend,
               "--json", "--no-progress", "-o", str(out), "--delegate_options", "gemm_autotune:0", *extra])
    captured = capsys.readouterr()
    assert rc == 0, captured.err[-2000:]
    return json.loads(captured.out)


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_low_memory_holds_one_model_at_a_time_with_the_same_pixels(capsys, tiny_export: Path, tmp_path: Path,
                                                                   backend: str) -> None:
    full = _generate(capsys, tiny_export, tmp_path / "full.png", backend)
    low = _generate(capsys, tiny_export, tmp_path / "low.png", backend, "--low-memory")
    np.testing.assert_array_equal(np.asarray(Image.open(tmp_path / "full.png")),
                                  np.asarray(Image.open(tmp_path / "low.png")))
    for doc, low_memory in ((full, False), (low, True)):
        mem = doc["memory"]
        assert mem["low_memory"] is low_memory
        assert set(mem["gpu_bytes"]) == set(MODELS)
        for name in MODELS:  # each model's figure is its delegate's weights + arena
            stats = doc["startup"]["models"][name]["delegate"]
            want = stats["device_weight_bytes"] + stats["max_arena_bytes"]
            assert want > 0 and mem["gpu_bytes"][name] == want == doc["startup"]["models"][name]["gpu_bytes"]
        assert mem["peak_host_rss_bytes"] > 50 * 2**20
    assert full["memory"]["peak_gpu_bytes"] == sum(full["memory"]["gpu_bytes"].values())  # all resident at once
    assert low["memory"]["peak_gpu_bytes"] == max(low["memory"]["gpu_bytes"].values())  # one at a time
    assert low["memory"]["gpu_bytes"] == full["memory"]["gpu_bytes"]
    assert low["memory"]["peak_gpu_bytes"] < full["memory"]["peak_gpu_bytes"]


def test_low_memory_pipeline_releases_each_model_after_its_last_use(tiny_export: Path) -> None:
    """Through the Python API, two images: after the call no model is loaded, each was used, and the images equal a
    default pipeline's."""
    with StableDiffusionPipeline.from_pretrained(tiny_export, backend="cpu", low_memory=True) as low, \
            StableDiffusionPipeline.from_pretrained(tiny_export, backend="cpu") as full:
        a = low("a red boat", num_inference_steps=2, generator=3, num_images_per_prompt=2, output_type="np")
        assert low.interpreter.loaded_runners() == {}
        assert set(low.interpreter.used_runners()) == set(MODELS)
        b = full("a red boat", num_inference_steps=2, generator=3, num_images_per_prompt=2, output_type="np")
        assert set(full.interpreter.loaded_runners()) == set(MODELS)
        np.testing.assert_array_equal(a.images, b.images)


@pytest.mark.parametrize("backend", ["opencl", "gl"])
def test_phone_preset_halves_the_gpu_bytes_by_the_delegates_accounting(capsys, tiny_export: Path, tmp_path: Path,
                                                                        backend: str) -> None:
    """``--phone``: --low-memory plus fp16 weights and half activation storage. Each model's GPU bytes are its
    delegate's (weights + arena), below the default's, the arena about half of it, the model file's pages given back,
    and the image stays close."""
    full = _generate(capsys, tiny_export, tmp_path / "full.png", backend)
    phone = _generate(capsys, tiny_export, tmp_path / "phone.png", backend, "--phone")
    mem = phone["memory"]
    assert mem["low_memory"] is True and mem["peak_gpu_bytes"] == max(mem["gpu_bytes"].values())
    for name in MODELS:
        stats = phone["startup"]["models"][name]["delegate"]
        default = full["startup"]["models"][name]["delegate"]
        assert mem["gpu_bytes"][name] == stats["device_weight_bytes"] + stats["max_arena_bytes"]
        assert mem["gpu_bytes"][name] < full["memory"]["gpu_bytes"][name], name
        assert 0.45 <= stats["max_arena_bytes"] / default["max_arena_bytes"] <= 0.6, name
        # the model file's weight pages went back to the system once on the GPU (release_weight_pages)
        size = (tiny_export / f"{name}.tflite").stat().st_size
        assert 0.5 * size < stats["host_pages_released_bytes"] <= size, (name, stats["host_pages_released_bytes"], size)
    a = np.asarray(Image.open(tmp_path / "full.png")).astype(np.float64)
    b = np.asarray(Image.open(tmp_path / "phone.png")).astype(np.float64)
    assert 10 * np.log10(255.0**2 / max(float(((a - b) ** 2).mean()), 1e-12)) >= 35.0  # issue 37's PSNR gate
