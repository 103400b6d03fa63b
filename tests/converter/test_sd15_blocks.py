"""SD1.5-sized blocks (issue #3 acceptance 1, #4 acceptance 3): one transformer block and two ResNet blocks with the
real SD1.5 widths and feature-map sizes, exported by litert-torch, then ``--fuse`` / ``--fuse --winograd 4`` (the
graph stages ``sdconvert`` runs) and compared with the plain model through our delegate.

Cheap enough for CI (~15 s, < 1 GB): the blocks hold a few MB of random weights; the 4096-token attention is the
largest real SD1.5 one. Tolerances (max |fused - plain| / max |plain|): fusion only re-associates fp32 sums -> 1e-5;
Winograd F(4x4,3x3) adds its transform rounding (the transforms multiply by up to ~10 before the GEMM and
divide after), measured ~8e-6 on the 640-channel conv here -> the fp32 bound 1e-4 of ``--verify``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sdconvert.export.litert import convert_to_tflite
from sdconvert.export.optimize import GraphOptions, optimize
from sdconvert.export.verify import run_tflite
from sdconvert.inspect import describe
from sdlite import native
from sdlite.tflite_info import read_model_info

FUSE_TOL = 1e-5
WINOGRAD_TOL = 1e-4


class TransformerBlock(torch.nn.Module):
    """``down_blocks.0.attentions.0`` of SD1.5: 320 channels, 8 heads x 40, 64x64 map (4096 tokens), 77x768 text."""

    def __init__(self) -> None:
        super().__init__()
        from diffusers.models.transformers.transformer_2d import Transformer2DModel

        self.block = Transformer2DModel(num_attention_heads=8, attention_head_dim=40, in_channels=320,
                                        cross_attention_dim=768, norm_num_groups=32).eval()

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"out": self.block(hidden_states, encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]}


class ResnetBlock(torch.nn.Module):
    """A ``ResnetBlock2D`` of the SD1.5 UNet (GroupNorm 32 + SiLU, two 3x3 convs, time embedding 1280)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        from diffusers.models.resnet import ResnetBlock2D

        self.block = ResnetBlock2D(in_channels=cin, out_channels=cout, temb_channels=1280, groups=32, eps=1e-5).eval()

    def forward(self, hidden_states: torch.Tensor, temb: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"out": self.block(hidden_states, temb)}


# name -> (module factory, inputs, expected fusion counts, 3x3 stride-1 convs (Winograd-suitable), all convs);
# the transformer block's norm1/2/3 LayerNorms become one-group SdGroupNorms on [4096, 1, 320]
BLOCKS = {
    "transformer_64x64": (TransformerBlock, {"hidden_states": (1, 320, 64, 64), "encoder_hidden_states": (1, 77, 768)},
                          {"attention": 2, "gelu": 1, "group_norm": 1, "layer_norm": 3}, 0, 2),
    "resnet_64x64_320": (lambda: ResnetBlock(320, 320), {"hidden_states": (1, 320, 64, 64), "temb": (1, 1280)},
                         {"attention": 0, "gelu": 0, "group_norm": 2, "layer_norm": 0}, 2, 2),
    "resnet_32x32_320_640": (lambda: ResnetBlock(320, 640), {"hidden_states": (1, 320, 32, 32), "temb": (1, 1280)},
                             {"attention": 0, "gelu": 0, "group_norm": 2, "layer_norm": 0}, 2, 3),
}


@pytest.fixture(scope="module")
def blocks(tmp_path_factory) -> dict[str, tuple[Path, dict[str, np.ndarray], np.ndarray]]:
    """Each block exported once: ``{name: (plain .tflite, inputs, torch output)}``."""
    root = tmp_path_factory.mktemp("sd15-blocks")
    out = {}
    for k, (name, (factory, shapes, _, _, _)) in enumerate(BLOCKS.items()):
        torch.manual_seed(k)
        module = factory()
        inputs = {n: torch.randn(s) for n, s in shapes.items()}
        path = root / f"{name}.tflite"
        convert_to_tflite(module, inputs, path)
        with torch.no_grad():
            ref = module(**inputs)["out"].numpy()
        out[name] = (path, {n: t.numpy() for n, t in inputs.items()}, ref)
    return out


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def _run_fused(path: Path, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
    delegate = native.load("cpu")
    out = run_tflite(path, inputs, delegates=[delegate])["out"]
    return out, native.stats(delegate)


@pytest.mark.parametrize("name", BLOCKS)
@pytest.mark.parametrize("winograd", ["off", "4"])
def test_block_fused_matches_plain_through_delegate(blocks, tmp_path, name: str, winograd: str) -> None:
    path, inputs, torch_ref = blocks[name]
    _, _, counts, suitable, convs = BLOCKS[name]
    plain = run_tflite(path, inputs)["out"]
    assert _rel(plain, torch_ref) <= 1e-5  # the export itself is exact in fp32

    dst = tmp_path / f"{name}-{winograd}.tflite"
    graph = optimize(path, GraphOptions(fuse=True, winograd=winograd), lambda _: None, dst=dst)
    assert graph["fusion"]["counts"] == counts
    assert graph["fusion"]["rejections"] == {}
    hist = read_model_info(dst).op_histogram
    expected_ops = {"SdAttention": counts["attention"], "SdGelu": counts["gelu"],
                    "SdGroupNorm": counts["group_norm"] + counts["layer_norm"],
                    "SdConv2DWinograd": suitable if winograd == "4" else 0}
    assert {op: hist.get(op, 0) for op in expected_ops} == expected_ops
    assert hist.get("CONV_2D", 0) == convs - expected_ops["SdConv2DWinograd"]
    before = read_model_info(path).op_histogram
    assert "SOFTMAX" not in hist  # every attention went into SdAttention
    # one RSQRT per GroupNorm and per LayerNorm, all fused
    assert hist.get("RSQRT", 0) == before.get("RSQRT", 0) - counts["group_norm"] - counts["layer_norm"] == 0
    if winograd == "4":
        assert graph["winograd"]["summary"]["decisions"]["F4"] == suitable == graph["winograd"]["summary"]["suitable"]
        assert dst.stat().st_size < 1.01 * path.stat().st_size  # filters are transformed at load time, not stored

    got, stats = _run_fused(dst, inputs)
    assert stats["declined_nodes"] == 0
    assert stats["claimed_by_op"] == {op: n for op, n in expected_ops.items() if n}
    rel = _rel(got, plain)
    print(f"\n  {name} --fuse --winograd {winograd}: rel {rel:.2e} vs plain")
    assert rel <= (FUSE_TOL if winograd == "off" else WINOGRAD_TOL)
    if winograd == "4":
        assert rel > 0  # the Winograd path really ran (it cannot be bit-identical to the direct conv)


@pytest.mark.parametrize("variant", ["partial_softmax", "flash"])
def test_sd15_attention_variants_match_plain(blocks, tmp_path, variant: str) -> None:
    """Both SdAttention kernels on the 4096-token self-attention and the 77-token cross-attention."""
    path, inputs, _ = blocks["transformer_64x64"]
    dst = tmp_path / f"attn-{variant}.tflite"
    graph = optimize(path, GraphOptions(fuse=True, attention_variant=variant), lambda _: None, dst=dst)
    assert graph["fusion"]["counts"]["attention"] == 2
    fused = [f for f in describe(dst)["fused"] if f["op"] == "SdAttention"]
    assert [f["attrs"]["variant"] for f in fused] == [variant, variant]
    assert sorted(f["inputs"][1][1] for f in fused) == [77, 4096]  # cross- and self-attention key lengths
    plain = run_tflite(path, inputs)["out"]
    got, stats = _run_fused(dst, inputs)
    assert stats["claimed_by_op"]["SdAttention"] == 2
    assert _rel(got, plain) <= FUSE_TOL
