"""Full pipeline on the tiny random-weight conversion vs diffusers on CPU (fp32), same weights and noise.

Same weights (``tiny_modules`` are what ``tiny_export`` converted), same tokenizer files, same initial
latents and - for stochastic samplers and img2img - the same random numbers: our pipeline draws from
torch generators wrapped as noise streams, one per image, exactly like diffusers with a generator list.

The plain export and its fused variants (``--fuse``, ``--fuse --winograd 4``, made from it by ``sdconvert optimize``)
must all reach the same PSNR bound; the fused ones run their ``Sd*`` ops in our native delegate (backend ``cpu``).
"""
from __future__ import annotations

import json
from pathlib import Path

import diffusers
import numpy as np
import pytest
import torch

from sdconvert.configs import TINY
from sdconvert.rewrite import expected_sites
from sdlite.backends import BackendOptions
from sdlite.pipeline import GenerationParams, StableDiffusionPipeline

PROMPT, NEGATIVE = "a photo of a cat", "blurry, low quality"
MIN_PSNR_DB = 40.0
SCHEDULERS = {
    "pndm": (diffusers.PNDMScheduler, {}),
    "ddim": (diffusers.DDIMScheduler, {}),
    "euler_a": (diffusers.EulerAncestralDiscreteScheduler, {}),
    "dpmpp_2m_karras": (diffusers.DPMSolverMultistepScheduler, {"use_karras_sigmas": True}),
}


class TorchNoise:
    """A torch CPU generator as a noise stream (what diffusers' ``randn_tensor`` draws)."""

    def __init__(self, seed: int) -> None:
        self.gen = torch.Generator().manual_seed(seed)

    def randn(self, shape: tuple[int, ...]) -> np.ndarray:
        return torch.randn(shape, generator=self.gen).numpy()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def reference_images(np_images: np.ndarray) -> list[np.ndarray]:
    """diffusers ``output_type="np"`` floats in [0, 1] -> uint8 exactly as its PIL path rounds them."""
    return [(img * 255).round().astype(np.uint8) for img in np_images]


@pytest.fixture(scope="module")
def pipe(tiny_export: Path):
    p = StableDiffusionPipeline.from_folder(tiny_export, BackendOptions("cpu", num_threads=1))
    yield p
    p.close()


@pytest.fixture(scope="module")
def cfg2_export(tiny_export: Path, tmp_path_factory) -> Path:
    """``tiny_export`` with its UNet re-exported at batch 2 (``cfg_batch=2``: one call per guided step)."""
    import json
    import shutil

    from sdconvert.export.convert import ConvertOptions, run

    out = tmp_path_factory.mktemp("cfg2") / "sd-tiny-cfg2"
    assert run(ConvertOptions(out=out, random_weights="tiny", seed=0, cfg_batch=2, models=("unet",), quiet=True)).ok
    manifest = json.loads((out / "manifest.json").read_text())
    base = json.loads((tiny_export / "manifest.json").read_text())
    for name, entry in base["models"].items():
        if name != "unet":
            shutil.copy(tiny_export / entry["file"], out / entry["file"])
            manifest["models"][name] = entry
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.fixture(scope="module")
def tokenizer(tiny_export: Path):
    from transformers import CLIPTokenizer

    tok = CLIPTokenizer.from_pretrained(str(tiny_export / "tokenizer"))
    tok.model_max_length = 77
    return tok


def diffusers_pipe(cls, tiny_modules, tokenizer, tiny_export: Path, scheduler: str):
    from sdlite.manifest import load_manifest

    sched_cls, extra = SCHEDULERS[scheduler]
    config = load_manifest(tiny_export).scheduler_dict()
    ref = cls(
        vae=tiny_modules["vae"], text_encoder=tiny_modules["text_encoder"], tokenizer=tokenizer,
        unet=tiny_modules["unet"], scheduler=sched_cls.from_config({**config, **extra}),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    ref.set_progress_bar_config(disable=True)
    return ref


@pytest.mark.parametrize(("scheduler", "num_images", "steps"), [
    ("pndm", 1, 8), ("euler_a", 2, 6), ("dpmpp_2m_karras", 1, 6),
])
def test_txt2img_matches_diffusers(pipe, tiny_modules, tokenizer, tiny_export: Path, scheduler: str,
                                   num_images: int, steps: int) -> None:
    ref = diffusers_pipe(diffusers.StableDiffusionPipeline, tiny_modules, tokenizer, tiny_export, scheduler)
    latents = torch.randn(num_images, 4, 8, 8, generator=torch.Generator().manual_seed(42))
    seeds = [100 + k for k in range(num_images)]
    with torch.no_grad():
        expected = ref(
            prompt=PROMPT, negative_prompt=NEGATIVE, num_inference_steps=steps, guidance_scale=7.5,
            num_images_per_prompt=num_images, latents=latents.clone(), height=64, width=64, output_type="np",
            generator=[torch.Generator().manual_seed(s) for s in seeds],
        ).images
    params = GenerationParams(prompt=PROMPT, negative_prompt=NEGATIVE, steps=steps, guidance_scale=7.5,
                              num_images=num_images, scheduler=scheduler)
    result = pipe(params, latents=latents.numpy(), noise=[TorchNoise(s) for s in seeds], progress=False)

    assert len(result.images) == num_images
    for ours, theirs in zip(result.images, reference_images(expected)):
        assert ours.shape == theirs.shape == (64, 64, 3) and ours.dtype == np.uint8
        assert theirs.std() > 5.0  # a real image, not a constant one (which would match trivially)
        assert psnr(ours, theirs) >= MIN_PSNR_DB
    if num_images > 1:
        assert psnr(result.images[0], result.images[1]) < 30  # different latents/noise -> different images
    n_evals = steps + 1 if scheduler == "pndm" else steps
    assert len(result.timings.unet_step_s) == n_evals
    unet_batch = pipe.interpreter.runner("unet").inputs["sample"].shape[0]
    assert result.timings.unet_calls == n_evals * num_images * (2 // unet_batch)
    assert all(t > 0 for t in result.timings.unet_step_s) and result.timings.text_encoder_s > 0


def test_img2img_matches_diffusers(pipe, tiny_modules, tokenizer, tiny_export: Path) -> None:
    ref = diffusers_pipe(diffusers.StableDiffusionImg2ImgPipeline, tiny_modules, tokenizer, tiny_export, "ddim")
    yy, xx = np.mgrid[0:64, 0:64].astype(np.float32) / 63.0
    image01 = np.stack([xx, yy, 1 - xx * yy])[None]  # [1, 3, 64, 64] in [0, 1]
    init = image01 * 2 - 1  # what diffusers' preprocessing makes of it
    with torch.no_grad():
        expected = ref(
            prompt=PROMPT, negative_prompt=NEGATIVE, image=torch.from_numpy(image01), strength=0.6,
            num_inference_steps=10, guidance_scale=7.5, output_type="np", generator=[torch.Generator().manual_seed(7)],
        ).images
    params = GenerationParams(prompt=PROMPT, negative_prompt=NEGATIVE, steps=10, guidance_scale=7.5,
                              scheduler="ddim", strength=0.6)
    result = pipe(params, init_image=init, noise=[TorchNoise(7)], progress=False)
    theirs = reference_images(expected)[0]
    assert theirs.std() > 5.0
    assert psnr(result.images[0], theirs) >= MIN_PSNR_DB
    assert len(result.timings.unet_step_s) == 6  # 10 steps at strength 0.6
    assert result.timings.vae_encode_s > 0


def test_no_guidance_matches_diffusers(pipe, tiny_modules, tokenizer, tiny_export: Path) -> None:
    ref = diffusers_pipe(diffusers.StableDiffusionPipeline, tiny_modules, tokenizer, tiny_export, "pndm")
    latents = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = ref(prompt=PROMPT, num_inference_steps=4, guidance_scale=1.0, latents=latents.clone(),
                       output_type="np").images
    result = pipe(GenerationParams(prompt=PROMPT, steps=4, guidance_scale=1.0), latents=latents.numpy(),
                  progress=False)
    assert psnr(result.images[0], reference_images(expected)[0]) >= MIN_PSNR_DB
    unet_batch = pipe.interpreter.runner("unet").inputs["sample"].shape[0]
    assert result.timings.unet_calls == 5  # one call per evaluation; a batch-2 UNet is padded, never split
    assert unet_batch in (1, 2)


def test_default_noise_is_reproducible_per_image(pipe) -> None:
    params = GenerationParams(prompt=PROMPT, steps=3, seed=11, num_images=2, scheduler="euler_a")
    both = pipe(params, progress=False)
    second_alone = pipe(GenerationParams(prompt=PROMPT, steps=3, seed=12, scheduler="euler_a"), progress=False)
    np.testing.assert_array_equal(both.images[1], second_alone.images[0])
    assert both.seeds == [11, 12]
    assert not np.array_equal(both.images[0], both.images[1])


@pytest.mark.parametrize(("num_images", "guidance"), [(2, 7.5), (3, 1.0)])
def test_batch2_unet_matches_diffusers(cfg2_export: Path, tiny_modules, tokenizer, tiny_export: Path,
                                       num_images: int, guidance: float) -> None:
    """cfg_batch=2: ``[uncond, cond]`` of one image per call with CFG; without CFG, images paired (odd one padded)."""
    pipe = StableDiffusionPipeline.from_folder(cfg2_export, BackendOptions("cpu", num_threads=1))
    try:
        assert pipe.interpreter.runner("unet").inputs["sample"].shape[0] == 2
        ref = diffusers_pipe(diffusers.StableDiffusionPipeline, tiny_modules, tokenizer, tiny_export, "pndm")
        latents = torch.randn(num_images, 4, 8, 8, generator=torch.Generator().manual_seed(9))
        with torch.no_grad():
            expected = ref(prompt=PROMPT, negative_prompt=NEGATIVE, num_inference_steps=4, guidance_scale=guidance,
                           num_images_per_prompt=num_images, latents=latents.clone(), output_type="np").images
        params = GenerationParams(prompt=PROMPT, negative_prompt=NEGATIVE, steps=4, guidance_scale=guidance,
                                  num_images=num_images)
        result = pipe(params, latents=latents.numpy(), progress=False)
        for ours, theirs in zip(result.images, reference_images(expected)):
            assert theirs.std() > 5.0 and psnr(ours, theirs) >= MIN_PSNR_DB
        items = num_images * (2 if guidance > 1 else 1)
        assert result.timings.unet_calls == 5 * ((items + 1) // 2)  # PNDM: 5 evaluations, 2 items per call
    finally:
        pipe.close()


# ------------------------------------------------------------------ fused models (issue #6 acceptance 2, fused half)

@pytest.fixture(scope="module")
def fused_winograd_export(tiny_export: Path, tmp_path_factory) -> Path:
    """``sdconvert optimize tiny_export --fuse --winograd 4``: Sd* ops plus SdConv2DWinograd for every 3x3 conv."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_folder

    out = tmp_path_factory.mktemp("tiny-fw") / "sd-tiny-fused-wino4"
    optimize_folder(tiny_export, out, GraphOptions(fuse=True, winograd="4"))
    return out


FUSED_VARIANTS = {"fused": "tiny_fused_export", "fused_winograd4": "fused_winograd_export"}
# fused op -> the rules that emit it (LayerNorms become one-group SdGroupNorms)
FUSED_OPS = {"SdAttention": ("attention",), "SdGelu": ("gelu",), "SdGroupNorm": ("group_norm", "layer_norm")}


def assert_sd_ops_ran_in_delegate(pipe, names: tuple[str, ...]) -> int:
    """Every ``Sd*`` op of the loaded models ran in our delegate (``sdgpu``); returns how many there were."""
    total = 0
    for name in names:
        runner = pipe.interpreter.runner(name)
        fused = {op: n for op, n in runner.info.op_histogram.items() if op.startswith("Sd")}
        assert fused, f"{name} has no fused ops"
        ran = runner.placement.ops_by_executor(runner.info).get("sdgpu", {})
        assert {op: ran.get(op, 0) for op in fused} == fused, name
        total += sum(fused.values())
    return total


@pytest.mark.parametrize("variant", FUSED_VARIANTS)
def test_fused_txt2img_matches_diffusers(request, variant: str, tiny_modules, tokenizer, tiny_export: Path) -> None:
    folder = request.getfixturevalue(FUSED_VARIANTS[variant])
    ref = diffusers_pipe(diffusers.StableDiffusionPipeline, tiny_modules, tokenizer, tiny_export, "pndm")
    latents = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(42))
    with torch.no_grad():
        expected = ref(prompt=PROMPT, negative_prompt=NEGATIVE, num_inference_steps=8, guidance_scale=7.5,
                       latents=latents.clone(), height=64, width=64, output_type="np").images
    pipe = StableDiffusionPipeline.from_folder(folder, BackendOptions("cpu", num_threads=1))
    try:
        result = pipe(GenerationParams(prompt=PROMPT, negative_prompt=NEGATIVE, steps=8, guidance_scale=7.5),
                      latents=latents.numpy(), progress=False)
        theirs = reference_images(expected)[0]
        assert theirs.std() > 5.0
        db = psnr(result.images[0], theirs)
        print(f"\n  txt2img {variant}: PSNR {db:.1f} dB vs diffusers")
        assert db >= MIN_PSNR_DB
        names = ("text_encoder", "unet", "vae_decoder")
        assert_sd_ops_ran_in_delegate(pipe, names)
        plan = json.loads((folder / "manifest.json").read_text()).get("winograd", {})
        sites = expected_sites(TINY)  # counted from the diffusers modules (tests/converter/test_rules.py pins them)
        for name in names:  # every attention / GELU / Group-/LayerNorm site fused; every suitable 3x3 conv Winograd
            hist = pipe.interpreter.runner(name).info.op_histogram
            assert {op: hist.get(op, 0) for op in FUSED_OPS} == {
                op: sum(sites[name][r] for r in rules) for op, rules in FUSED_OPS.items()
            }
            assert hist.get("SdConv2DWinograd", 0) == (plan[name]["summary"]["suitable"] if plan else 0)
        if variant == "fused_winograd4":
            assert pipe.interpreter.runner("unet").info.op_histogram["SdConv2DWinograd"] == 26
    finally:
        pipe.close()


def test_fused_img2img_matches_diffusers(tiny_fused_export: Path, tiny_modules, tokenizer, tiny_export: Path) -> None:
    """img2img on the fused folder: the fused VAE encoder (1 attention, 14 GroupNorms) runs too; the UNet has 14
    attention + 7 GELU + 51 SdGroupNorm (30 GroupNorms + 21 LayerNorms)."""
    ref = diffusers_pipe(diffusers.StableDiffusionImg2ImgPipeline, tiny_modules, tokenizer, tiny_export, "ddim")
    yy, xx = np.mgrid[0:64, 0:64].astype(np.float32) / 63.0
    image01 = np.stack([xx, yy, 1 - xx * yy])[None]
    with torch.no_grad():
        expected = ref(prompt=PROMPT, negative_prompt=NEGATIVE, image=torch.from_numpy(image01), strength=0.6,
                       num_inference_steps=10, guidance_scale=7.5, output_type="np",
                       generator=[torch.Generator().manual_seed(7)]).images
    pipe = StableDiffusionPipeline.from_folder(tiny_fused_export, BackendOptions("cpu", num_threads=1))
    try:
        params = GenerationParams(prompt=PROMPT, negative_prompt=NEGATIVE, steps=10, guidance_scale=7.5,
                                  scheduler="ddim", strength=0.6)
        result = pipe(params, init_image=image01 * 2 - 1, noise=[TorchNoise(7)], progress=False)
        theirs = reference_images(expected)[0]
        assert theirs.std() > 5.0
        db = psnr(result.images[0], theirs)
        print(f"\n  img2img fused: PSNR {db:.1f} dB vs diffusers")
        assert db >= MIN_PSNR_DB
        assert assert_sd_ops_ran_in_delegate(pipe, ("vae_encoder", "unet")) == 15 + 72
    finally:
        pipe.close()


def test_generate_noise_torch_reproduces_diffusers_from_the_seed(tiny_modules, tokenizer, tiny_export: Path,
                                                                  tmp_path: Path) -> None:
    """``sdlite generate --seed S --noise torch`` draws what diffusers draws with ``torch.Generator().manual_seed(S)``
    (initial latents and euler_a's per-step noise): the same image from the seed alone, no latents handed over.
    The default numpy stream gives another image for the same seed."""
    from PIL import Image

    from sdlite.cli import main

    seed, steps = 1234, 6
    ref = diffusers_pipe(diffusers.StableDiffusionPipeline, tiny_modules, tokenizer, tiny_export, "euler_a")
    with torch.no_grad():
        (expected,) = reference_images(ref(
            prompt=PROMPT, negative_prompt=NEGATIVE, num_inference_steps=steps, guidance_scale=7.5, height=64,
            width=64, output_type="np", generator=torch.Generator().manual_seed(seed)).images)
    images = {}
    for noise in ("torch", "numpy"):
        out = tmp_path / f"{noise}.png"
        assert main(["generate", str(tiny_export), "-p", PROMPT, "-n", NEGATIVE, "--steps", str(steps),
                     "--scheduler", "euler_a", "--seed", str(seed), "--noise", noise, "-o", str(out),
                     "--num-threads", "1", "--no-progress"]) == 0
        with Image.open(out) as im:
            images[noise] = np.asarray(im.convert("RGB"))
            assert f"Seed: {seed}" in im.text["parameters"] and f"RNG: {noise}" in im.text["parameters"]
    assert expected.std() > 5.0
    assert psnr(images["torch"], expected) >= MIN_PSNR_DB
    assert psnr(images["numpy"], expected) < 30
