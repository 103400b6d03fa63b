"""Embedded Stable Diffusion 1.x configurations for random-weight export.

``sd15`` is the real SD 1.5 architecture (UNet 860M, VAE 84M, CLIP ViT-L/14 text encoder 123M);
``tiny`` keeps every block *type* of SD 1.x (cross-attention down/up blocks, a cross-attention mid
block, a VAE with the same 8x down-scaling, a CLIP text encoder with the real 49,408-token vocabulary
and quick-GELU) but with 32-64 channels, so a full export + verify takes seconds on one core.
Trade-off: ``tiny`` exercises every graph pattern the fusion rules must match, not SD's numerics.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# CLIP BPE constants shared by every SD 1.x text encoder.
CLIP_VOCAB_SIZE = 49408
CLIP_MAX_LENGTH = 77
CLIP_BOS_ID = 49406
CLIP_EOS_ID = 49407


@dataclass(frozen=True)
class SDConfig:
    """Architecture of one SD 1.x pipeline: the diffusers/transformers config dicts plus defaults."""

    name: str
    unet: dict[str, Any]
    vae: dict[str, Any]
    text_encoder: dict[str, Any]
    default_height: int
    default_width: int
    scheduler: dict[str, Any] = field(default_factory=dict)

    @property
    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.vae["block_out_channels"]) - 1)


# The SD 1.x PNDM scheduler config (scheduler/scheduler_config.json of runwayml/stable-diffusion-v1-5).
SD1_SCHEDULER = {
    "_class_name": "PNDMScheduler",
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "num_train_timesteps": 1000,
    "set_alpha_to_one": False,
    "skip_prk_steps": True,
    "steps_offset": 1,
    "clip_sample": False,
    "prediction_type": "epsilon",
    "trained_betas": None,
}

SD15 = SDConfig(
    name="sd15",
    unet=dict(
        sample_size=64, in_channels=4, out_channels=4, center_input_sample=False,
        flip_sin_to_cos=True, freq_shift=0,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, downsample_padding=1,
        mid_block_scale_factor=1, act_fn="silu", norm_num_groups=32, norm_eps=1e-5,
        cross_attention_dim=768, attention_head_dim=8,
    ),
    vae=dict(
        in_channels=3, out_channels=3, latent_channels=4, sample_size=512, layers_per_block=2,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512), act_fn="silu", norm_num_groups=32,
        scaling_factor=0.18215,
    ),
    text_encoder=dict(
        vocab_size=CLIP_VOCAB_SIZE, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
        num_attention_heads=12, max_position_embeddings=CLIP_MAX_LENGTH, hidden_act="quick_gelu",
        layer_norm_eps=1e-5, projection_dim=768, bos_token_id=CLIP_BOS_ID, eos_token_id=CLIP_EOS_ID,
        pad_token_id=CLIP_EOS_ID,
    ),
    default_height=512,
    default_width=512,
    scheduler=SD1_SCHEDULER,
)

TINY = SDConfig(
    name="tiny",
    unet=dict(
        sample_size=8, in_channels=4, out_channels=4, center_input_sample=False,
        flip_sin_to_cos=True, freq_shift=0,
        down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
        block_out_channels=(32, 64, 64), layers_per_block=1, downsample_padding=1,
        mid_block_scale_factor=1, act_fn="silu", norm_num_groups=32, norm_eps=1e-5,
        cross_attention_dim=32, attention_head_dim=8,
    ),
    vae=dict(
        in_channels=3, out_channels=3, latent_channels=4, sample_size=64, layers_per_block=1,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(32, 32, 64, 64), act_fn="silu", norm_num_groups=32,
        scaling_factor=0.18215,
    ),
    text_encoder=dict(
        vocab_size=CLIP_VOCAB_SIZE, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=CLIP_MAX_LENGTH, hidden_act="quick_gelu",
        layer_norm_eps=1e-5, projection_dim=32, bos_token_id=CLIP_BOS_ID, eos_token_id=CLIP_EOS_ID,
        pad_token_id=CLIP_EOS_ID,
    ),
    default_height=64,
    default_width=64,
    scheduler=SD1_SCHEDULER,
)

CONFIGS: dict[str, SDConfig] = {c.name: c for c in (SD15, TINY)}


def get_config(name: str) -> SDConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        from sdconvert.errors import UserError

        raise UserError(f"unknown --random-weights config {name!r}; choose one of {sorted(CONFIGS)}") from None


def build_random_modules(config: SDConfig, seed: int = 0) -> dict[str, Any]:
    """Instantiate the diffusers/transformers modules of ``config`` with seeded random weights (eval mode, fp32)."""
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(seed)
    unet = UNet2DConditionModel(**config.unet).eval()
    vae = AutoencoderKL(**config.vae).eval()
    text_encoder = CLIPTextModel(CLIPTextConfig(**config.text_encoder)).eval()
    return {"unet": unet, "vae": vae, "text_encoder": text_encoder}
