"""Every convolution of the SD 1.x UNet / VAE, computed analytically from an :class:`SDConfig`.

Used for the paper table and the SD1.5 plan without building (or even allocating) SD1.5 weights. The
enumeration follows diffusers' module structure in execution order (conv_in, down blocks: resnet conv1/
conv2/shortcut, transformer proj_in/proj_out, downsampler; mid block; up blocks with skip concatenation and
upsampler; conv_out). Tests check it against forward hooks on the real diffusers modules (tiny config on
CPU, SD1.5 on the meta device). Trade-off: it must be updated if diffusers changes its block layout -- the
hook test is what catches that. PyTorch ``padding=1`` 3x3 convs are recorded as TFLite SAME convs.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sdconvert.configs import SDConfig
from sdconvert.winograd.convspec import ConvSpec

MODELS: tuple[str, ...] = ("unet", "vae_decoder", "vae_encoder")


def _conv(name: str, batch: int, res: tuple[int, int], cin: int, cout: int, k: int = 3, stride: int = 1,
          padding: str = "SAME") -> ConvSpec:
    return ConvSpec(name=name, batch=batch, in_h=res[0], in_w=res[1], in_c=cin, out_c=cout, kernel_h=k,
                    kernel_w=k, stride_h=stride, stride_w=stride, padding=padding)


def _resnet(prefix: str, batch: int, res: tuple[int, int], cin: int, cout: int) -> Iterator[ConvSpec]:
    yield _conv(f"{prefix}.conv1", batch, res, cin, cout)
    yield _conv(f"{prefix}.conv2", batch, res, cout, cout)
    if cin != cout:
        yield _conv(f"{prefix}.conv_shortcut", batch, res, cin, cout, k=1)


def _transformer(prefix: str, batch: int, res: tuple[int, int], ch: int, linear: bool) -> Iterator[ConvSpec]:
    if not linear:                                   # SD 1.x: 1x1 conv projections around the transformer
        yield _conv(f"{prefix}.proj_in", batch, res, ch, ch, k=1)
        yield _conv(f"{prefix}.proj_out", batch, res, ch, ch, k=1)


def _half(res: tuple[int, int]) -> tuple[int, int]:
    return (-(-res[0] // 2), -(-res[1] // 2))


def unet_convs(cfg: SDConfig, height: int | None = None, width: int | None = None, batch: int = 1) -> list[ConvSpec]:
    """Convs of ``UNet2DConditionModel(**cfg.unet)`` for an image of ``height x width`` pixels."""
    u: dict[str, Any] = cfg.unet
    f = cfg.vae_scale_factor
    res = ((height or cfg.default_height) // f, (width or cfg.default_width) // f)
    boc, layers = list(u["block_out_channels"]), u["layers_per_block"]
    linear = bool(u.get("use_linear_projection", False))
    out: list[ConvSpec] = [_conv("conv_in", batch, res, u["in_channels"], boc[0])]
    ch = boc[0]
    for i, kind in enumerate(u["down_block_types"]):
        cin, cout = ch, boc[i]
        for j in range(layers):
            out += _resnet(f"down_blocks.{i}.resnets.{j}", batch, res, cin if j == 0 else cout, cout)
            if kind.startswith("CrossAttn"):
                out += _transformer(f"down_blocks.{i}.attentions.{j}", batch, res, cout, linear)
        if i < len(boc) - 1:
            out.append(_conv(f"down_blocks.{i}.downsamplers.0.conv", batch, res, cout, cout, stride=2))
            res = _half(res)
        ch = cout
    out += _resnet("mid_block.resnets.0", batch, res, ch, ch)
    out += _transformer("mid_block.attentions.0", batch, res, ch, linear)
    out += _resnet("mid_block.resnets.1", batch, res, ch, ch)
    rev = boc[::-1]
    out_ch = rev[0]
    for i, kind in enumerate(u["up_block_types"]):
        prev_out, out_ch = out_ch, rev[i]
        skip_in = rev[min(i + 1, len(rev) - 1)]
        for j in range(layers + 1):
            skip = skip_in if j == layers else out_ch
            res_in = prev_out if j == 0 else out_ch
            out += _resnet(f"up_blocks.{i}.resnets.{j}", batch, res, res_in + skip, out_ch)
            if kind.startswith("CrossAttn"):
                out += _transformer(f"up_blocks.{i}.attentions.{j}", batch, res, out_ch, linear)
        if i < len(rev) - 1:
            res = (res[0] * 2, res[1] * 2)
            out.append(_conv(f"up_blocks.{i}.upsamplers.0.conv", batch, res, out_ch, out_ch))
    out.append(_conv("conv_out", batch, res, boc[0], u["out_channels"]))
    return out


def vae_decoder_convs(cfg: SDConfig, height: int | None = None, width: int | None = None) -> list[ConvSpec]:
    """Convs of ``AutoencoderKL.decode`` (post_quant_conv + Decoder) for a ``height x width`` image."""
    v: dict[str, Any] = cfg.vae
    boc, layers, lat = list(v["block_out_channels"]), v["layers_per_block"], v["latent_channels"]
    f = cfg.vae_scale_factor
    res = ((height or cfg.default_height) // f, (width or cfg.default_width) // f)
    out = [_conv("post_quant_conv", 1, res, lat, lat, k=1), _conv("decoder.conv_in", 1, res, lat, boc[-1])]
    out += _resnet("decoder.mid_block.resnets.0", 1, res, boc[-1], boc[-1])
    out += _resnet("decoder.mid_block.resnets.1", 1, res, boc[-1], boc[-1])
    rev = boc[::-1]
    ch = rev[0]
    for i in range(len(rev)):
        cin, ch = ch, rev[i]
        for j in range(layers + 1):
            out += _resnet(f"decoder.up_blocks.{i}.resnets.{j}", 1, res, cin if j == 0 else ch, ch)
        if i < len(rev) - 1:
            res = (res[0] * 2, res[1] * 2)
            out.append(_conv(f"decoder.up_blocks.{i}.upsamplers.0.conv", 1, res, ch, ch))
    out.append(_conv("decoder.conv_out", 1, res, boc[0], v["out_channels"]))
    return out


def vae_encoder_convs(cfg: SDConfig, height: int | None = None, width: int | None = None) -> list[ConvSpec]:
    """Convs of ``AutoencoderKL.encode`` (Encoder + quant_conv); downsamplers are VALID stride-2 convs on a
    (0,1,0,1)-padded input, recorded here with that padded input size."""
    v: dict[str, Any] = cfg.vae
    boc, layers, lat = list(v["block_out_channels"]), v["layers_per_block"], v["latent_channels"]
    res = (height or cfg.default_height, width or cfg.default_width)
    out = [_conv("encoder.conv_in", 1, res, v["in_channels"], boc[0])]
    ch = boc[0]
    for i in range(len(boc)):
        cin, ch = ch, boc[i]
        for j in range(layers):
            out += _resnet(f"encoder.down_blocks.{i}.resnets.{j}", 1, res, cin if j == 0 else ch, ch)
        if i < len(boc) - 1:
            padded = (res[0] + 1, res[1] + 1)
            out.append(_conv(f"encoder.down_blocks.{i}.downsamplers.0.conv", 1, padded, ch, ch, stride=2,
                             padding="VALID"))
            res = _half(res)
    out += _resnet("encoder.mid_block.resnets.0", 1, res, ch, ch)
    out += _resnet("encoder.mid_block.resnets.1", 1, res, ch, ch)
    out.append(_conv("encoder.conv_out", 1, res, ch, 2 * lat))
    out.append(_conv("quant_conv", 1, res, 2 * lat, 2 * lat, k=1))
    return out


def model_convs(cfg: SDConfig, model: str, height: int | None = None, width: int | None = None,
                batch: int = 1) -> list[ConvSpec]:
    """Dispatch on ``model`` in :data:`MODELS` (``batch`` applies to the UNet: 2 with classifier-free guidance)."""
    if model == "unet":
        return unet_convs(cfg, height, width, batch)
    if model == "vae_decoder":
        return vae_decoder_convs(cfg, height, width)
    if model == "vae_encoder":
        return vae_encoder_convs(cfg, height, width)
    raise ValueError(f"unknown model {model!r}; expected one of {MODELS}")
