"""Single-file SD 1.x checkpoints (.safetensors; pickle .ckpt only with --allow-pickle).

The architecture is recognised from parameter names (SD 2.x's OpenCLIP and SDXL's dual encoders are rejected by
name) and the embedded config is chosen by parameter shapes; weights are mapped to diffusers names by diffusers' own
converter functions, then loaded with ``strict=True`` so any missing/unexpected tensor is an error, not silence.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from sdconvert.errors import UserError

from . import checks
from .configs import CONFIGS, SDConfig
from .ldm_keys import CLIP_PREFIX, UNET_PREFIX
from .sources import LoadedPipeline

SD2_MARK = "cond_stage_model.model.transformer.resblocks."
SDXL_MARK = "conditioner.embedders."
CONV_IN = UNET_PREFIX + "input_blocks.0.0.weight"


def _read(path: Path, allow_pickle: bool) -> dict[str, Any]:
    if not path.exists():
        raise UserError(f"checkpoint {path} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        checks.check_safetensors(path)
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
            raise UserError(f"corrupt safetensors file {path}: {str(e)[:200]}") from None
    if suffix in (".ckpt", ".pt", ".pth"):
        if not allow_pickle:
            raise UserError(f"{path} is a pickle checkpoint that can run arbitrary code when loaded; "
                            "convert it to .safetensors or pass --allow-pickle if you trust it")
        import torch

        try:
            data = torch.load(str(path), map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001
            raise UserError(f"cannot read checkpoint {path}: {str(e)[:200]}") from None
        return data.get("state_dict", data) if isinstance(data, dict) else {}
    raise UserError(f"unsupported checkpoint type {path.suffix!r}; expected .safetensors (or .ckpt with --allow-pickle)")


def detect_config(sd: dict[str, Any], path: Path) -> SDConfig:
    if any(k.startswith(SDXL_MARK) for k in sd):
        raise UserError(f"{path} is an SDXL checkpoint; sdconvert supports SD 1.4/1.5 only")
    if any(k.startswith(SD2_MARK) for k in sd):
        raise UserError(f"{path} is a Stable Diffusion 2.x checkpoint (OpenCLIP text encoder); sdconvert supports SD 1.4/1.5 only")
    if CONV_IN not in sd or not any(k.startswith(CLIP_PREFIX) for k in sd):
        raise UserError(f"{path} is not a Stable Diffusion 1.x checkpoint (no {CONV_IN} / CLIP text encoder weights)")
    base, in_ch = int(sd[CONV_IN].shape[0]), int(sd[CONV_IN].shape[1])
    if in_ch != 4:
        raise UserError(f"{path}: UNet has {in_ch} input channels (inpainting/depth variant); only 4-channel SD 1.x is supported")
    k_proj = next((v for k, v in sd.items() if k.startswith(UNET_PREFIX) and k.endswith("attn2.to_k.weight")), None)
    cross = int(k_proj.shape[1]) if k_proj is not None else -1
    for cfg in CONFIGS.values():
        if cfg.unet["block_out_channels"][0] == base and cfg.unet["cross_attention_dim"] == cross:
            return cfg
    raise UserError(f"{path}: no known SD 1.x configuration has {base} base channels and cross-attention dim {cross}")


def load(path: Path, allow_pickle: bool = False) -> LoadedPipeline:
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from diffusers.loaders import single_file_utils as sfu
    from transformers import CLIPTextConfig, CLIPTextModel

    sd = _read(path, allow_pickle)
    cfg = detect_config(sd, path)
    with torch.device("meta"):
        unet = UNet2DConditionModel(**cfg.unet)
        vae = AutoencoderKL(**cfg.vae)
        text = CLIPTextModel(CLIPTextConfig(**cfg.text_encoder))
    parts = {
        "unet": (unet, sfu.convert_ldm_unet_checkpoint(sd, dict(unet.config))),
        "vae": (vae, sfu.convert_ldm_vae_checkpoint(sd, dict(vae.config))),
        "text_encoder": (text, sfu.convert_ldm_clip_checkpoint(sd)),
    }
    modules = {}
    for name, (module, state) in parts.items():
        expected = set(module.state_dict())
        state = {k: v for k, v in state.items() if k in expected or not k.endswith("position_ids")}
        try:
            module.load_state_dict(state, strict=True, assign=True)
        except RuntimeError as e:
            raise UserError(f"{path}: {name} weights do not match SD 1.x ({str(e).splitlines()[0][:200]})") from None
        modules[name] = module.float().eval()
    return LoadedPipeline(
        modules=modules, unet_config=dict(cfg.unet), vae_config=dict(cfg.vae), text_config=dict(cfg.text_encoder),
        scheduler_config=dict(cfg.scheduler), source={"kind": "single_file", "path": str(path.resolve()), "config": cfg.name},
        default_size=(cfg.default_height, cfg.default_width),
    )
