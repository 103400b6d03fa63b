"""LayerNorm folded into the FULLY_CONNECTED that reads it (OpenCL on PoCL and GL on llvmpipe in CI): an SdGroupNorm LayerNorm ([rows, 1, C]
view, no SiLU, constant gamma / beta) whose output only an FC reads, directly or through a RESHAPE (SD's transformer
norm1/2/3 -> QKV / attn2 Q / GEGLU projections), launches nothing: the FC's weights are scaled by gamma, beta goes
into its bias, and the LayerNorm twins of the tiled GEMM kernels (NAME_ln, NAME_gg_ln) normalise each row of the
LayerNorm's input inside the GEMM. Rows with a mean far from zero check the shifted statistics; K = 100 leaves a
partial k step; 200 rows leave a partial row tile. Cases that keep the LayerNorm launch: a second reader of its
output, K % 4 != 0, a split-K plan (its unsplit twin measured slower than the LayerNorm launch), half weights
(weights_fp16), fuse_epilogues=0. The other form (layer_norm_fold=rows) launches layer_norm_rows, which only
OpenCL has so far: on GL the LayerNorm then keeps its own launch."""
from __future__ import annotations

import json

import numpy as np
import pytest
from ai_edge_litert.interpreter import load_delegate

from harness import assert_close, make_interpreter
from sdconvert.ops import gelu as G
from sdconvert.ops import group_norm as GN
from sdlite import native
from tflite_gemm_models import OpGraphBuilder
from test_opencl_residual import _fc, _rand, _reshape, _slice, backend  # noqa: F401 (fixture)


def _layer_norm(rng, g: OpGraphBuilder, m: int, k: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """Input x [m, 1, k] -> SdGroupNorm's LayerNorm view -> RESHAPE [1, m, k] (as the converter emits it): (the LayerNorm's
    output, the reshaped tensor, gamma, beta)."""
    x = g.input("x", [m, 1, k])
    h = g.tensor("h", [m, 1, k])
    gamma, beta = (_rand(rng, k) * 0.5 + 1.0).astype(np.float32), (_rand(rng, k) * 0.3).astype(np.float32)
    g.custom("SdGroupNorm", [x, g.const("gamma", gamma), g.const("beta", beta)], [h],
             GN.SPEC.encode(GN.GroupNormAttrs(groups=1, activation="none")))
    return h, _reshape(g, h, [1, m, k], "hv"), gamma, beta


def _model(rng, m: int, k: int, n: int, bias: bool, gated: bool, also_output_norm: bool = False):
    g = OpGraphBuilder()
    h, hv, gamma, beta = _layer_norm(rng, g, m, k)
    w = _rand(rng, n, k) * 0.2
    b = _rand(rng, n) if bias else None
    y = _fc(g, hv, w, b, [1, m, n], "ff")
    if gated:
        out = g.tensor("y", [1, m, n // 2])
        g.custom("SdGelu", [y], [out], G.SPEC.encode(G.GeluAttrs(approximate="none", gated=True)))
        y = out
    g.output(y)
    if also_output_norm:
        g.output(h)
    return g.build(), gamma, beta, w, b


def _want(xv, gamma, beta, w, b, gated: bool) -> np.ndarray:
    x = xv.astype(np.float64)[:, 0, :]
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    h = ((x - mu) / np.sqrt(var + 1e-5) * gamma + beta) @ w.T.astype(np.float64) + (0.0 if b is None else b)
    if gated:
        return G.reference([h[None].astype(np.float32)], G.GeluAttrs(approximate="none", gated=True))[0]
    return h


def _run(tmp_path, model: bytes, xv: np.ndarray, backend: str = "opencl", stats: dict | None = None, **options):
    """(outputs, kernels per op, compute units); ``stats`` gets the delegate's stats."""
    profile = tmp_path / "profile.json"
    delegate = load_delegate(str(native.delegate_path()),
                             {"backend": backend, "profile_path": str(profile), "gemm_autotune": "0",
                              **{key: str(value) for key, value in options.items()}})
    runner = make_interpreter(model, delegate).get_signature_runner("serving_default")
    out = runner(x=xv)
    assert native.stats(delegate)["partitions"] == 1 and native.stats(delegate)["declined_nodes"] == 0
    if stats is not None:
        stats.update(native.stats(delegate))
    report = json.loads(profile.read_text())
    nodes = report["nodes"]
    kernels = {op: [kk["name"] for nd in nodes if nd["op"] == op for kk in nd["kernels"]]
               for op in ("SdGroupNorm", "FULLY_CONNECTED", "SdGelu")}
    return out, kernels, int(report["compute_units"])


# act16: half activation storage (x read as half by the twin's loaders; offset 1000 would leave half's 0.5 steps
# there against a spread of 2, a loss in the stored input itself, so only offset 0)
@pytest.mark.parametrize("offset,act16", [(0.0, False), (1000.0, False), (0.0, True)])
@pytest.mark.parametrize("m,k,n,bias,gated", [
    (200, 96, 72, True, False),    # the cost model's plan already has a twin
    (200, 100, 40, False, False),  # K = 100: a partial k step; no bias of its own (beta makes one)
    (130, 64, 96, True, True),     # + the gated GELU epilogue: NAME_gg_ln
    (1024, 640, 256, True, False),  # SD's middle width: the device fold's column sums over 640 rows
])
def test_layer_norm_runs_inside_the_gemm(rng, tmp_path, backend, offset, act16, m, k, n, bias, gated):
    model, gamma, beta, w, b = _model(rng, m, k, n, bias, gated)
    xv = (_rand(rng, m, 1, k) * 2.0 + offset).astype(np.float32)
    stats: dict = {}
    out, kernels, _ = _run(tmp_path, model, xv, backend, stats, **({"activations_fp16": 1} if act16 else {}))
    assert kernels["SdGroupNorm"] == [] and kernels["SdGelu"] == []
    # the folded weights, and the bias with the column sums behind it (one buffer: one storage block on GL), are made
    # on the device (ln_fold_columns / ln_fold_bias): the host makes none of them
    assert (stats["weights_on_device"], stats["weights_on_host"]) == (2, 0), stats
    assert kernels["FULLY_CONNECTED"] and all(name.endswith("_gg_ln" if gated else "_ln")
                                              for name in kernels["FULLY_CONNECTED"])
    assert_close(out["y" if gated else "ff"][0], _want(xv, gamma, beta, w, b, gated), rtol=3e-3 if act16 else 1e-5)


@pytest.mark.parametrize("case", ["second_reader", "k_not_multiple_of_4", "forced_split", "fuse_epilogues_off",
                                  "weights_fp16"])
def test_layer_norm_keeps_its_launch(rng, tmp_path, backend, case):
    k = 30 if case == "k_not_multiple_of_4" else 64
    model, gamma, beta, w, b = _model(rng, 200, k, 48, True, False, also_output_norm=case == "second_reader")
    options = {"fuse_epilogues": "0"} if case == "fuse_epilogues_off" else {}
    if case == "forced_split":
        options = {"gemm_tiles": "64x64/2"}
    if case == "weights_fp16":  # half weights: the column sums of the fp32 weights would not match them
        options = {"weights_fp16": "1"}
    xv = _rand(rng, 200, 1, k) + 3.0
    out, kernels, _ = _run(tmp_path, model, xv, backend, **options)
    if backend == "opencl":
        assert kernels["SdGroupNorm"] == ["layer_norm_rows"] or (kernels["SdGroupNorm"] and case == "k_not_multiple_of_4")
    else:  # GL's SdGroupNorm kernels are the other op family's
        assert kernels["SdGroupNorm"]
    assert not any(name.endswith("_ln") for name in kernels["FULLY_CONNECTED"])
    assert_close(out["ff"][0], _want(xv, gamma, beta, w, b, False), rtol=2e-3 if case == "weights_fp16" else 1e-5)


@pytest.mark.parametrize("backend,limits", [("opencl", None), ("gl", None), ("gl", "compute_units=2")])
def test_few_rows_replan_only_when_the_grid_fills_the_device(rng, tmp_path, backend, limits):
    # 40 rows plan on gemm_t16x64, which has no twin: the fold re-plans on the cheapest unsplit tiled config with
    # one, but only while that grid has at least one work-group per compute unit (else the LayerNorm launch is
    # cheaper than an idle device): n = 128 * (CUs + 1) columns fold; 48 columns (one tile) fold only on 1 CU. GL
    # reports no compute units (0: the fold always re-plans) unless gl_limits sets them.
    k = 64
    options = {"gl_limits": limits} if limits else {}
    _, _, cus = _run(tmp_path, _model(rng, 8, 16, 8, False, False)[0], _rand(rng, 8, 1, 16), backend, **options)
    assert cus == {None: 0, "compute_units=2": 2}[limits] or backend == "opencl"
    for n, folds in ((128 * (cus + 1), True), (48, cus <= 1)):
        model, gamma, beta, w, b = _model(rng, 40, k, n, True, False)
        xv = _rand(rng, 40, 1, k) + 2.0
        out, kernels, _ = _run(tmp_path, model, xv, backend, **options)
        assert (kernels["SdGroupNorm"] == []) == folds, (n, kernels)
        assert all(name.endswith("_ln") for name in kernels["FULLY_CONNECTED"]) == folds, (n, kernels)
        assert_close(out["ff"][0], _want(xv, gamma, beta, w, b, False), rtol=1e-5)


def _column_split(rng, m: int, k: int, w: int):
    """LayerNorm -> one bias-free FC of 3 * w columns -> three column SLICEs (SD's merged QKV projection): (builder,
    the three slices, weights, gamma, beta)."""
    g = OpGraphBuilder()
    _, hv, gamma, beta = _layer_norm(rng, g, m, k)
    wt = _rand(rng, 3 * w, k) * 0.2
    qkv = _fc(g, hv, wt, None, [1, m, 3 * w], "qkv")
    parts = [_slice(g, qkv, [0, 0, i * w], [1, m, w], f"s{i}") for i in range(3)]
    return g, parts, wt, gamma, beta


def test_column_split_fc_folds_per_block(rng, tmp_path, backend):
    # SD's merged QKV projection: one FC read only through three column SLICEs runs as a GEMM batched over the column
    # blocks (zero-copy SLICEs); the LayerNorm twins read each block's bias (beta W) and column sums at its offset.
    m, k, w = 150, 64, 40
    g, parts, wt, gamma, beta = _column_split(rng, m, k, w)
    s01 = g.tensor("s01", [1, m, w])
    g.add(parts[0], parts[1], s01)
    y = g.tensor("y", [1, m, w])
    g.mul(s01, parts[2], y)
    g.output(y)
    xv = _rand(rng, m, 1, k) * 3.0 + 50.0
    stats: dict = {}
    out, kernels, _ = _run(tmp_path, g.build(), xv, backend, stats)
    assert kernels["SdGroupNorm"] == [] and kernels["FULLY_CONNECTED"]
    assert (stats["weights_on_device"], stats["weights_on_host"]) == (2, 0), stats
    assert all(name.endswith("_ln") for name in kernels["FULLY_CONNECTED"])
    full = _want(xv, gamma, beta, wt, None, False)
    assert_close(out["y"][0], (full[:, :w] + full[:, w:2 * w]) * full[:, 2 * w:], rtol=1e-5)


@pytest.mark.parametrize("offset,act16", [(0.0, False), (1000.0, False), (0.0, True)])
@pytest.mark.parametrize("m,k,n,bias,gated", [(200, 96, 72, True, False), (130, 64, 96, True, True)])
def test_rows_form_normalises_into_scratch_then_runs_the_plain_gemm(rng, tmp_path, offset, act16, m, k, n, bias,
                                                                    gated):
    """layer_norm_fold=rows: the folded LayerNorm still launches nothing as a node; the FC launches layer_norm_rows
    (unit affine: gamma and beta are in its weights and bias) into its scratch, then the plain (gated) GEMM (act16:
    the normalised rows as half in that scratch)."""
    model, gamma, beta, w, b = _model(rng, m, k, n, bias, gated)
    xv = (_rand(rng, m, 1, k) * 2.0 + offset).astype(np.float32)
    out, kernels, _ = _run(tmp_path, model, xv, layer_norm_fold="rows", **({"activations_fp16": 1} if act16 else {}))
    assert kernels["SdGroupNorm"] == [] and kernels["SdGelu"] == []
    fc = kernels["FULLY_CONNECTED"]
    assert fc[0] == "layer_norm_rows" and len(fc) >= 2 and not any(name.endswith("_ln") for name in fc)
    assert fc[1].endswith("_gg") == gated
    assert_close(out["y" if gated else "ff"][0], _want(xv, gamma, beta, w, b, gated), rtol=3e-3 if act16 else 1e-5)


def test_rows_form_of_a_column_split_fc_normalises_the_shared_rows_once(rng, tmp_path):
    m, k, w = 150, 64, 40
    g, parts, wt, gamma, beta = _column_split(rng, m, k, w)
    for part in parts:
        g.output(part)
    xv = _rand(rng, m, 1, k) * 3.0 + 50.0
    out, kernels, _ = _run(tmp_path, g.build(), xv, layer_norm_fold="rows")
    assert kernels["SdGroupNorm"] == [] and kernels["FULLY_CONNECTED"][0] == "layer_norm_rows"
    assert kernels["FULLY_CONNECTED"].count("layer_norm_rows") == 1
    full = _want(xv, gamma, beta, wt, None, False)
    for i in range(3):
        assert_close(out[f"s{i}"][0], full[:, i * w:(i + 1) * w], rtol=1e-5)


def test_auto_times_both_forms_and_keeps_one(rng, tmp_path, backend):
    """layer_norm_fold=auto with the tuner on: twins and rows plans are timed together; whichever wins, the result
    matches and exactly one form runs (on PoCL either can win; GL has only the twins)."""
    model, gamma, beta, w, b = _model(rng, 256, 64, 128, True, True)
    xv = (_rand(rng, 256, 1, 64) + 5.0).astype(np.float32)
    out, kernels, _ = _run(tmp_path, model, xv, backend, layer_norm_fold="auto", gemm_autotune="1")
    fc = kernels["FULLY_CONNECTED"]
    rows = fc[:1] == ["layer_norm_rows"]
    assert kernels["SdGroupNorm"] == [] and (rows or all(name.endswith("_gg_ln") for name in fc)), fc
    assert not rows or not any(name.endswith("_ln") for name in fc[1:])
    assert_close(out["y"][0], _want(xv, gamma, beta, w, b, True), rtol=1e-5)


def test_default_times_twins_only(rng, tmp_path, backend):
    """The default (layer_norm_fold=twin) with the tuner on: only twin plans are candidates."""
    model, gamma, beta, w, b = _model(rng, 256, 64, 128, True, True)
    xv = (_rand(rng, 256, 1, 64) + 5.0).astype(np.float32)
    out, kernels, _ = _run(tmp_path, model, xv, backend, gemm_autotune="1")
    assert kernels["SdGroupNorm"] == [] and kernels["FULLY_CONNECTED"]
    assert all(name.endswith("_gg_ln") for name in kernels["FULLY_CONNECTED"]), kernels
    assert_close(out["y"][0], _want(xv, gamma, beta, w, b, True), rtol=1e-5)


@pytest.mark.parametrize("value", ["Rows", "none", ""])
def test_layer_norm_fold_option_is_validated(value):
    with pytest.raises(ValueError, match="layer_norm_fold='.*' must be auto, twin or rows"):
        load_delegate(str(native.delegate_path()), {"backend": "opencl", "layer_norm_fold": value})
    with pytest.raises(native.NativeDelegateError, match="layer_norm_fold must be one of auto, twin, rows"):
        native.DelegateOptions(backend="opencl", layer_norm_fold=value)
