"""Shared fixtures. Tiny models by default; tests/large/ is collected only with SDCONVERT_LARGE=1."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

collect_ignore_glob = [] if os.environ.get("SDCONVERT_LARGE") == "1" else ["large/*"]

TINY_SEED = 0


@pytest.fixture(scope="session")
def tiny_modules():
    """The torch modules (fp32, eval) of the tiny config with the same weights that ``tiny_export`` converted."""
    from sdconvert.configs import TINY, build_random_modules

    return build_random_modules(TINY, seed=TINY_SEED)


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory) -> Path:
    """`sdconvert --random-weights tiny --verify` once per session; returns the output folder."""
    from sdconvert.export.convert import ConvertOptions, run

    out = tmp_path_factory.mktemp("tiny") / "sd-tiny"
    result = run(ConvertOptions(out=out, random_weights="tiny", seed=TINY_SEED, verify=True, quiet=True))
    assert result.ok, result.parity
    return out


@pytest.fixture(scope="session")
def tiny_diffusers_dir(tmp_path_factory, tiny_modules, tiny_export) -> Path:
    """The tiny pipeline saved with diffusers' ``save_pretrained`` (a real diffusers folder, safetensors weights)."""
    from diffusers import PNDMScheduler, StableDiffusionPipeline
    from transformers import CLIPTokenizer

    from sdconvert.configs import TINY

    tok = CLIPTokenizer(str(tiny_export / "tokenizer" / "vocab.json"), str(tiny_export / "tokenizer" / "merges.txt"))
    pipe = StableDiffusionPipeline(
        vae=tiny_modules["vae"], text_encoder=tiny_modules["text_encoder"], tokenizer=tok, unet=tiny_modules["unet"],
        scheduler=PNDMScheduler.from_config(TINY.scheduler), safety_checker=None, feature_extractor=None,
        requires_safety_checker=False,
    )
    root = tmp_path_factory.mktemp("diffusers") / "tiny-sd"
    pipe.save_pretrained(root, safe_serialization=True)
    return root


@pytest.fixture(scope="session")
def tiny_fused_export(tmp_path_factory, tiny_export) -> Path:
    """``tiny_export`` with every model fused (``sdconvert optimize tiny_export --fuse``): same weights, no re-export."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_folder

    out = tmp_path_factory.mktemp("tiny-fused") / "sd-tiny-fused"
    optimize_folder(tiny_export, out, GraphOptions(fuse=True))
    return out


@pytest.fixture(scope="session")
def tiny_fused_winograd_models(tmp_path_factory, tiny_export) -> Path:
    """The tiny UNet and text encoder fused with Winograd F4 convs (``sdconvert optimize --fuse --winograd 4``); a
    folder with ``unet.tflite`` and ``text_encoder.tflite`` (the base models of the fuzz corpus)."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_file

    out = tmp_path_factory.mktemp("tiny-fused-winograd")
    for name in ("unet", "text_encoder"):
        optimize_file(tiny_export / f"{name}.tflite", out / f"{name}.tflite", GraphOptions(fuse=True, winograd="4"))
    return out
