"""The per-op error report (``sdconvert optimize --verify``, ``sdconvert --fuse/--winograd --verify``): a row for every
fused op and every Winograd conv of the tiny UNet with its error against the unfused graph; a planted wrong kernel
is named as the worst op on the CPU, OpenCL (PoCL) and GL (llvmpipe) backends; ops that cannot be mapped say why."""
from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sdconvert.export.verify import run_tflite
from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, Tensor
from sdconvert.ops.gelu import SPEC as GELU, GeluAttrs
from sdconvert.opcheck.boundary import find_boundaries, short_location
from sdconvert.opcheck.run import op_report, synthetic_inputs
from sdconvert.optimize_cli import main
from sdlite import native
from sdlite.tflite_info import read_model_info

# the tiny UNet fused with --winograd 4: 14 attentions, 7 GEGLUs, 30 GroupNorms + 21 LayerNorms, 26 F4 convs
TINY_UNET_OPS = {"SdAttention": 14, "SdGelu": 7, "SdGroupNorm": 51, "SdConv2DWinograd": 26}


@pytest.fixture(scope="module")
def fw_unet(tiny_export: Path, tmp_path_factory) -> dict:
    """``sdconvert optimize unet.tflite --fuse --winograd 4 --verify --json``: the output file and the JSON."""
    out = tmp_path_factory.mktemp("opcheck") / "unet-fw.tflite"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([str(tiny_export / "unet.tflite"), "--fuse", "--winograd", "4", "--verify", "--json", "-o", str(out)])
    assert rc == 0
    return {"out": out, "json": json.loads(buf.getvalue())["models"]["unet"]}


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def test_table_has_a_row_for_every_fused_op_and_winograd_conv(fw_unet, tiny_export):
    table = fw_unet["json"]["op_errors"]
    rows = table["rows"]
    ops = read_model_info(fw_unet["out"]).ops
    assert [r["index"] for r in rows] == [i for i, op in enumerate(ops) if op.op_name.startswith("Sd")]
    assert Counter(r["op"] for r in rows) == TINY_UNET_OPS
    for r in rows:
        assert "problem" not in r, r
        rel = r["errors"]["cpu"]["rel"]
        if r["op"] == "SdConv2DWinograd":
            assert r["detail"] == "F4" and 0 < rel <= 2e-5, r  # a different algorithm: never bit-exact
        else:
            assert rel <= 2e-6, r
        # the GroupNorm/LayerNorm rules' own fit residual, nowhere else
        assert ("fit_residual" in r) == (r["op"] == "SdGroupNorm")
        assert r.get("fit_residual", 0.0) <= 1e-6
    assert table["worst"]["cpu"] == max(rows, key=lambda r: r["errors"]["cpu"]["rel"])["index"]
    # the whole-model figure is the optimized model against the input on the same synthetic inputs
    src = tiny_export / "unet.tflite"
    feeds = synthetic_inputs(src)
    want = run_tflite(src, feeds)["noise_pred"]
    got = run_tflite(fw_unet["out"], feeds, delegates=[native.load("cpu")])["noise_pred"]
    assert table["end_to_end"]["cpu"]["noise_pred"]["rel"] == pytest.approx(_rel(got, want), rel=1e-6)
    assert 0 < _rel(got, want) <= 1e-4


def test_printed_table(tiny_export, tmp_path, capsys):
    out = tmp_path / "te.tflite"
    assert main([str(tiny_export / "text_encoder.tflite"), "--fuse", "--verify", "-o", str(out)]) == 0
    text = capsys.readouterr().out.splitlines()
    start = text.index("text_encoder per-op error (each fused op on the unfused graph's tensors at its boundary):")
    assert text[start + 1] == "| # | op | detail | location | shape | cpu max abs | cpu rel | fit |"
    body = text[start + 3:start + 3 + 9]  # 2 attentions, 2 quick GELUs, 5 LayerNorms
    assert [line.split(" | ")[1] for line in body] == ["SdGroupNorm", "SdAttention", "SdGroupNorm", "SdGelu"] * 2 + [
        "SdGroupNorm"]
    assert body[0].startswith("| 5 | SdGroupNorm | layer norm | encoder/CLIPEncoderLayer_0/layer_norm1 | 77x1x32 | ")
    assert body[1].split(" | ")[2] == "partial_softmax 4x8 causal" and body[3].split(" | ")[2] == "quick"
    assert text[start + 12].startswith("text_encoder on cpu: whole model last_hidden_state rel ")
    assert "; worst op #" in text[start + 12]


def test_planted_wrong_gelu_is_named_worst_on_every_backend(fw_unet, tiny_export, tmp_path):
    """One GEGLU's kernel computes the tanh approximation instead of erf (the test entry point edits that op in the
    probe): on every backend the table names it as the worst op, by a wide margin."""
    gelus = [r["index"] for r in fw_unet["json"]["op_errors"]["rows"] if r["op"] == "SdGelu"]
    target = gelus[3]
    planted = []

    def plant(index: int, op: Op) -> None:
        if index == target:
            assert GELU.decode(op.custom_options) == GeluAttrs(approximate="none", gated=True)
            op.custom_options = GELU.encode(GeluAttrs(approximate="tanh", gated=True))
            planted.append(index)

    src = tiny_export / "unet.tflite"
    backends = ("cpu", "opencl", "gl")
    report = op_report("unet", src, fw_unet["out"], synthetic_inputs(src), backends, workdir=tmp_path, plant=plant)
    assert planted == [target]
    assert not list(tmp_path.iterdir())  # the temporary models are gone
    for b in backends:
        ranked = sorted(report.rows, key=lambda r: -r.errors[b].rel)
        assert ranked[0].index == target == report.worst(b).index, b
        assert ranked[0].errors[b].rel > 10 * ranked[1].errors[b].rel, (b, ranked[0], ranked[1])
        assert all(r.errors[b].rel <= 1e-6 for r in report.rows if r.op == "SdGelu" and r.index != target), b
        assert report.end_to_end[b]["noise_pred"].rel <= 1e-4  # the probe only: the model itself is untouched
    assert f"; worst op #{target} SdGelu gated erf" in report.format_table()


def _t(sg: Subgraph, name: str, shape=(1, 8)) -> Tensor:
    return sg.add_tensor(Tensor(name, shape))


def _gelu_model(middle: str, fused: bool) -> Model:
    """x -> ADD(x, c) -> ``middle`` -> GELU (reference) or SdGelu (``fused``) -> y."""
    sg = Subgraph("main")
    x, y = _t(sg, "x"), _t(sg, "y")
    c = sg.new_constant("c", np.ones((1, 8), np.float32))
    h = _t(sg, middle)
    sg.ops.append(Op(OpCode.of("ADD"), [x, c], [h]))
    if not fused:
        sg.ops.append(Op(OpCode.of("GELU"), [h], [y]))
    else:
        sg.ops.append(Op(OpCode.of(GELU.name), [h], [y], custom_options=GELU.encode(GeluAttrs())))
    sg.inputs, sg.outputs = [x], [y]
    return Model(subgraphs=[sg], signatures=[SignatureDef("serving_default", sg, [("x", x)], [("y", y)])])


def test_unmapped_inputs_are_reported_not_guessed():
    ref = _gelu_model("h", fused=False)
    ok = find_boundaries(_gelu_model("h", fused=True), ref)
    assert len(ok) == 1 and not ok[0].problem and [n for _, n in ok[0].feeds] == ["h"] and ok[0].ref_output == "y"
    (bad,) = find_boundaries(_gelu_model("h_new", fused=True), ref)  # its input is a tensor the reference lacks
    assert bad.problem == "input 'h_new' is computed by ADD, which the reference graph does not have"
    assert bad.region == [] and bad.feeds == []


def test_short_location():
    name = ("sdconvert.export.wrappers.UNet/diffusers.models.unets.unet_2d_condition.UNet2DConditionModel_unet/"
            "diffusers.models.unets.unet_2d_blocks.CrossAttnDownBlock2D_0/diffusers.models.resnet.ResnetBlock2D_0/"
            "torch.nn.modules.conv.Conv2d_conv_shortcut;3")
    assert short_location(name) == "CrossAttnDownBlock2D_0/ResnetBlock2D_0/conv_shortcut"
    assert short_location("serving_default_sample:0") == "serving_default_sample:0"
    assert short_location("a/b/Linear_to_out/Dropout_1") == "to_out/Dropout_1"


def test_folder_verify_puts_the_tables_in_the_manifest(tiny_export, tmp_path):
    out = tmp_path / "fused"
    assert main([str(tiny_export), "--fuse", "--verify", "-q", "-o", str(out)]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert sorted(m["op_errors"]) == sorted(m["models"])
    for name, table in m["op_errors"].items():
        hist = read_model_info(out / m["models"][name]["file"]).op_histogram
        assert Counter(r["op"] for r in table["rows"]) == {op: n for op, n in hist.items() if op.startswith("Sd")}
        assert all(r["errors"]["cpu"]["rel"] <= 2e-6 for r in table["rows"]), name
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no temporary model left behind


def test_optimized_model_over_tolerance_exits_1_and_writes_nothing(tiny_export, tmp_path, capsys, monkeypatch):
    from sdconvert.export import verify

    monkeypatch.setitem(verify.TOLERANCE, "fp32", 1e-12)  # the fused text encoder differs by ~4e-7
    out = tmp_path / "te.tflite"
    assert main([str(tiny_export / "text_encoder.tflite"), "--fuse", "--verify", "-q", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sdconvert optimize: error: text_encoder: the optimized model differs from "
                          "text_encoder.tflite beyond 1e-12 relative (last_hidden_state on cpu: ")
    assert "text_encoder on cpu: whole model last_hidden_state rel " in err and "; worst op #" in err
    assert list(tmp_path.iterdir()) == []
