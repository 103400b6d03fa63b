"""Rule variants on small graphs: what litert-torch emits for hand-written attention/GELU/GroupNorm forms, plus
hand-built graphs for forms it never emits (adj_y, a decomposed tanh GELU chain)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from sdconvert.graph import Op, OpCode, Subgraph, Tensor, read_model, write_model
from sdconvert.rewrite import fuse_model
from sdconvert.rewrite.semantic import check_fused

from ir_graphs import single_subgraph_model as _model

H, D, S_, SK = 2, 4, 16, 7


def _convert(module, args, path: Path) -> Path:
    import litert_torch
    import torch

    with torch.no_grad():
        litert_torch.convert(module.eval(), args).export(str(path))
    return path


@pytest.fixture(scope="module")
def attention_variants(tmp_path_factory) -> Path:
    import torch
    import torch.nn.functional as F

    def split(x):
        return x.view(1, x.shape[1], H, D).transpose(1, 2)

    def merge(x):
        return x.transpose(1, 2).reshape(1, x.shape[2], H * D)

    class Variants(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.register_buffer("mask", torch.randn(S_, S_, generator=g))

        def forward(self, *x):
            q = [split(t) for t in x[0:18:3]]
            k = [split(t) for t in x[1:18:3]]
            v = [split(t) for t in x[2:18:3]]
            return (
                merge(torch.softmax((q[0] @ k[0].transpose(-1, -2)) * 0.3, dim=-1) @ v[0]),  # scale after Q·Kᵀ
                merge(torch.softmax((q[1] * 0.7) @ k[1].transpose(-1, -2), dim=-1) @ v[1]),  # scale on Q
                merge(F.scaled_dot_product_attention(q[2], k[2], v[2])),  # sqrt(scale) on Q and on K
                merge(F.scaled_dot_product_attention(q[3], k[3], v[3], is_causal=True)),  # causal mask
                merge(torch.softmax(q[4] @ k[4].transpose(-1, -2) / 3.0 + self.mask, dim=-1) @ v[4]),  # arbitrary mask
                merge(torch.softmax(q[5] @ k[5].transpose(-1, -2) / 2.0, dim=-1) @ v[5]),  # cross-attention, DIV
            )

    seqs = [S_, S_, S_] * 5 + [S_, SK, SK]
    args = tuple(torch.randn(1, s, H * D) for s in seqs)
    return _convert(Variants(), args, tmp_path_factory.mktemp("attn") / "attn.tflite")


def test_attention_variants(attention_variants, tmp_path):
    rep = fuse_model(attention_variants, tmp_path / "f.tflite")
    assert rep.counts["attention"] == 5
    by_out = {f.output.name.split("output_")[-1][:1]: f.attrs for f in rep.fused}
    assert by_out["0"]["scale"] == pytest.approx(0.3) and by_out["1"]["scale"] == pytest.approx(0.7)
    assert by_out["2"]["scale"] == pytest.approx(0.5, rel=1e-6)  # 1/sqrt(4), split as sqrt on Q and K
    assert by_out["3"]["causal"] is True and by_out["3"]["scale"] == pytest.approx(0.5, rel=1e-6)
    assert by_out["5"]["scale"] == pytest.approx(0.5) and not by_out["5"]["causal"]
    assert all(a["heads"] == H and a["head_dim"] == D for a in by_out.values())
    assert rep.rejections == {
        "attention": {"qk_batch_matmul: additive mask is not causal (only causal or all-zero masks fuse)": 1}
    }
    assert rep.histogram_after["SOFTMAX"] == 1
    results = check_fused(attention_variants, rep.fused, seed=3)
    assert len(results) == 5 and max(r.max_rel_err for r in results) <= 1e-5


@pytest.fixture(scope="module")
def gelu_variants(tmp_path_factory) -> Path:
    import torch
    import torch.nn.functional as F

    class Gelus(torch.nn.Module):
        def forward(self, a, b, c, d):
            return F.gelu(a), F.gelu(b, approximate="tanh"), c * torch.sigmoid(1.702 * c), d * torch.sigmoid(d)

    return _convert(Gelus(), tuple(torch.randn(1, 10, 16) for _ in range(4)), tmp_path_factory.mktemp("g") / "g.tflite")


def test_gelu_variants(gelu_variants, tmp_path):
    rep = fuse_model(gelu_variants, tmp_path / "f.tflite")
    assert rep.counts["gelu"] == 3
    modes = sorted(f.attrs["approximate"] for f in rep.fused)
    assert modes == ["none", "quick", "tanh"]
    assert rep.by_alternative == {"gelu/builtin": 2, "gelu/quick": 1}
    assert rep.histogram_after == {"SdGelu": 3, "LOGISTIC": 1, "MUL": 1}  # the SiLU stays
    assert max(r.max_rel_err for r in check_fused(gelu_variants, rep.fused)) <= 1e-5


@pytest.fixture(scope="module")
def group_norm_variants(tmp_path_factory) -> Path:
    import torch
    import torch.nn.functional as F

    class Norms(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.gn = torch.nn.GroupNorm(8, 32)
            self.gn3 = torch.nn.GroupNorm(4, 32, eps=1e-3)
            self.ln = torch.nn.LayerNorm(32)
            for p in self.parameters():
                torch.nn.init.normal_(p)  # real, non-trivial gamma/beta (random init would fold them away)
            self.g = torch.nn.Parameter(torch.randn(32))
            self.b = torch.nn.Parameter(torch.randn(32))

        def forward(self, x, x3, xl, y):
            a = F.silu(self.gn(x))  # NCHW + SiLU
            b = self.gn3(x3)  # rank 3 [N, C, L]
            r = xl.reshape(1, 36, 8, 4)  # hand-written channels-last GroupNorm
            m = r.mean(dim=(1, 3), keepdim=True)
            v = ((r - m) ** 2).mean(dim=(1, 3), keepdim=True)
            c = ((r - m) * torch.rsqrt(v + 1e-5)).reshape(1, 6, 6, 32) * self.g + self.b
            d = self.ln(x3.transpose(1, 2))  # LayerNorm: not a GroupNorm (the layer_norm rule takes it)
            r2 = y.reshape(1, 8, -1)  # group mean subtraction only: looks like one, is not
            e = (r2 - r2.mean(dim=2, keepdim=True)).reshape(1, 32, 6, 6)
            return a, b, c, d, e

    args = (torch.randn(1, 32, 6, 6), torch.randn(1, 32, 10), torch.randn(1, 6, 6, 32), torch.randn(1, 32, 6, 6))
    return _convert(Norms(), args, tmp_path_factory.mktemp("gn") / "gn.tflite")


def test_group_norm_variants(group_norm_variants, tmp_path):
    rep = fuse_model(group_norm_variants, tmp_path / "f.tflite")
    assert rep.counts["group_norm"] == 3
    got = sorted(
        (f.attrs["groups"], f.attrs["activation"], f.attrs["channel_axis"], round(f.attrs["eps"], 9))
        for f in rep.fused
        if f.rule == "group_norm"
    )
    assert got == [(4, "none", 1, 0.001), (8, "none", -1, 1e-05), (8, "silu", 1, 1e-05)]
    # the group mean subtraction without a variance step is no LayerNorm either (a silent layer_norm non-match)
    assert rep.rejections == {"group_norm": {"decomposed: no single-exit region after the group statistics": 1}}
    gammas = [f.inputs[1].value for f in rep.fused]
    assert all(np.abs(g - 1).max() > 0.1 for g in gammas)  # fitted, non-trivial affine parameters
    # the LayerNorm is not a GroupNorm match; since the layer_norm rule it is a one-group SdGroupNorm on [10, 1, 32]
    assert rep.counts["layer_norm"] == 1 and "SQUARED_DIFFERENCE" not in rep.histogram_after
    ((ln_view, ln_groups),) = [(f.inputs[0].shape, f.attrs["groups"]) for f in rep.fused if f.rule == "layer_norm"]
    assert (ln_view, ln_groups) == ((10, 1, 32), 1)
    assert max(r.max_rel_err for r in check_fused(group_norm_variants, rep.fused, seed=2)) <= 1e-5


# --- hand-built graphs for forms litert-torch does not emit ----------------------------------------------------------


def _op(sg: Subgraph, name: str, inputs: list, shape: tuple, options: tuple = (0, None)) -> Tensor:
    y = sg.add_tensor(Tensor(f"{name.lower()}_{len(sg.ops)}", shape))
    sg.ops.append(Op(OpCode.of(name), inputs, [y], options_type=options[0], options=options[1]))
    return y


def _mul_opts() -> tuple:
    return S.BuiltinOptions.MulOptions, S.MulOptionsT()


def _add_opts() -> tuple:
    return S.BuiltinOptions.AddOptions, S.AddOptionsT()


def test_tanh_gelu_chain_and_adj_y_attention(tmp_path):
    sg = Subgraph("main")
    # tanh GELU written out: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    x = sg.add_tensor(Tensor("x", (1, 5, 8)))
    c = lambda v: sg.new_constant("c", np.asarray(v, np.float32))  # noqa: E731
    x3 = _op(sg, "POW", [x, c(3.0)], (1, 5, 8))
    inner = _op(sg, "ADD", [x, _op(sg, "MUL", [x3, c(0.044715)], (1, 5, 8), _mul_opts())], (1, 5, 8), _add_opts())
    th = _op(sg, "TANH", [_op(sg, "MUL", [c(math.sqrt(2 / math.pi)), inner], (1, 5, 8), _mul_opts())], (1, 5, 8))
    half_x = _op(sg, "MUL", [x, c(0.5)], (1, 5, 8), _mul_opts())
    gelu = _op(sg, "MUL", [half_x, _op(sg, "ADD", [th, c(1.0)], (1, 5, 8), _add_opts())], (1, 5, 8), _mul_opts())
    # pre-split attention [N*H, S, D] with K not transposed (BATCH_MATMUL adj_y) and softmax beta as the scale
    q, k, v = (sg.add_tensor(Tensor(n, (4, 6, 8))) for n in "qkv")
    bmm = S.BatchMatMulOptionsT()
    bmm.adjY = True
    scores = _op(sg, "BATCH_MATMUL", [q, k], (4, 6, 6), (S.BuiltinOptions.BatchMatMulOptions, bmm))
    sm = S.SoftmaxOptionsT()
    sm.beta = 0.25
    p = _op(sg, "SOFTMAX", [scores], (4, 6, 6), (S.BuiltinOptions.SoftmaxOptions, sm))
    o = _op(sg, "BATCH_MATMUL", [p, v], (4, 6, 8), (S.BuiltinOptions.BatchMatMulOptions, S.BatchMatMulOptionsT()))
    src = write_model(_model(sg, [x, q, k, v], [gelu, o]), tmp_path / "hand.tflite")
    rep = fuse_model(src, tmp_path / "f.tflite")
    assert rep.counts == {"attention": 1, "group_norm": 0, "layer_norm": 0, "gelu": 1}
    att = next(f for f in rep.fused if f.op_type == "SdAttention")
    assert (att.attrs["heads"], att.attrs["head_dim"], att.attrs["scale"]) == (1, 8, 0.25)
    assert next(f for f in rep.fused if f.op_type == "SdGelu").alternative == "tanh_chain"
    assert read_model(tmp_path / "f.tflite").op_histogram() == {"SdAttention": 1, "SdGelu": 1}
    assert max(r.max_rel_err for r in check_fused(src, rep.fused)) <= 1e-5


def test_chain_that_is_not_gelu_is_rejected_with_reason(tmp_path):
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (1, 8)))
    c = lambda v: sg.new_constant("c", np.asarray(v, np.float32))  # noqa: E731
    th = _op(sg, "TANH", [_op(sg, "MUL", [x, c(0.8)], (1, 8), _mul_opts())], (1, 8))
    y = _op(sg, "MUL", [x, _op(sg, "ADD", [th, c(1.0)], (1, 8), _add_opts())], (1, 8), _mul_opts())
    src = write_model(_model(sg, [x], [y]), tmp_path / "not_gelu.tflite")
    rep = fuse_model(src, tmp_path / "f.tflite")
    assert rep.counts["gelu"] == 0
    (reason,) = rep.rejections["gelu"]
    assert reason.startswith("tanh_chain: ") and "differs from GELU(tanh)" in reason
