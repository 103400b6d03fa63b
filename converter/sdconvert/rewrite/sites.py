"""How many attention / GELU / GroupNorm / LayerNorm sites each exported model has, counted from the diffusers modules.

The modules are built on torch's ``meta`` device, so even SD1.5 costs no weight memory. The large test compares these
numbers with the fusion table (SD1.5 UNet: 32 attention = 16 transformer blocks x self+cross, 16 GELU = one GEGLU per
block, 61 GroupNorm = 22 ResNets x 2 + 16 transformer norms + conv_norm_out, 48 LayerNorm = 16 blocks x norm1/2/3;
CLIP ViT-L: 25 LayerNorm = 12 layers x 2 + final_layer_norm).
"""

from __future__ import annotations

from typing import Any

SITE_RULES = ("attention", "gelu", "group_norm", "layer_norm")


def _count(module: Any) -> dict[str, int]:
    import torch

    attention = gelu = group_norm = layer_norm = 0
    for m in module.modules():
        name = type(m).__name__
        if name in ("Attention", "CLIPAttention", "CLIPSdpaAttention", "CLIPFlashAttention2"):
            attention += 1
        elif name in (
            "GEGLU",
            "GELU",
            "ApproximateGELU",
            "QuickGELUActivation",
            "GELUActivation",
            "NewGELUActivation",
            "GELUTanh",
            "GELUPytorchTanh",
        ):
            gelu += 1
        elif isinstance(m, torch.nn.GroupNorm):
            group_norm += 1
        elif isinstance(m, torch.nn.LayerNorm):
            layer_norm += 1
    return {"attention": attention, "gelu": gelu, "group_norm": group_norm, "layer_norm": layer_norm}


def expected_sites(config: Any) -> dict[str, dict[str, int]]:
    """``{model_name: {"attention": n, "gelu": n, "group_norm": n, "layer_norm": n}}`` for an :class:`SDConfig`."""
    import torch

    from sdconvert.configs import build_random_modules

    with torch.device("meta"):
        mods = build_random_modules(config, seed=0)
    vae = mods["vae"]
    return {
        "unet": _count(mods["unet"]),
        "vae_decoder": _count(vae.decoder),
        "vae_encoder": _count(vae.encoder),
        "text_encoder": _count(mods["text_encoder"]),
    }


__all__ = ["SITE_RULES", "expected_sites"]
