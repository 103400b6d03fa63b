"""Parameter names of the original (CompVis/LDM) single-file SD 1.x checkpoints, from diffusers module names.

Used to *write* single-file checkpoints from diffusers modules (tests, and users who want one); reading goes
through diffusers' own converter in :mod:`single_file`, so the two are independent and a round trip checks both.
"""
from __future__ import annotations

import re
from typing import Any

UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."
CLIP_PREFIX = "cond_stage_model.transformer."
#: SD 1.5-era checkpoints nest the CLIP weights under ``text_model.`` (transformers 4's CLIPTextModel); SD 1.4-era
#: ones (saved from CLIPTextTransformer) start at ``embeddings.`` / ``encoder.`` / ``final_layer_norm.`` directly, as
#: transformers 5's CLIPTextModel names them.
CLIP_TEXT_MODEL = "text_model."
#: LDM's EMA copy of the UNet (``LitEma``): one buffer per UNet parameter, named without dots (see :func:`ema_key`).
EMA_PREFIX = "model_ema."

_RESNET = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1", "norm2": "out_layers.0",
           "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}
_VAE_ATTN = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def _resnet(rest: str) -> str:
    head, _, tail = rest.partition(".")
    return f"{_RESNET.get(head, head)}.{tail}"


def unet_key(name: str, layers_per_block: int, up_has_attention: list[bool]) -> str:
    n = layers_per_block
    fixed = {"time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
             "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2"}
    for k, v in fixed.items():
        if name.startswith(k + "."):
            return v + name[len(k):]
    if m := re.match(r"down_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", name):
        i, j, rest = int(m[1]), int(m[2]), m[3]
        return f"input_blocks.{(n + 1) * i + j + 1}.0.{_resnet(rest)}"
    if m := re.match(r"down_blocks\.(\d+)\.attentions\.(\d+)\.(.*)", name):
        return f"input_blocks.{(n + 1) * int(m[1]) + int(m[2]) + 1}.1.{m[3]}"
    if m := re.match(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)", name):
        return f"input_blocks.{(n + 1) * (int(m[1]) + 1)}.0.op.{m[2]}"
    if m := re.match(r"mid_block\.resnets\.(\d)\.(.*)", name):
        return f"middle_block.{2 * int(m[1])}.{_resnet(m[2])}"
    if m := re.match(r"mid_block\.attentions\.0\.(.*)", name):
        return f"middle_block.1.{m[1]}"
    if m := re.match(r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)", name):
        return f"output_blocks.{(n + 1) * int(m[1]) + int(m[2])}.0.{_resnet(m[3])}"
    if m := re.match(r"up_blocks\.(\d+)\.attentions\.(\d+)\.(.*)", name):
        return f"output_blocks.{(n + 1) * int(m[1]) + int(m[2])}.1.{m[3]}"
    if m := re.match(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.*)", name):
        i = int(m[1])
        return f"output_blocks.{(n + 1) * i + n}.{2 if up_has_attention[i] else 1}.conv.{m[2]}"
    raise KeyError(f"no LDM name for UNet parameter {name}")


def vae_key(name: str, num_blocks: int) -> str:
    name = re.sub(r"^(encoder|decoder)\.mid_block\.resnets\.(\d)", lambda m: f"{m[1]}.mid.block_{int(m[2]) + 1}", name)
    name = re.sub(r"^(encoder|decoder)\.mid_block\.attentions\.0", r"\1.mid.attn_1", name)
    name = re.sub(r"^encoder\.down_blocks\.(\d+)\.resnets\.", r"encoder.down.\1.block.", name)
    name = re.sub(r"^encoder\.down_blocks\.(\d+)\.downsamplers\.0\.", r"encoder.down.\1.downsample.", name)
    name = re.sub(r"^decoder\.up_blocks\.(\d+)\.resnets\.", lambda m: f"decoder.up.{num_blocks - 1 - int(m[1])}.block.", name)
    name = re.sub(r"^decoder\.up_blocks\.(\d+)\.upsamplers\.0\.", lambda m: f"decoder.up.{num_blocks - 1 - int(m[1])}.upsample.", name)
    name = re.sub(r"^(encoder|decoder)\.conv_norm_out\.", r"\1.norm_out.", name)
    name = name.replace(".conv_shortcut.", ".nin_shortcut.")
    if ".attn_1." in name:
        head, _, rest = name.partition(".attn_1.")
        sub, _, leaf = rest.rpartition(".")
        name = f"{head}.attn_1.{_VAE_ATTN.get(sub, sub)}.{leaf}"
    return name


def ema_key(ldm_unet_key: str) -> str:
    """The EMA buffer of a UNet parameter: ``model.diffusion_model.input_blocks.0.0.weight`` ->
    ``model_ema.diffusion_modelinput_blocks00weight`` (LitEma drops the dots; diffusers' converter reads it so)."""
    return EMA_PREFIX + "".join(ldm_unet_key.split(".")[1:])


def to_ldm_state_dict(modules: dict[str, Any], *, ema_unet: Any = None, clip_layout: str = "sd15") -> dict[str, Any]:
    """A single-file SD 1.x state dict (torch tensors) from diffusers ``unet``/``vae``/``text_encoder`` modules.

    ``ema_unet``: a second UNet whose weights are stored as the EMA copy (``model_ema.*`` plus LitEma's ``decay`` and
    ``num_updates``), as in the full ``v1-5-pruned.ckpt``. ``clip_layout``: ``sd15`` writes
    ``cond_stage_model.transformer.text_model.*``, ``sd14`` the older ``cond_stage_model.transformer.*`` layout;
    both include CLIP's ``position_ids`` as the original checkpoints do.
    """
    if clip_layout not in ("sd15", "sd14"):
        raise ValueError(f"clip_layout must be 'sd15' or 'sd14', got {clip_layout!r}")
    import torch

    unet, vae, text = modules["unet"], modules["vae"], modules["text_encoder"]
    n = unet.config.layers_per_block
    up_attn = [t.startswith("CrossAttn") for t in unet.config.up_block_types]
    out: dict[str, Any] = {}
    for k, v in unet.state_dict().items():
        out[UNET_PREFIX + unet_key(k, n, up_attn)] = v.contiguous()
    if ema_unet is not None:
        for k, v in ema_unet.state_dict().items():
            out[ema_key(UNET_PREFIX + unet_key(k, n, up_attn))] = v.contiguous()
        out[EMA_PREFIX + "decay"] = torch.tensor(0.9999)
        out[EMA_PREFIX + "num_updates"] = torch.tensor(1000, dtype=torch.int32)
    nb = len(vae.config.block_out_channels)
    for k, v in vae.state_dict().items():
        key = vae_key(k, nb)
        if ".attn_1." in key and key.endswith(".weight") and v.ndim == 2:
            v = v[:, :, None, None]  # LDM stores the VAE attention projections as 1x1 convs
        out[VAE_PREFIX + key] = v.contiguous()
    clip = {k.removeprefix(CLIP_TEXT_MODEL): v for k, v in text.state_dict().items()}  # transformers 4 nests, 5 not
    positions = torch.arange(text.config.max_position_embeddings, dtype=torch.int64)[None]
    clip.setdefault("embeddings.position_ids", positions)
    for k, v in clip.items():
        out[CLIP_PREFIX + (CLIP_TEXT_MODEL if clip_layout == "sd15" else "") + k] = v.contiguous()
    return out
