"""The diffusers-shaped Python API: ``from_pretrained``, ``pipe(prompt, ...)`` keywords, generators, img2img inputs,
output types and scheduler swaps, checked against ``sdlite generate`` (same seed, same pixels) and the lower-level
``generate``. Parity with diffusers itself is tests/sdlite/test_pipeline_parity.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sdlite import (
    DDIMScheduler,
    DPMSolverMultistepScheduler,
    EulerAncestralDiscreteScheduler,
    GenerationParams,
    GenerationResult,
    PNDMScheduler,
    SdliteError,
    StableDiffusionPipeline,
)
from sdlite.cli import main
from sdlite.schedulers import DPMSolverPlusPlus2MScheduler, scheduler_name

STEPS = 3


@pytest.fixture(scope="module")
def pipe(tiny_export: Path):
    p = StableDiffusionPipeline.from_pretrained(tiny_export, backend="cpu", num_threads=1)
    p.set_progress_bar_config(disable=True)
    yield p
    p.close()


def _cli_png(tmp_path: Path, tiny_export: Path, *args: str) -> np.ndarray:
    out = tmp_path / "cli.png"
    assert main(["generate", str(tiny_export), *args, "--steps", str(STEPS), "--num-threads", "1", "--no-progress",
                 "-o", str(out)]) == 0
    return np.asarray(Image.open(out))


def test_seed_and_numpy_generator_match_the_cli(pipe, tiny_export: Path, tmp_path: Path, capsys) -> None:
    want = _cli_png(tmp_path, tiny_export, "-p", "a cat", "--seed", "5", "--guidance-scale", "6")
    capsys.readouterr()
    by_seed = pipe("a cat", num_inference_steps=STEPS, guidance_scale=6, generator=5)
    assert by_seed.seeds == [5] and by_seed.nsfw_content_detected is None
    np.testing.assert_array_equal(np.asarray(by_seed.images[0]), want)
    # numpy's default_rng(5) is the stream of seed 5
    by_rng = pipe("a cat", num_inference_steps=STEPS, guidance_scale=6, generator=np.random.default_rng(5))
    assert by_rng.seeds == [None]
    np.testing.assert_array_equal(np.asarray(by_rng.images[0]), want)


def test_generators_per_image_and_shared(pipe) -> None:
    two = pipe("a dog", num_inference_steps=STEPS, num_images_per_prompt=2, generator=11).images
    assert not np.array_equal(np.asarray(two[0]), np.asarray(two[1]))
    listed = pipe("a dog", num_inference_steps=STEPS, num_images_per_prompt=2,
                  generator=[np.random.default_rng(11), 12]).images
    for a, b in zip(two, listed):  # image k of seed s is the image of seed s + k alone
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    rng = np.random.default_rng(3)
    shared = pipe("a dog", num_inference_steps=STEPS, num_images_per_prompt=2, generator=rng).images
    assert not np.array_equal(np.asarray(shared[0]), np.asarray(shared[1]))  # drawn one after the other
    random = pipe("a dog", num_inference_steps=STEPS)
    assert isinstance(random.seeds[0], int)  # no generator: a random seed, reported
    with pytest.raises(SdliteError, match="got 1 generators for 2 images"):
        pipe("a dog", num_inference_steps=STEPS, num_images_per_prompt=2, generator=[1])


def test_output_types(pipe) -> None:
    pil = pipe("a dog", num_inference_steps=STEPS, generator=2)
    arr = pipe("a dog", num_inference_steps=STEPS, generator=2, output_type="np").images
    assert arr.shape == (1, 64, 64, 3) and arr.dtype == np.float32 and 0 <= arr.min() and arr.max() <= 1
    np.testing.assert_array_equal((arr[0] * 255).round().astype(np.uint8), np.asarray(pil.images[0]))
    images, nsfw = pipe("a dog", num_inference_steps=STEPS, generator=2, return_dict=False)
    assert nsfw is None and np.array_equal(np.asarray(images[0]), np.asarray(pil.images[0]))
    with pytest.raises(SdliteError, match="output_type must be one of pil, np, got 'latent'"):
        pipe("a dog", output_type="latent")


def test_img2img_inputs_match_the_cli(pipe, tiny_export: Path, tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(0)
    source = Image.fromarray(rng.integers(0, 256, (80, 96, 3), dtype=np.uint8), mode="RGB")  # resized like the CLI
    source.save(tmp_path / "init.png")
    want = _cli_png(tmp_path, tiny_export, "-p", "a dog", "--init-image", str(tmp_path / "init.png"), "--strength",
                    "0.7", "--seed", "4")
    capsys.readouterr()
    for image in (source, tmp_path / "init.png", np.asarray(source)):
        got = pipe("a dog", image=image, strength=0.7, num_inference_steps=STEPS, generator=4).images[0]
        np.testing.assert_array_equal(np.asarray(got), want)
    unit = np.asarray(source.resize((64, 64), Image.LANCZOS), dtype=np.float32) / 255
    via_float = pipe("a dog", image=unit, strength=0.7, num_inference_steps=STEPS, generator=4).images[0]
    np.testing.assert_array_equal(np.asarray(via_float), want)  # a [0, 1] float array of the exported size
    with pytest.raises(SdliteError, match=r"image must be a PIL image, \[H, W, 3\] or \[1, 3, H, W\] array"):
        pipe("a dog", image=np.zeros((64, 64)), num_inference_steps=STEPS)


def test_scheduler_swap(pipe, tiny_export: Path, tmp_path: Path, capsys) -> None:
    assert isinstance(pipe.scheduler, PNDMScheduler)  # the CLI's default
    default = pipe.scheduler
    try:
        for cls, kwargs, name in ((DDIMScheduler, {}, "ddim"), (EulerAncestralDiscreteScheduler, {}, "euler_a"),
                                  (DPMSolverMultistepScheduler, {"use_karras_sigmas": True}, "dpmpp_2m_karras")):
            pipe.scheduler = cls.from_config(pipe.scheduler.config, **kwargs)
            assert scheduler_name(pipe.scheduler) == name and pipe.scheduler.config == default.config
            want = _cli_png(tmp_path, tiny_export, "-p", "a cat", "--seed", "9", "--scheduler", name)
            capsys.readouterr()
            got = pipe("a cat", num_inference_steps=STEPS, generator=9).images[0]
            np.testing.assert_array_equal(np.asarray(got), want)
        assert DPMSolverMultistepScheduler is DPMSolverPlusPlus2MScheduler
        raw = {"_class_name": "PNDMScheduler", "beta_schedule": "linear", "num_train_timesteps": 500}
        assert DDIMScheduler.from_config(raw).config.num_train_timesteps == 500  # a scheduler_config.json dict
        pipe.scheduler = "ddim"
        with pytest.raises(SdliteError, match="pipe.scheduler must be an sdlite scheduler"):
            pipe("a cat", num_inference_steps=STEPS)
    finally:
        pipe.scheduler = default


def test_checks_and_the_older_call(pipe, tiny_export: Path) -> None:
    with pytest.raises(SdliteError, match="height 128 differs from the exported size 64x64"):
        pipe("a cat", height=128)
    with pytest.raises(SdliteError, match="prompt must be one string"):
        pipe(["a cat", "a dog"])
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        pipe("a cat", eta=0.0)
    with pytest.raises(SdliteError, match="model folder not found: runwayml/stable-diffusion-v1-5 "
                                          r"\(from_pretrained opens a folder written by sdconvert"):
        StableDiffusionPipeline.from_pretrained("runwayml/stable-diffusion-v1-5")
    with pytest.raises(SdliteError, match="unknown delegate option 'tensor_core'"):
        StableDiffusionPipeline.from_pretrained(tiny_export, delegate_options={"tensor_core": "off"})
    with pytest.raises(SdliteError, match="weights_fp16 takes 1/0/true/false, got 'yes'"):
        StableDiffusionPipeline.from_pretrained(tiny_export, delegate_options={"weights_fp16": "yes"})
    assert StableDiffusionPipeline.from_pretrained(tiny_export, delegate_options={"weights_fp16": "1"}
                                                   ).delegate_options == {"weights_fp16": True}
    old = pipe(GenerationParams(prompt="a cat", steps=STEPS, seed=5), progress=False)  # sdlite's older call form
    assert isinstance(old, GenerationResult) and old.images[0].dtype == np.uint8
    new = pipe("a cat", num_inference_steps=STEPS, generator=5)
    np.testing.assert_array_equal(old.images[0], np.asarray(new.images[0]))
