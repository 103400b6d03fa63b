"""Small tensor-in / tensor-out wrappers around the diffusers/transformers modules, one per exported model.

Each wrapper's ``forward`` takes keyword tensors (their names become the .tflite signature inputs) and returns a dict
(its keys become the signature outputs). :func:`sample_inputs` gives the tracing inputs for one model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from sdconvert.configs import CLIP_MAX_LENGTH

MODEL_NAMES = ("text_encoder", "unet", "vae_decoder", "vae_encoder")


class TextEncoder(torch.nn.Module):
    """CLIP text encoder: int32 token ids [B,77] -> last_hidden_state [B,77,D]."""

    def __init__(self, text_encoder: torch.nn.Module) -> None:
        super().__init__()
        self.text_encoder = text_encoder

    def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"last_hidden_state": self.text_encoder(input_ids.long(), return_dict=True).last_hidden_state}


class UNet(torch.nn.Module):
    """UNet noise prediction: sample [B,4,h,w] (NCHW), timestep [1] float, text states [B,77,D] -> noise_pred."""

    def __init__(self, unet: torch.nn.Module) -> None:
        super().__init__()
        self.unet = unet

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"noise_pred": self.unet(sample, timestep, encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]}


class VaeDecoder(torch.nn.Module):
    """VAE decoder: latents already divided by the scaling factor [1,4,h,w] -> image [1,3,H,W] in ~[-1,1] (unclamped)."""

    def __init__(self, vae: torch.nn.Module) -> None:
        super().__init__()
        self.vae = vae

    def forward(self, latents: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"image": self.vae.decode(latents, return_dict=False)[0]}


class VaeEncoder(torch.nn.Module):
    """VAE encoder for img2img: image in [-1,1] [1,3,H,W] -> moments [1,2*latent,h,w] (mean, logvar).

    Sampling (mean + exp(0.5*logvar) * noise) and the scaling factor stay in the pipeline so the model is deterministic.
    """

    def __init__(self, vae: torch.nn.Module) -> None:
        super().__init__()
        self.vae = vae

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.vae.encoder(image)
        if self.vae.quant_conv is not None:
            h = self.vae.quant_conv(h)
        return {"moments": h}


@dataclass(frozen=True)
class Shapes:
    """Static shapes of one export."""

    height: int
    width: int
    cfg_batch: int
    latent_channels: int
    vae_scale_factor: int
    text_hidden: int

    @property
    def latent_hw(self) -> tuple[int, int]:
        return self.height // self.vae_scale_factor, self.width // self.vae_scale_factor


def build_wrapper(name: str, modules: dict[str, Any]) -> torch.nn.Module:
    if name == "text_encoder":
        return TextEncoder(modules["text_encoder"]).eval()
    if name == "unet":
        return UNet(modules["unet"]).eval()
    if name == "vae_decoder":
        return VaeDecoder(modules["vae"]).eval()
    if name == "vae_encoder":
        return VaeEncoder(modules["vae"]).eval()
    raise ValueError(f"unknown model {name!r}")


def sample_inputs(name: str, shapes: Shapes, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random inputs with realistic ranges (used for tracing and for --verify)."""
    h, w = shapes.latent_hw
    b = shapes.cfg_batch
    if name == "text_encoder":
        ids = torch.randint(0, 49406, (1, CLIP_MAX_LENGTH), generator=generator, dtype=torch.int32)
        ids[0, 0] = 49406
        ids[0, 12:] = 49407
        return {"input_ids": ids}
    if name == "unet":
        return {
            "sample": torch.randn(b, shapes.latent_channels, h, w, generator=generator),
            "timestep": torch.tensor([981.0]),
            "encoder_hidden_states": torch.randn(b, CLIP_MAX_LENGTH, shapes.text_hidden, generator=generator),
        }
    if name == "vae_decoder":
        return {"latents": torch.randn(1, shapes.latent_channels, h, w, generator=generator)}
    if name == "vae_encoder":
        return {"image": torch.rand(1, 3, shapes.height, shapes.width, generator=generator) * 2 - 1}
    raise ValueError(f"unknown model {name!r}")
