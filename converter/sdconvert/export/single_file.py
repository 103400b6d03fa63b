"""Single-file SD 1.x checkpoints (.safetensors; pickle .ckpt only with --allow-pickle).

The architecture is recognised from parameter names (SD 2.x's OpenCLIP and SDXL's dual encoders are rejected by
name) and the embedded config is chosen by parameter shapes; weights are mapped to diffusers names by diffusers' own
converter functions, then loaded with ``strict=True`` so any missing/unexpected tensor is an error, not silence.

Both CLIP key layouts of SD 1.x files load (``cond_stage_model.transformer.text_model.*`` and the SD 1.4-era
``cond_stage_model.transformer.*``). A file with LDM's EMA copy of the UNet (``model_ema.*``, the full
``v1-5-pruned.ckpt``) gives its non-EMA weights by default, as diffusers' conversion does; ``ema=True`` takes the
EMA copy. The choice is recorded in the source entry (``source["ema"]``) and the summary line.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdconvert.errors import UserError

from . import checks
from sdconvert.configs import CONFIGS, SDConfig
from .ldm_keys import CLIP_PREFIX, CLIP_TEXT_MODEL, EMA_PREFIX, UNET_PREFIX, ema_key
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


@dataclass(frozen=True)
class EmaChoice:
    """Which UNet weights a single-file load took: ``available`` = the file holds LDM's EMA copy (``model_ema.*``),
    ``used`` = those were loaded (``--ema``) instead of ``model.diffusion_model.*``."""

    available: bool
    used: bool

    def as_dict(self) -> dict[str, bool]:
        return {"available": self.available, "used": self.used}

    def describe(self) -> str:
        """One line for the conversion summary."""
        if self.used:
            return "UNet weights: EMA (model_ema.*, --ema)"
        if self.available:
            return "UNet weights: non-EMA (model.diffusion_model.*; the file also has EMA weights: --ema uses them)"
        return "UNet weights: model.diffusion_model.* (the file has no separate EMA copy)"


def ema_available(sd: dict[str, Any]) -> bool:
    """Every UNet parameter has its LDM EMA buffer (a partial EMA copy counts as none: it cannot be loaded)."""
    unet_keys = [k for k in sd if k.startswith(UNET_PREFIX)]
    return bool(unet_keys) and all(ema_key(k) in sd for k in unet_keys)


def _clip_state(sd: dict[str, Any], sfu: Any, expected: set[str]) -> tuple[dict[str, Any], str]:
    """CLIP weights under the names the installed CLIPTextModel uses (``expected``: transformers 4 nests them under
    ``text_model.``, 5 does not), and the file's layout (``sd15``: ``...transformer.text_model.*``, ``sd14``: not)."""
    state = sfu.convert_ldm_clip_checkpoint(sd)
    layout = "sd15" if any(k.startswith(CLIP_TEXT_MODEL) for k in state) else "sd14"
    nested = any(k.startswith(CLIP_TEXT_MODEL) for k in expected)
    flat = {k.removeprefix(CLIP_TEXT_MODEL): v for k, v in state.items()}
    return ({CLIP_TEXT_MODEL + k: v for k, v in flat.items()} if nested else flat), layout


def load(path: Path, allow_pickle: bool = False, ema: bool | None = None) -> LoadedPipeline:
    """Load a single-file checkpoint. ``ema``: None = diffusers' default (the non-EMA UNet weights, as
    ``convert_ldm_unet_checkpoint(extract_ema=False)``); True = LDM's EMA copy (an error if the file has none);
    False = the non-EMA weights, said explicitly."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from diffusers.loaders import single_file_utils as sfu
    from transformers import CLIPTextConfig, CLIPTextModel

    sd = _read(path, allow_pickle)
    cfg = detect_config(sd, path)
    has_ema = ema_available(sd)
    if ema and not has_ema:
        partial = sum(k.startswith(EMA_PREFIX) for k in sd)
        raise UserError(f"--ema: {path} has no EMA weights ({EMA_PREFIX}* for every UNet parameter; "
                        f"found {partial} {EMA_PREFIX}* tensors)")
    choice = EmaChoice(available=has_ema, used=bool(ema))
    # UNet and VAE are built on the meta device (no random init of weights that are replaced anyway) and filled
    # with assign=True. CLIPTextModel is built for real: its non-persistent buffer embeddings.position_ids is in no
    # state dict, so under meta it would stay a meta tensor and the export would fail on it.
    with torch.device("meta"):
        unet = UNet2DConditionModel(**cfg.unet)
        vae = AutoencoderKL(**cfg.vae)
    text = CLIPTextModel(CLIPTextConfig(**cfg.text_encoder))
    clip_state, clip_layout = _clip_state(sd, sfu, set(text.state_dict()))
    parts = {
        "unet": (unet, sfu.convert_ldm_unet_checkpoint(sd, dict(unet.config), extract_ema=choice.used)),
        "vae": (vae, sfu.convert_ldm_vae_checkpoint(sd, dict(vae.config))),
        "text_encoder": (text, clip_state),
    }
    modules = {}
    for name, (module, state) in parts.items():
        expected = set(module.state_dict())
        state = {k: v for k, v in state.items() if k in expected or not k.endswith("position_ids")}
        try:
            module.load_state_dict(state, strict=True, assign=True)
        except RuntimeError as e:
            raise UserError(f"{path}: {name} weights do not match SD 1.x ({str(e).splitlines()[0][:200]})") from None
        left = [n for n, t in (*module.named_parameters(), *module.named_buffers()) if t.is_meta]
        if left:  # a buffer no state dict carries (a new diffusers/transformers version): say which, do not export
            raise UserError(f"{path}: {name} has tensors no checkpoint key fills: {', '.join(left[:5])}")
        modules[name] = module.float().eval()
    return LoadedPipeline(
        modules=modules, unet_config=dict(cfg.unet), vae_config=dict(cfg.vae), text_config=dict(cfg.text_encoder),
        scheduler_config=dict(cfg.scheduler),
        source={"kind": "single_file", "path": str(path.resolve()), "config": cfg.name, "ema": choice.as_dict(),
                "clip_layout": clip_layout},
        default_size=(cfg.default_height, cfg.default_width),
    )
