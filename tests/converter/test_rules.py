"""Fusion of the tiny exported models: exact site counts, op-count bookkeeping, semantic parity of every rewrite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sdconvert.errors import UserError
from sdconvert.configs import SD15, TINY
from sdconvert.graph import read_model
from sdconvert.ops import REGISTRY
from sdconvert.rewrite import expected_sites, fuse_model
from sdconvert.rewrite.rules.attention import choose_attention_variant
from sdconvert.rewrite.semantic import check_fused

MODELS = ("unet", "vae_decoder", "vae_encoder", "text_encoder")
# fused op -> the rules that emit it (LayerNorms become one-group SdGroupNorms)
SD_OPS = {"SdAttention": ("attention",), "SdGelu": ("gelu",), "SdGroupNorm": ("group_norm", "layer_norm")}


@pytest.fixture(scope="module")
def tiny_sites() -> dict[str, dict[str, int]]:
    return expected_sites(TINY)


@pytest.fixture(scope="module")
def fused(tiny_export: Path, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fused")
    return {m: fuse_model(tiny_export / f"{m}.tflite", out / f"{m}.tflite") for m in MODELS}


def test_expected_sites_sd15_matches_the_architecture():
    # 16 transformer blocks x (self + cross) attention, one GEGLU each; 22 ResNets x 2 + 16 + conv_norm_out GroupNorms;
    # 16 blocks x norm1/2/3 LayerNorms. CLIP ViT-L: 12 layers x (layer_norm1, layer_norm2) + final_layer_norm
    sites = expected_sites(SD15)
    assert sites["unet"] == {"attention": 32, "gelu": 16, "group_norm": 61, "layer_norm": 48}
    assert sites["text_encoder"] == {"attention": 12, "gelu": 12, "group_norm": 0, "layer_norm": 25}


def test_expected_sites_tiny(tiny_sites):
    assert tiny_sites == {
        "unet": {"attention": 14, "gelu": 7, "group_norm": 30, "layer_norm": 21},  # 7 transformer blocks x 3
        "vae_decoder": {"attention": 1, "gelu": 0, "group_norm": 22, "layer_norm": 0},
        "vae_encoder": {"attention": 1, "gelu": 0, "group_norm": 14, "layer_norm": 0},
        "text_encoder": {"attention": 2, "gelu": 2, "group_norm": 0, "layer_norm": 5},  # 2 layers x 2 + final
    }


@pytest.mark.parametrize("model", MODELS)
def test_every_site_is_fused(fused, tiny_sites, model):
    rep = fused[model]
    assert rep.counts == tiny_sites[model]
    assert rep.rejections == {}
    for op, rules in SD_OPS.items():
        assert rep.histogram_after.get(op, 0) == sum(tiny_sites[model][r] for r in rules)


@pytest.mark.parametrize("model", MODELS)
def test_op_count_drops_accordingly(fused, tiny_sites, model):
    rep = fused[model]
    before, after = rep.histogram_before, rep.histogram_after
    n = tiny_sites[model]
    # every decomposed site disappears: no softmax, no builtin GELU, no GroupNorm statistics left
    assert after.get("SOFTMAX", 0) == before.get("SOFTMAX", 0) - n["attention"] == 0
    assert after.get("GELU", 0) == 0
    # each GroupNorm and each LayerNorm had exactly one RSQRT and two MEANs (LayerNorms: and one SQUARED_DIFFERENCE);
    # since the layer_norm rule none of them is left
    norms = n["group_norm"] + n["layer_norm"]
    assert after.get("RSQRT", 0) == before.get("RSQRT", 0) - norms == 0
    assert after.get("MEAN", 0) == before.get("MEAN", 0) - 2 * norms == 0
    assert after.get("SQUARED_DIFFERENCE", 0) == before.get("SQUARED_DIFFERENCE", 0) - n["layer_norm"] == 0
    assert after.get("BROADCAST_TO", 0) == 0
    assert rep.ops_after == sum(after.values()) < rep.ops_before == sum(before.values())
    assert rep.ops_before - rep.ops_after > 3 * sum(n.values())


@pytest.mark.parametrize("model", MODELS)
def test_every_rewrite_matches_the_reference_on_captured_tensors(fused, tiny_export, tiny_sites, model):
    rep = fused[model]
    results = check_fused(tiny_export / f"{model}.tflite", rep.fused, seed=1)
    assert len(results) == sum(tiny_sites[model].values())
    worst = max(results, key=lambda r: r.max_rel_err)
    assert worst.max_rel_err <= 1e-5, (worst.fused.op_type, worst.fused.attrs, worst.max_rel_err)


def test_fused_file_keeps_signature_and_decodes(fused, tiny_export):
    for model in MODELS:
        src, dst = read_model(tiny_export / f"{model}.tflite"), read_model(fused[model].dst)
        assert [
            (s.key, [(n, t.shape) for n, t in s.inputs], [(n, t.shape) for n, t in s.outputs]) for s in src.signatures
        ] == [
            (s.key, [(n, t.shape) for n, t in s.inputs], [(n, t.shape) for n, t in s.outputs]) for s in dst.signatures
        ]
        assert len(dst.subgraphs) == 1
        for _, op in dst.iter_ops():
            if op.type in REGISTRY:
                attrs = REGISTRY[op.type].decode(op.custom_options)
                assert len(op.inputs) == REGISTRY[op.type].num_inputs
                if op.type == "SdAttention":
                    q = op.inputs[0]
                    assert q.shape[-1] == attrs.heads * attrs.head_dim


def test_attention_attrs(fused):
    text = [f for f in fused["text_encoder"].fused if f.op_type == "SdAttention"]
    assert all(f.attrs["causal"] for f in text) and {f.attrs["heads"] for f in text} == {
        TINY.text_encoder["num_attention_heads"]
    }
    unet = [f for f in fused["unet"].fused if f.op_type == "SdAttention"]
    assert not any(f.attrs["causal"] for f in unet)
    # diffusers' attention_head_dim is the head count in SD 1.x configs; heads are recovered, not split per head
    assert {f.attrs["heads"] for f in unet} == {TINY.unet["attention_head_dim"]}
    vae = [f for f in fused["vae_decoder"].fused if f.op_type == "SdAttention"]
    assert [(f.attrs["heads"], f.attrs["head_dim"]) for f in vae] == [(1, TINY.vae["block_out_channels"][-1])]
    gn = [f for f in fused["vae_decoder"].fused if f.op_type == "SdGroupNorm"]
    # 10 ResNets (mid 2 + up 4 x 2) x 2 norms, each followed by SiLU, + conv_norm_out; the attention norm has none
    assert sum(f.attrs["activation"] == "silu" for f in gn) == 2 * 10 + 1
    assert {f.attrs["groups"] for f in gn} == {32}


def test_forced_flash_variant(tiny_export, tmp_path):
    rep = fuse_model(tiny_export / "unet.tflite", tmp_path / "u.tflite", attention_variant="flash")
    variants = {f.attrs["variant"] for f in rep.fused if f.op_type == "SdAttention"}
    assert variants == {"flash"}
    hist = read_model(tmp_path / "u.tflite").op_histogram()
    assert hist["SdAttention"] == 14


def test_variant_rule_on_sd15_shapes():
    assert choose_attention_variant(4096, 4096, 40) == "flash"  # 64x64 self-attention: 64 MiB of scores per head
    assert choose_attention_variant(1024, 1024, 80) == "flash"  # 32x32: 4 MiB
    assert choose_attention_variant(256, 256, 160) == "partial_softmax"  # 16x16: 256 KiB
    assert choose_attention_variant(4096, 77, 40) == "partial_softmax"  # cross-attention: 1.2 MiB
    assert choose_attention_variant(4096, 4096, 512) == "partial_softmax"  # VAE mid-block: one 512-wide head


def test_variant_rule_follows_the_device_profile():
    from sdconvert.winograd.cost import get_profile

    h200 = get_profile("h200")
    kw = {"scores_budget": h200.flash_scores_bytes, "flash_max_head_dim": h200.flash_max_head_dim}
    # measured there: flash beats the two-pass softmax at every SD1.5 shape, the VAE's one 512-wide head included;
    # wider heads than the kernels' limit stay two-pass
    for sq, sk, d in ((4096, 4096, 40), (4096, 77, 40), (1024, 77, 80), (256, 256, 160), (64, 77, 160), (4096, 4096, 512)):
        assert choose_attention_variant(sq, sk, d, **kw) == "flash"
    assert choose_attention_variant(4096, 4096, 513, **kw) == "partial_softmax"
    mobile = get_profile("adreno740")
    assert (mobile.flash_scores_bytes, mobile.flash_max_head_dim) == (2 * 1024 * 1024, 128)  # the rule's defaults


def test_fuse_model_passes_the_device_profile(tiny_export, tmp_path):
    def variants(**kw):
        rep = fuse_model(tiny_export / "unet.tflite", tmp_path / "u.tflite", **kw)
        return [f.attrs["variant"] for f in rep.fused if f.op_type == "SdAttention"]

    assert set(variants(device_profile="h200")) == {"flash"}
    # the tiny UNet's score matrices are far below 2 MiB: the default (mobile) thresholds keep the two-pass softmax
    assert set(variants()) == set(variants(device_profile="adreno740")) == {"partial_softmax"}
    with pytest.raises(UserError, match="unknown device profile 'nope'"):
        variants(device_profile="nope")


def test_fuse_is_idempotent(fused, tmp_path):
    again = fuse_model(fused["unet"].dst, tmp_path / "again.tflite")
    assert sum(again.counts.values()) == 0 and again.ops_after == again.ops_before


def test_report_is_json_serialisable(fused):
    import json

    d = fused["unet"].to_dict()
    json.loads(json.dumps(d))
    assert d["counts"] == {"attention": 14, "group_norm": 30, "layer_norm": 21, "gelu": 7}
    assert "attention" in fused["unet"].format_table() and "ops: " in fused["unet"].format_table()
    assert all(np.isfinite(f["attrs"].get("scale", 1.0)) for f in d["fused"])
