"""Where the weights come from: an embedded random-weight config, a diffusers folder, or a single-file checkpoint.

Each loader returns a :class:`LoadedPipeline` with eval-mode fp32 modules, the SD config dicts, and the tokenizer /
scheduler files to copy. Every problem is a one-line :class:`UserError` raised before any conversion starts.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdconvert.errors import UserError

from . import checks
from sdconvert.configs import SD1_SCHEDULER, SDConfig, build_random_modules, get_config


@dataclass
class LoadedPipeline:
    modules: dict[str, Any]
    unet_config: dict[str, Any]
    vae_config: dict[str, Any]
    text_config: dict[str, Any]
    scheduler_config: dict[str, Any]
    source: dict[str, Any]
    tokenizer_dir: Path | None = None  # diffusers tokenizer/ folder; None -> build from the CLIP BPE file
    default_size: tuple[int, int] = (512, 512)
    extra: dict[str, Any] = field(default_factory=dict)


def from_random(name: str, seed: int = 0) -> LoadedPipeline:
    cfg: SDConfig = get_config(name)
    return LoadedPipeline(
        modules=build_random_modules(cfg, seed),
        unet_config=dict(cfg.unet), vae_config=dict(cfg.vae), text_config=dict(cfg.text_encoder),
        scheduler_config=dict(cfg.scheduler),
        source={"kind": "random", "config": name, "seed": seed},
        default_size=(cfg.default_height, cfg.default_width),
    )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"missing {path}") from None
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e.__class__.__name__}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a JSON object")
    return data


def from_diffusers_folder(root: Path) -> LoadedPipeline:
    if not root.exists():
        raise UserError(f"model folder {root} does not exist")
    if not root.is_dir():
        raise UserError(f"{root} is not a folder (for a single-file checkpoint use --checkpoint)")
    if not (root / "model_index.json").exists():
        raise UserError(f"{root} is not a diffusers pipeline folder (no model_index.json)")
    index = _read_json(root / "model_index.json")
    cls = str(index.get("_class_name", ""))
    if "StableDiffusion" not in cls:
        raise UserError(f"{root} holds a {cls or 'unknown'} pipeline; sdconvert converts Stable Diffusion 1.4/1.5")
    for sub in ("unet", "vae", "text_encoder"):
        if not (root / sub / "config.json").exists():
            raise UserError(f"{root} has no {sub}/config.json")
    unet_cfg = _read_json(root / "unet" / "config.json")
    text_cfg = _read_json(root / "text_encoder" / "config.json")
    vae_cfg = _read_json(root / "vae" / "config.json")
    problem = checks.sd1_architecture_problem(unet_cfg, text_cfg, cls)
    if problem:
        raise UserError(f"{root}: {problem}")
    for sub in ("unet", "vae", "text_encoder"):
        weights = sorted((root / sub).glob("*.safetensors"))
        if not weights and not list((root / sub).glob("*.bin")):
            raise UserError(f"{root}/{sub} has no weights (*.safetensors)")
        for w in weights:
            checks.check_safetensors(w)
    modules = _load_modules(root)
    sched_path = root / "scheduler" / "scheduler_config.json"
    sched = _read_json(sched_path) if sched_path.exists() else dict(SD1_SCHEDULER)
    tok = root / "tokenizer"
    return LoadedPipeline(
        modules=modules, unet_config=unet_cfg, vae_config=vae_cfg, text_config=text_cfg, scheduler_config=sched,
        source={"kind": "diffusers", "path": str(root.resolve()), "pipeline": cls},
        tokenizer_dir=tok if tok.is_dir() else None,
        default_size=_default_size(unet_cfg, vae_cfg),
    )


def _default_size(unet_cfg: dict[str, Any], vae_cfg: dict[str, Any]) -> tuple[int, int]:
    s = int(unet_cfg.get("sample_size", 64)) * 2 ** (len(vae_cfg.get("block_out_channels", (0,) * 4)) - 1)
    return s, s


def _load_modules(root: Path) -> dict[str, Any]:
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextModel

    try:
        return {
            "unet": UNet2DConditionModel.from_pretrained(root, subfolder="unet", local_files_only=True).eval().float(),
            "vae": AutoencoderKL.from_pretrained(root, subfolder="vae", local_files_only=True).eval().float(),
            "text_encoder": CLIPTextModel.from_pretrained(root / "text_encoder", local_files_only=True).eval().float(),
        }
    except (OSError, ValueError, RuntimeError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise UserError(f"cannot load weights from {root}: {first[:300]}") from None
