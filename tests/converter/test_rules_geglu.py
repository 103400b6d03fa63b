"""The ``gelu/geglu`` alternative: MUL(p[..., :F], GELU(p[..., F:])) -> one SdGelu(gated=True) on p.

On the tiny UNet (every transformer feed-forward is diffusers' GEGLU), on GEGLU forms written in torch and exported
by litert-torch (what the rule really sees: two SLICEs), and on hand-built graphs for the slicing ops litert-torch
does not emit here (SPLIT, SPLIT_V, STRIDED_SLICE) and for models that already hold a plain SdGelu.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from sdconvert.configs import TINY
from sdconvert.graph import Op, OpCode, Subgraph, Tensor, read_model, write_model
from sdconvert.ops import gelu as G
from sdconvert.ops import get
from sdconvert.rewrite import expected_sites, fuse_model
from sdconvert.rewrite.engine import run_rules
from sdconvert.rewrite.fuse import executed_histogram
from sdconvert.rewrite.rules import gelu as gelu_rule
from sdconvert.rewrite.rules import rules_for
from sdconvert.rewrite.semantic import check_fused

from ir_graphs import single_subgraph_model as _model

# --- tiny UNet ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_unet(tiny_export: Path, tmp_path_factory):
    src = tiny_export / "unet.tflite"
    # merge_fcs=False: the op counts below are the gelu rule's alone (test_merge_fc.py counts the FC merge)
    return src, fuse_model(src, tmp_path_factory.mktemp("geglu") / "unet.tflite", merge_fcs=False)


def test_every_tiny_unet_feed_forward_becomes_one_gated_sd_gelu(tiny_unet):
    _, rep = tiny_unet
    n = expected_sites(TINY)["unet"]["gelu"]  # one GEGLU per transformer block
    assert n == 7 and rep.counts["gelu"] == n  # one rewrite per site: gated sites are not counted twice
    assert {k: v for k, v in rep.by_alternative.items() if k.startswith("gelu/")} == {"gelu/geglu": n}
    assert "gelu" not in rep.rejections
    before, after = rep.histogram_before, rep.histogram_after
    # litert-torch's GEGLU: FULLY_CONNECTED -> SLICE [..., :F], SLICE [..., F:] -> GELU -> MUL; all gone
    assert (before["SLICE"], before["GELU"]) == (2 * n, n)
    assert (after.get("SLICE", 0), after.get("GELU", 0), after["SdGelu"]) == (0, 0, n)
    records = [f for f in rep.fused if f.rule == "gelu"]
    assert all(f.attrs == {"approximate": "none", "gated": True} for f in records)
    assert all(f.replaced_ops == 4 for f in records)  # SLICE, SLICE, GELU, MUL
    assert all(f.inputs[0].shape[:-1] == f.output.shape[:-1] and f.inputs[0].shape[-1] == 2 * f.output.shape[-1]
               for f in records)
    assert read_model(rep.dst).op_histogram()["SdGelu"] == n


def test_geglu_saves_three_ops_per_site_over_plain_gelu_fusion(tiny_unet):
    """Exact op-count delta of the alternative: the same rules with and without it on the same model."""
    src, rep = tiny_unet
    plain_gelu = dataclasses.replace(gelu_rule.RULE,
                                     alternatives=tuple(a for a in gelu_rule.RULE.alternatives if a.name != "geglu"))
    model = read_model(src)
    res = run_rules(model, [plain_gelu if r.name == "gelu" else r for r in rules_for("sdgpu")])
    model.cleanup()
    plain = executed_histogram(model)
    assert res.by_alternative["gelu/builtin"] == 7 and res.counts == rep.counts
    assert (plain["SLICE"], plain["MUL"] - rep.histogram_after["MUL"]) == (14, 7)
    # SLICE + SLICE + SdGelu + MUL -> SdGelu; the full pipeline also cancels TRANSPOSE pairs (test_passes.py)
    assert sum(plain.values()) - (rep.ops_after + 2 * rep.passes["transpose_pairs_cancelled"]) == 3 * 7


def test_gated_rewrites_match_the_reference_on_captured_tensors(tiny_unet):
    src, rep = tiny_unet
    results = check_fused(src, [f for f in rep.fused if f.rule == "gelu"], seed=4)
    assert len(results) == 7 and max(r.max_rel_err for r in results) <= 1e-5


def test_fusing_the_fused_unet_again_changes_nothing(tiny_unet, tmp_path):
    src, _ = tiny_unet
    first = fuse_model(src, tmp_path / "first.tflite")  # every rule and pass, the FC merge included
    assert first.passes["merge_sibling_fc"] > 0
    again = fuse_model(first.dst, tmp_path / "again.tflite")
    assert again.counts["gelu"] == 0 and again.ops_after == again.ops_before and again.rejections == {}
    assert again.passes["merge_sibling_fc"] == 0


def test_clip_quick_gelu_is_not_gated(tiny_export, tmp_path):
    rep = fuse_model(tiny_export / "text_encoder.tflite", tmp_path / "te.tflite")
    assert rep.by_alternative["gelu/quick"] == 2 and "gelu/geglu" not in rep.by_alternative
    assert {f.attrs["gated"] for f in rep.fused if f.rule == "gelu"} == {False}


# --- GEGLU forms exported by litert-torch ------------------------------------------------------------------------

DIM, F = 12, 8  # projection 12 -> 2F = 16


@pytest.fixture(scope="module")
def geglu_variants(tmp_path_factory) -> Path:
    """Outputs 0-4 are GEGLUs (4 gated SdGelus); 5 has the halves the other way round and 6 uses the value half
    elsewhere too (both stay plain SdGelu)."""
    import litert_torch
    import torch
    import torch.nn.functional as Fn
    from diffusers.models.activations import GEGLU

    class Variants(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.geglu = GEGLU(DIM, F)  # diffusers: proj, chunk(2, -1), hidden * F.gelu(gate)
            self.proj = torch.nn.ModuleList(torch.nn.Linear(DIM, 2 * F) for _ in range(6))

        def forward(self, x):
            p = [m(x) for m in self.proj]
            h1, g1 = p[1].chunk(2, dim=-1)
            h2, g2 = torch.split(p[2], F, dim=-1)
            h3, g3 = p[3][..., :F], p[3][..., F:]
            h4, g4 = p[4].chunk(2, dim=-1)
            h5, g5 = p[5].chunk(2, dim=-1)
            return (
                self.geglu(x),
                Fn.gelu(g1) * h1,  # MUL operands swapped
                h2 * Fn.gelu(g2, approximate="tanh"),
                h3 * (g3 * torch.sigmoid(1.702 * g3)),  # quick GELU gate
                Fn.gelu(h4) * g4,  # GELU on the first half: not diffusers' GEGLU
                h5 * Fn.gelu(g5),
                h5,  # the value half is an output too
            )

    path = tmp_path_factory.mktemp("geglu-torch") / "geglu.tflite"
    with torch.no_grad():
        litert_torch.convert(Variants().eval(), (torch.randn(2, 5, DIM),)).export(str(path))
    return path


def test_geglu_variants(geglu_variants, tmp_path):
    rep = fuse_model(geglu_variants, tmp_path / "f.tflite", merge_fcs=False)
    gated = sorted((f.output.name.split("output_")[-1][:1], f.attrs["approximate"])
                   for f in rep.fused if f.attrs.get("gated"))
    assert gated == [("0", "none"), ("1", "none"), ("2", "tanh"), ("3", "quick")]
    assert rep.counts["gelu"] == 6
    assert {k: v for k, v in rep.by_alternative.items() if k.startswith("gelu/")} == {"gelu/geglu": 4,
                                                                                     "gelu/builtin": 2}
    # output 6 shares its value half: the GEGLU check rejects it with the reason (on the plain SdGelu it became)
    assert rep.rejections == {"gelu": {"geglu: a half of the projection or the GELU output is used elsewhere": 1}}
    assert rep.histogram_after["SdGelu"] == 6 and rep.histogram_after["SLICE"] == 4  # outputs 5 and 6 keep theirs
    assert max(r.max_rel_err for r in check_fused(geglu_variants, rep.fused, seed=5)) <= 1e-5


def test_fused_geglu_variants_run_through_the_delegate(geglu_variants, tmp_path):
    from sdconvert.export.verify import run_tflite
    from sdlite import native

    rep = fuse_model(geglu_variants, tmp_path / "f.tflite", merge_fcs=False)
    x = {"args_0": np.random.default_rng(0).standard_normal((2, 5, DIM)).astype(np.float32)}
    plain = run_tflite(geglu_variants, x)
    delegate = native.load("cpu")
    fused = run_tflite(rep.dst, x, delegates=[delegate])
    assert native.stats(delegate)["claimed_by_op"] == {"SdGelu": 6}
    assert plain.keys() == fused.keys() and len(plain) == 7
    for k in plain:
        np.testing.assert_allclose(fused[k], plain[k], rtol=1e-5, atol=1e-5 * float(np.abs(plain[k]).max()))


def test_reference_is_diffusers_geglu():
    import torch
    from diffusers.models.activations import GEGLU

    torch.manual_seed(1)
    m = GEGLU(DIM, F).eval()
    x = torch.randn(3, 4, DIM)
    with torch.no_grad():
        want, p = m(x).double().numpy(), m.proj(x).numpy()
    got = G.reference([p], G.GeluAttrs(approximate="none", gated=True))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# --- hand-built graphs: other slicing ops, an SdGelu already in the model -----------------------------------------


def _op(sg: Subgraph, name: str, inputs: list, shapes: list[tuple], options: tuple = (0, None)) -> list[Tensor]:
    ys = [sg.add_tensor(Tensor(f"{name.lower()}_{len(sg.ops)}_{i}", s)) for i, s in enumerate(shapes)]
    sg.ops.append(Op(OpCode.of(name), inputs, ys, options_type=options[0], options=options[1]))
    return ys


def _i32(sg: Subgraph, v) -> Tensor:
    return sg.new_constant("c", np.asarray(v, np.int32))


def _mul(sg: Subgraph, a: Tensor, b: Tensor) -> Tensor:
    return _op(sg, "MUL", [a, b], [a.shape], (S.BuiltinOptions.MulOptions, S.MulOptionsT()))[0]


def _gelu(sg: Subgraph, x: Tensor) -> Tensor:
    return _op(sg, "GELU", [x], [x.shape], (S.BuiltinOptions.GeluOptions, S.GeluOptionsT()))[0]


def _strided(sg: Subgraph, p: Tensor, begin, end, begin_mask: int, end_mask: int, shape) -> Tensor:
    o = S.StridedSliceOptionsT()
    o.beginMask, o.endMask = begin_mask, end_mask
    ins = [p, _i32(sg, begin), _i32(sg, end), _i32(sg, [1] * len(begin))]
    return _op(sg, "STRIDED_SLICE", ins, [shape], (S.BuiltinOptions.StridedSliceOptions, o))[0]


def _halves(sg: Subgraph, p: Tensor, form: str) -> tuple[Tensor, Tensor]:
    lead, f = p.shape[:-1], p.shape[-1] // 2
    half = (*lead, f)
    if form == "split":
        o = S.SplitOptionsT()
        o.numSplits = 2
        h, g = _op(sg, "SPLIT", [_i32(sg, -1), p], [half, half], (S.BuiltinOptions.SplitOptions, o))
        return h, g
    if form == "split_v":
        o = S.SplitVOptionsT()
        o.numSplits = 2
        h, g = _op(sg, "SPLIT_V", [p, _i32(sg, [f, -1]), _i32(sg, [len(p.shape) - 1])], [half, half],
                   (S.BuiltinOptions.SplitVOptions, o))
        return h, g
    # strided: value = p[..., :F] by masks, gate = p[..., F:] with a negative begin and end masked
    rank = len(p.shape)
    full = (1 << (rank - 1)) - 1
    h = _strided(sg, p, [0] * rank, [0] * (rank - 1) + [f], full, full, half)
    g = _strided(sg, p, [0] * (rank - 1) + [-f], [0] * rank, full, (1 << rank) - 1, half)
    return h, g


@pytest.mark.parametrize("form", ["split", "split_v", "strided"])
def test_other_slicing_ops(tmp_path, form):
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (2, 3, 10)))
    h, g = _halves(sg, x, form)
    y = _mul(sg, h, _gelu(sg, g))
    src = write_model(_model(sg, [x], [y]), tmp_path / "src.tflite")
    rep = fuse_model(src, tmp_path / "f.tflite")
    assert rep.by_alternative["gelu/geglu"] == 1 and rep.rejections == {}
    assert read_model(tmp_path / "f.tflite").op_histogram() == {"SdGelu": 1}
    assert max(r.max_rel_err for r in check_fused(src, rep.fused)) <= 1e-5


def test_slices_that_are_not_the_two_halves_do_not_gate(tmp_path):
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (2, 12)))
    h = _op(sg, "SLICE", [x, _i32(sg, [0, 0]), _i32(sg, [2, 6])], [(2, 6)])[0]
    g = _op(sg, "SLICE", [x, _i32(sg, [0, 5]), _i32(sg, [2, 6])], [(2, 6)])[0]  # overlaps the value half
    y1 = _mul(sg, h, _gelu(sg, g))
    other = sg.add_tensor(Tensor("other", (2, 12)))
    y2 = _mul(sg, _halves(sg, other, "split")[0], _gelu(sg, _halves(sg, x, "split")[1]))  # halves of different p
    rep = fuse_model(write_model(_model(sg, [x, other], [y1, y2]), tmp_path / "src.tflite"), tmp_path / "f.tflite")
    assert rep.by_alternative == {"gelu/builtin": 2} and rep.rejections == {}


def test_a_plain_sd_gelu_in_the_model_is_gated_too(tmp_path):
    """Models fused before the alternative existed hold SLICE, SLICE, SdGelu, MUL; fusing them again gates them."""
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (3, 8)))
    h, g = _halves(sg, x, "split")
    spec = get("SdGelu")
    y_g = sg.add_tensor(Tensor("gelu", (3, 4)))
    sg.ops.append(Op(OpCode.of("SdGelu"), [g], [y_g], custom_options=spec.encode(G.GeluAttrs("tanh")),
                     custom_options_format=S.CustomOptionsFormat.FLEXBUFFERS))
    y = _mul(sg, y_g, h)
    src = write_model(_model(sg, [x], [y]), tmp_path / "src.tflite")
    rep = fuse_model(src, tmp_path / "f.tflite")
    assert rep.counts["gelu"] == 1 and rep.by_alternative == {"gelu/geglu": 1}
    (fused,) = [op for _, op in read_model(tmp_path / "f.tflite").iter_ops()]
    assert fused.type == "SdGelu" and spec.decode(fused.custom_options) == G.GeluAttrs("tanh", gated=True)
    assert fused.inputs[0].name == "x" and tuple(fused.outputs[0].shape) == (3, 4)
