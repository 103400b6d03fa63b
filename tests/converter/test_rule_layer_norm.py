"""LayerNorm -> RESHAPE [R, 1, C] -> SdGroupNorm(groups=1) -> RESHAPE: hand-built graphs, what litert-torch emits
for ``nn.LayerNorm`` variants, and the tiny UNet / CLIP exports (exact site counts, exact op deltas, semantic parity
of every rewrite, and the rewritten model vs the original through the CPU delegate)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S

from sdconvert.configs import TINY
from sdconvert.export.verify import run_tflite
from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, Tensor, read_model, write_model
from sdconvert.rewrite import expected_sites, fuse_model, run_rules
from sdconvert.rewrite.fuse import executed_histogram
from sdconvert.rewrite.rules import layer_norm
from sdconvert.rewrite.semantic import check_fused
from sdlite import native

SHAPE = (2, 5, 8)
TOL = 1e-5


# --- hand-built graphs -------------------------------------------------------------------------------------------


def _op(sg: Subgraph, name: str, inputs: list, shape: tuple, options: tuple = (0, None)) -> Tensor:
    y = sg.add_tensor(Tensor(f"{name.lower()}_{len(sg.ops)}", shape))
    sg.ops.append(Op(OpCode.of(name), inputs, [y], options_type=options[0], options=options[1]))
    return y


def _mean(sg: Subgraph, x: Tensor, axis: int) -> Tensor:
    o = S.ReducerOptionsT()
    o.keepDims = True
    shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape))
    axes = sg.new_constant("axes", np.asarray([axis], np.int32))
    return _op(sg, "MEAN", [x, axes], shape, (S.BuiltinOptions.ReducerOptions, o))


def _bin(sg: Subgraph, name: str, a: Tensor, b: Tensor) -> Tensor:
    opts = {"ADD": S.AddOptionsT, "SUB": S.SubOptionsT, "MUL": S.MulOptionsT, "DIV": S.DivOptionsT}[name]()
    kind = getattr(S.BuiltinOptions, f"{name.capitalize()}Options")
    shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    return _op(sg, name, [a, b], shape, (kind, opts))


def _hand_norm(
    *, axis: int = 2, eps: float = 1e-3, var_scale: float = 1.0, leak_mean: bool = False
) -> tuple[Model, np.ndarray, np.ndarray]:
    """``(x - mean) / sqrt(var * var_scale + eps) * gamma + beta`` written out with keepdims MEANs (not litert-torch's
    arrangement); ``leak_mean`` also returns the mean as a second output."""
    rng = np.random.default_rng(3)
    gamma, beta = rng.standard_normal(SHAPE[-1]) + 1.0, rng.standard_normal(SHAPE[-1])
    sg = Subgraph("main")
    c = lambda v: sg.new_constant("c", np.asarray(v, np.float32))  # noqa: E731
    x = sg.add_tensor(Tensor("x", SHAPE))
    m = _mean(sg, x, axis)
    d = _bin(sg, "SUB", x, m)
    var = _mean(sg, _bin(sg, "MUL", d, d), axis)
    if var_scale != 1.0:
        var = _bin(sg, "MUL", var, c(var_scale))
    sd = _op(sg, "SQRT", [_bin(sg, "ADD", var, c(eps))], var.shape)
    y = _bin(sg, "ADD", _bin(sg, "MUL", _bin(sg, "DIV", d, sd), c(gamma)), c(beta))
    outs = [y, m] if leak_mean else [y]
    sg.inputs, sg.outputs = [x], outs
    model = Model([sg], [SignatureDef("serving_default", sg, [("x", x)], [(t.name, t) for t in outs])])
    return model, gamma, beta


def test_hand_built_layer_norm_fuses_with_fitted_affine_and_graph_eps(tmp_path):
    model, gamma, beta = _hand_norm()
    src = write_model(model, tmp_path / "ln.tflite")
    rep = fuse_model(src, tmp_path / "f.tflite")
    assert rep.counts == {"attention": 0, "group_norm": 0, "layer_norm": 1, "gelu": 0} and rep.rejections == {}
    (f,) = rep.fused
    assert (f.rule, f.alternative, f.op_type) == ("layer_norm", "decomposed", "SdGroupNorm")
    assert f.attrs == {"groups": 1, "eps": float(np.float32(1e-3)), "activation": "none", "channel_axis": -1}
    assert f.inputs[0].shape == (10, 1, 8) and f.output.shape == (10, 1, 8)
    np.testing.assert_allclose(f.inputs[1].value, gamma, rtol=1e-6)
    np.testing.assert_allclose(f.inputs[2].value, beta, rtol=1e-6, atol=1e-6)
    assert f.replaced_ops == 9  # MEAN SUB MUL MEAN ADD SQRT DIV MUL(gamma) ADD(beta); x is a graph input
    assert read_model(tmp_path / "f.tflite").op_histogram() == {"RESHAPE": 2, "SdGroupNorm": 1}
    (res,) = check_fused(src, rep.fused, seed=1)
    assert res.max_rel_err <= TOL


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"axis": 1}, "decomposed: statistics over axis 1 of [2, 5, 8], not the last axis"),
        ({"leak_mean": True}, "decomposed: an intermediate of the statistics is used outside the normalisation"),
        # var * 2: gamma 1/sqrt(2) fits, but the region's effective eps is 5e-4, not the graph's 1e-3
        ({"var_scale": 2.0}, "decomposed: region is not a LayerNorm over the last axis (eps=0.001, fit residual"),
    ],
)
def test_hand_built_near_misses_are_rejected_with_reason(tmp_path, kwargs, reason):
    model, _, _ = _hand_norm(**kwargs)
    src = write_model(model, tmp_path / "ln.tflite")
    rep = fuse_model(src, tmp_path / "f.tflite")
    assert rep.counts["layer_norm"] == 0 and rep.fused == []
    (got,) = rep.rejections["layer_norm"]
    assert got.startswith(reason), got
    assert rep.histogram_after == rep.histogram_before


# --- what litert-torch emits ---------------------------------------------------------------------------------------


@dataclass
class Exported:
    path: Path
    inputs: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]  # the torch module in float64 on the same (fp32) inputs


def _export(module, args: tuple, path: Path) -> Exported:  # noqa: ANN001
    import litert_torch
    import torch

    module = module.eval()
    with torch.no_grad():
        litert_torch.convert(module, args).export(str(path))
        ref = module.double()(*(a.double() for a in args))
    inputs = {f"args_{i}": a.numpy() for i, a in enumerate(args)}
    return Exported(path, inputs, {f"output_{i}": r.numpy() for i, r in enumerate(ref)})


@pytest.fixture(scope="module")
def torch_variants(tmp_path_factory) -> Exported:
    import torch
    import torch.nn.functional as F

    class Norms(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.ln = torch.nn.LayerNorm(32)
            self.ln4 = torch.nn.LayerNorm(16, eps=1e-6)
            self.plain = torch.nn.LayerNorm(32, elementwise_affine=False)
            self.nobias = torch.nn.LayerNorm(32, bias=False)
            for p in self.parameters():
                torch.nn.init.normal_(p)  # real gamma/beta: the init values would fold away

        def forward(self, a, b, c, d, e, f):
            m = f.mean(dim=1, keepdim=True)  # a "LayerNorm" over axis 1 of [1, 10, 32]: not the last axis
            g = (f - m) * torch.rsqrt(((f - m) ** 2).mean(dim=1, keepdim=True) + 1e-5)
            return self.ln(a), self.ln4(b), self.plain(c), self.nobias(d), F.layer_norm(e, (6, 32)), g

    shapes = [(2, 10, 32), (1, 4, 4, 16), (1, 10, 32), (1, 10, 32), (1, 6, 32), (1, 10, 32)]
    gen = torch.Generator().manual_seed(1)
    args = tuple(torch.randn(s, generator=gen) * 3 + 1 for s in shapes)
    return _export(Norms(), args, tmp_path_factory.mktemp("ln") / "ln.tflite")


def test_litert_torch_layer_norms(torch_variants, tmp_path):
    src = torch_variants.path
    dst = tmp_path / "f.tflite"
    rep = fuse_model(src, dst)
    # batch 2, rank 4 with eps 1e-6, no affine, no bias, F.layer_norm over (6, 32) (= last axis of a [1, 1, 192] view)
    assert rep.counts["layer_norm"] == 5
    got = sorted((f.inputs[0].shape, round(f.attrs["eps"], 12)) for f in rep.fused)
    assert got == [((1, 1, 192), 1e-5), ((10, 1, 32), 1e-5), ((10, 1, 32), 1e-5), ((16, 1, 16), 1e-6),
                   ((20, 1, 32), 1e-5)]
    assert rep.rejections == {"layer_norm": {"decomposed: statistics over axis 1 of [1, 10, 32], not the last axis": 1}}
    by_shape = {f.inputs[0].shape: f for f in rep.fused}
    assert np.abs(by_shape[(20, 1, 32)].inputs[1].value - 1).max() > 0.1  # fitted, non-trivial gamma
    assert np.abs(by_shape[(20, 1, 32)].inputs[2].value).max() > 0.1  # and beta
    # the [2,10,32] -> [1,20,32] view litert-torch puts in front is absorbed: the SdGroupNorm view reads the input
    assert by_shape[(20, 1, 32)].inputs[0].name == "serving_default_args_0"
    hist = rep.histogram_after
    assert hist["SdGroupNorm"] == 5 and "SQUARED_DIFFERENCE" not in hist and hist["RSQRT"] == 1  # axis-1 norm stays
    assert max(r.max_rel_err for r in check_fused(src, rep.fused, seed=2)) <= TOL


@pytest.fixture(scope="module")
def sd_shapes(tmp_path_factory) -> Exported:
    """LayerNorms at SD1.5 sizes: 4096 rows of 320 (64x64 transformer), 64 rows of 1280 (8x8 transformer); the
    second with |mean| >> std (an ill-conditioned row: the plain fp32 graph itself is off by ~1e-5 there)."""
    import torch

    class Norms(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(2)
            self.a, self.b = torch.nn.LayerNorm(320), torch.nn.LayerNorm(1280)
            for p in self.parameters():
                torch.nn.init.normal_(p)

        def forward(self, a, b):
            return self.a(a), self.b(b)

    gen = torch.Generator().manual_seed(3)
    args = (torch.randn(1, 4096, 320, generator=gen) * 4 - 2, torch.randn(1, 64, 1280, generator=gen) * 0.01 + 5)
    return _export(Norms(), args, tmp_path_factory.mktemp("ln-sd") / "ln_sd.tflite")


@pytest.mark.parametrize("backend", ["cpu", "opencl", "gl"])
@pytest.mark.parametrize(("model", "sites"), [("torch_variants", 5), ("sd_shapes", 2)])
def test_fused_layer_norms_match_plain_on_every_backend(request, tmp_path, backend, model, sites):
    """SdGroupNorm(groups=1) on [R, 1, C] views (R = 1 .. 4096 rows, C = 16 .. 1280) in each delegate backend,
    against the float64 torch reference, and no worse than the plain fp32 graph in the stock interpreter."""
    ex: Exported = request.getfixturevalue(model)
    dst = tmp_path / "f.tflite"
    assert fuse_model(ex.path, dst).counts["layer_norm"] == sites
    plain = run_tflite(ex.path, ex.inputs)
    delegate = native.load(backend)
    fused = run_tflite(dst, ex.inputs, delegates=[delegate])
    stats = native.stats(delegate)
    assert stats["claimed_by_op"]["SdGroupNorm"] == sites and stats["declined_nodes"] == 0
    assert set(fused) == set(plain) == set(ex.reference)
    for k, want in ex.reference.items():
        err, plain_err = (float(np.abs(got[k] - want).max() / np.abs(want).max()) for got in (fused, plain))
        assert plain_err <= 3e-5, (k, plain_err)  # the reference is right
        assert err <= max(TOL, 1.5 * plain_err), (k, err, plain_err)


# --- the tiny exports --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "sites"), [("unet", 21), ("text_encoder", 5)])
def test_tiny_sites_and_exact_op_deltas(tiny_export, model, sites):
    # tiny UNet: 7 transformer blocks x norm1/2/3; tiny CLIP: 2 layers x layer_norm1/2 + final_layer_norm
    assert expected_sites(TINY)[model]["layer_norm"] == sites
    m = read_model(tiny_export / f"{model}.tflite")
    before = executed_histogram(m)
    res = run_rules(m, [layer_norm.RULE])
    m.cleanup()
    after = executed_histogram(m)
    assert res.counts == {"layer_norm": sites} and res.rejections == {}
    # each site: MEAN RESHAPE SQUARED_DIFFERENCE MEAN ADD RSQRT MUL SUB RESHAPE MUL RESHAPE ADD (gamma=1/beta=0 of
    # the random init folded away) -> RESHAPE SdGroupNorm RESHAPE
    assert all(f.replaced_ops == 12 for f in res.fused)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    want = {"MEAN": -2, "SQUARED_DIFFERENCE": -1, "RSQRT": -1, "SUB": -1, "MUL": -2, "ADD": -2, "RESHAPE": -1,
            "SdGroupNorm": 1}
    assert {k: v for k, v in delta.items() if v} == {k: v * sites for k, v in want.items()}
    assert after.get("SQUARED_DIFFERENCE", 0) == 0


@pytest.mark.parametrize("model", ["unet", "text_encoder"])
def test_tiny_fused_matches_original_through_cpu_delegate(tiny_export, tmp_path, model):
    src, dst = tiny_export / f"{model}.tflite", tmp_path / f"{model}.tflite"
    rep = fuse_model(src, dst)
    sites = expected_sites(TINY)[model]
    assert rep.counts == sites and rep.rejections == {}
    lns = [f for f in rep.fused if f.rule == "layer_norm"]
    assert len(lns) == sites["layer_norm"]
    assert {(f.attrs["groups"], f.attrs["channel_axis"], f.attrs["activation"]) for f in lns} == {(1, -1, "none")}
    assert {f.attrs["eps"] for f in lns} == {float(np.float32(1e-5))}
    assert max(r.max_rel_err for r in check_fused(src, [*lns], seed=4)) <= TOL
    rng = np.random.default_rng(6)
    runner_inputs = {
        n: (rng.integers(0, 49406, d["shape"]) if np.issubdtype(d["dtype"], np.integer)
            else rng.standard_normal(d["shape"])).astype(d["dtype"])
        for n, d in _input_details(src).items()
    }
    plain = run_tflite(src, runner_inputs)
    delegate = native.load("cpu")
    fused = run_tflite(dst, runner_inputs, delegates=[delegate])
    stats = native.stats(delegate)
    assert stats["declined_nodes"] == 0
    assert stats["claimed_by_op"]["SdGroupNorm"] == sites["group_norm"] + sites["layer_norm"]
    for k, want in plain.items():
        assert np.abs(fused[k] - want).max() <= TOL * np.abs(want).max(), k


def _input_details(path: Path) -> dict[str, dict]:
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=str(path)).get_signature_runner().get_input_details()
