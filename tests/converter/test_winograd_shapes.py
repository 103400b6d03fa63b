"""Analytic SD conv shapes vs the real diffusers modules (tiny on CPU, SD1.5 on the meta device: no weights)."""
from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from sdconvert.configs import SD15, TINY, SDConfig
from sdconvert.winograd.sd_shapes import unet_convs, vae_decoder_convs, vae_encoder_convs


def _hooked_convs(module: torch.nn.Module, run: Callable[[], object]) -> list[tuple]:
    seen: list[tuple] = []
    handles = []
    for name, mod in module.named_modules():
        if isinstance(mod, torch.nn.Conv2d):
            def hook(m: torch.nn.Conv2d, inp: tuple, out: torch.Tensor, name: str = name) -> None:
                x = inp[0]
                seen.append((name, x.shape[0], x.shape[2], x.shape[3], m.in_channels, m.out_channels,
                             m.kernel_size[0], m.stride[0]))
            handles.append(mod.register_forward_hook(hook))
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return seen


def _analytic(specs: list) -> list[tuple]:
    return [(s.name, s.batch, s.in_h, s.in_w, s.in_c, s.out_c, s.kernel_h, s.stride_h) for s in specs]


@pytest.mark.parametrize("cfg, device", [(TINY, "cpu"), (SD15, "meta")], ids=["tiny", "sd15-meta"])
def test_analytic_convs_match_diffusers_forward(cfg: SDConfig, device: str) -> None:
    from diffusers import AutoencoderKL, UNet2DConditionModel

    with torch.device(device):
        unet = UNet2DConditionModel(**cfg.unet).eval()
        vae = AutoencoderKL(**cfg.vae).eval()
    h = cfg.default_height // cfg.vae_scale_factor
    dim = cfg.unet["cross_attention_dim"]
    z = lambda *s: torch.zeros(*s, device=device)  # noqa: E731
    got = _hooked_convs(unet, lambda: unet(z(2, 4, h, h), torch.tensor([1.0], device=device), z(2, 77, dim)))
    assert _analytic(unet_convs(cfg, batch=2)) == got
    got = _hooked_convs(vae, lambda: vae.decode(z(1, 4, h, h)))
    assert _analytic(vae_decoder_convs(cfg)) == got
    got = _hooked_convs(vae, lambda: vae.encode(z(1, 3, h * 8, h * 8)))
    assert _analytic(vae_encoder_convs(cfg)) == got


def test_sd15_unet_levels() -> None:
    specs = [s for s in unet_convs(SD15) if s.kernel_h == 3 and s.stride_h == 1]
    maps = sorted({s.in_h for s in specs}, reverse=True)
    assert maps == [64, 32, 16, 8]
    assert {s.out_c for s in specs} == {4, 320, 640, 1280}
    assert len(unet_convs(SD15, 768, 768)) == 98 and unet_convs(SD15, 768, 512)[0].in_h == 96
