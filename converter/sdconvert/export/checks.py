"""Input validation that turns bad models into one-line :class:`UserError` messages before any slow work starts."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from sdconvert.errors import UserError

SD1_DOWN = {"CrossAttnDownBlock2D", "DownBlock2D"}
SD1_UP = {"CrossAttnUpBlock2D", "UpBlock2D"}


def check_safetensors(path: Path) -> dict[str, Any]:
    """Validate a .safetensors file's header and size (catches truncation/corruption); return the header."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise UserError(f"corrupt safetensors file {path}: shorter than its 8-byte header length")
            (n,) = struct.unpack("<Q", raw)
            if n > min(size - 8, 100 << 20):
                raise UserError(f"corrupt safetensors file {path}: header length {n} exceeds the file")
            header = json.loads(f.read(n))
    except UserError:
        raise
    except (OSError, ValueError) as e:
        raise UserError(f"corrupt safetensors file {path}: unreadable header ({e.__class__.__name__})") from None
    if not isinstance(header, dict):
        raise UserError(f"corrupt safetensors file {path}: header is not a JSON object")
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)), default=0)
    if 8 + n + end > size:
        raise UserError(f"truncated safetensors file {path}: tensors need {8 + n + end} bytes, file has {size}")
    return header


def sd1_architecture_problem(unet: dict[str, Any], text: dict[str, Any] | None, pipeline_class: str = "") -> str | None:
    """Why the config is not an SD 1.x pipeline (None if it is). Uses the diffusers/transformers config dicts."""
    if "XL" in pipeline_class or unet.get("addition_embed_type") or unet.get("addition_time_embed_dim"):
        return "this is an SDXL-style model (addition_embed_type / time embeddings); sdconvert supports SD 1.4/1.5 only"
    if unet.get("_class_name", "UNet2DConditionModel") != "UNet2DConditionModel":
        return f"UNet class {unet.get('_class_name')} is not an SD 1.x UNet2DConditionModel"
    head_dim = unet.get("attention_head_dim")
    if unet.get("use_linear_projection") or isinstance(head_dim, list) or unet.get("cross_attention_dim") == 1024:
        return ("this is a Stable Diffusion 2.x model (cross_attention_dim="
                f"{unet.get('cross_attention_dim')}, linear projections); sdconvert supports SD 1.4/1.5 only")
    if set(unet.get("down_block_types", ())) - SD1_DOWN or set(unet.get("up_block_types", ())) - SD1_UP:
        return f"unsupported UNet block types {unet.get('down_block_types')} / {unet.get('up_block_types')} (not SD 1.x)"
    if unet.get("in_channels", 4) != 4:
        return f"UNet has in_channels={unet.get('in_channels')} (inpainting/depth variant); only 4-channel SD 1.x is supported"
    if unet.get("class_embed_type") or unet.get("encoder_hid_dim"):
        return "UNet has class/extra embeddings (not SD 1.x)"
    if text is not None:
        arch = (text.get("architectures") or ["CLIPTextModel"])[0]
        if arch != "CLIPTextModel":
            return f"text encoder {arch} is not SD 1.x's CLIPTextModel"
        if text.get("hidden_size") != unet.get("cross_attention_dim"):
            return (f"text encoder hidden_size {text.get('hidden_size')} != UNet cross_attention_dim "
                    f"{unet.get('cross_attention_dim')}")
    return None


def check_size(height: int, width: int) -> None:
    for name, v in (("height", height), ("width", width)):
        if v <= 0 or v % 64:
            raise UserError(f"--{name} must be a positive multiple of 64, got {v}")
