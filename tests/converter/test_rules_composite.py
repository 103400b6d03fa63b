"""Models exported *with* litert-torch's ``odml.*`` composites: every site still fuses, for both targets.

``odml.scaled_dot_product_attention`` comes from a diffusers attention processor that wraps SDPA in a
``StableHLOCompositeBuilder`` (inputs/outputs in the odml [B, T, heads, head_dim] layout); ``odml.group_norm`` from
``ENABLE_GROUP_NORM_COMPOSITE=y``. In the .tflite each becomes a ``STABLEHLO_COMPOSITE`` op whose decomposition is a
separate subgraph.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from sdconvert.configs import TINY
from sdconvert.graph import read_model
from sdconvert.rewrite import expected_sites, fuse_model
from sdconvert.rewrite.semantic import check_fused

MODELS = ("unet", "vae_decoder")


class CompositeSdpaProcessor:
    """diffusers attention processor whose core SDPA is marked as an ``odml.scaled_dot_product_attention`` composite."""

    def __call__(
        self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None, *args, **kwargs
    ):
        import torch.nn.functional as F
        from litert_torch.hlfb import StableHLOCompositeBuilder

        residual = hidden_states
        four_d = hidden_states.ndim == 4
        if four_d:
            b, c, h, w = hidden_states.shape
            hidden_states = hidden_states.view(b, c, h * w).transpose(1, 2)
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        ctx = hidden_states if encoder_hidden_states is None else encoder_hidden_states
        q, k, v = attn.to_q(hidden_states), attn.to_k(ctx), attn.to_v(ctx)
        n, d = q.shape[0], k.shape[-1] // attn.heads
        q, k, v = (t.view(n, -1, attn.heads, d) for t in (q, k, v))
        builder = StableHLOCompositeBuilder("odml.scaled_dot_product_attention", attr={"scale": attn.scale})
        q, k, v = builder.mark_inputs(q, k, v)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=attn.scale)
        o = builder.mark_outputs(o.transpose(1, 2))
        o = attn.to_out[1](attn.to_out[0](o.reshape(n, -1, attn.heads * d)))
        if four_d:
            o = o.transpose(-1, -2).reshape(b, c, h, w)
        if attn.residual_connection:
            o = o + residual
        return o / attn.rescale_output_factor


@pytest.fixture(scope="module")
def composite_export(tmp_path_factory) -> Path:
    import litert_torch
    import torch
    from diffusers.models.attention_processor import Attention

    from sdconvert.configs import build_random_modules
    from sdconvert.export.litert import convert_to_tflite
    from sdconvert.export.wrappers import Shapes, build_wrapper, sample_inputs

    out = tmp_path_factory.mktemp("composite")
    mods = build_random_modules(TINY, seed=0)
    for m in mods["unet"].modules():
        if isinstance(m, Attention):
            m.set_processor(CompositeSdpaProcessor())
    for m in mods["vae"].modules():
        if isinstance(m, Attention):
            m.set_processor(CompositeSdpaProcessor())
    shapes = Shapes(
        TINY.default_height,
        TINY.default_width,
        1,
        TINY.unet["in_channels"],
        TINY.vae_scale_factor,
        TINY.text_encoder["hidden_size"],
    )
    old = litert_torch.config.enable_group_norm_composite
    litert_torch.config.enable_group_norm_composite = True
    try:
        for name in MODELS:
            wrapper = build_wrapper(name, mods)
            convert_to_tflite(
                wrapper, sample_inputs(name, shapes, torch.Generator().manual_seed(0)), out / f"{name}.tflite"
            )
    finally:
        litert_torch.config.enable_group_norm_composite = old
    return out


# FCs the merge_sibling_fc pass removes from the tiny composite exports (tests/converter/test_merge_fc.py counts
# the UNet's). The VAE's q/k/v all merge here; in the plain export one of them has another keepNumDims (1 removed).
MERGED_FCS = {"unet": 36, "vae_decoder": 2}
# TRANSPOSE pairs cancelled by cancel_transpose_pairs (7 in the plain tiny UNet export, test_passes.py).
CANCELLED_TRANSPOSE_PAIRS = {"unet": 0, "vae_decoder": 0}  # the group_norm composites read NHWC: no pairs


@pytest.mark.parametrize("model", MODELS)
def test_composites_are_present_and_fused(composite_export, tmp_path, model):
    src = composite_export / f"{model}.tflite"
    sites = expected_sites(TINY)[model]
    raw = read_model(src)
    composites = raw.main.ops
    n_composite = sum(op.type == "STABLEHLO_COMPOSITE" for op in composites)
    assert n_composite >= sites["attention"] + 1 and len(raw.subgraphs) == n_composite + 1
    rep = fuse_model(src, tmp_path / "f.tflite")
    assert rep.counts == sites
    merged = rep.passes.pop("merge_sibling_fc")  # sibling FCs (q/k/v, cross k/v, time projections), as unfused
    assert merged == MERGED_FCS[model]
    assert rep.passes.pop("transpose_pairs_cancelled") == CANCELLED_TRANSPOSE_PAIRS[model]
    assert rep.passes == {"inline:odml.scaled_dot_product_attention": sites["attention"]}
    assert rep.by_alternative["group_norm/odml_composite"] == n_composite - sites["attention"]
    fused = read_model(tmp_path / "f.tflite")
    assert len(fused.subgraphs) == 1 and "STABLEHLO_COMPOSITE" not in fused.op_histogram()
    results = check_fused(src, rep.fused, seed=4)
    assert len(results) == sum(sites.values())
    assert max(r.max_rel_err for r in results) <= 1e-5


def _run(path: Path) -> np.ndarray:
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    rng = np.random.default_rng(7)
    feeds = {n: rng.standard_normal(d["shape"]).astype(np.float32) for n, d in runner.get_input_details().items()}
    (out,) = runner(**feeds).values()
    return out


@pytest.mark.parametrize("model", MODELS)
def test_litert_target_inlines_composites_and_keeps_outputs(composite_export, tmp_path, model):
    src = composite_export / f"{model}.tflite"
    fuse_model(src, tmp_path / "l.tflite", target="litert")
    hist = read_model(tmp_path / "l.tflite").op_histogram()
    assert "STABLEHLO_COMPOSITE" not in hist and "BROADCAST_TO" not in hist
    assert not any(name.startswith("Sd") for name in hist)
    a, b = _run(src), _run(tmp_path / "l.tflite")
    assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()
