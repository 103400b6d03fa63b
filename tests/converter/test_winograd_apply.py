"""Planning a graph-IR model's CONV_2D ops and rewriting them to SdConv2DWinograd."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, read_model, write_model
from sdconvert.graph.schema import S
from sdconvert.ops.conv2d_winograd import SPEC, Conv2DWinogradAttrs
from sdconvert.winograd.apply import apply_plan, iter_convs, plan_model
from sdconvert.winograd.plan import make_plan


def _conv(sg: Subgraph, x, w: np.ndarray, b: np.ndarray, out_shape, padding: int, act: int = 0,
          stride: int = 1) -> object:
    opts = S.Conv2DOptionsT()
    opts.padding, opts.strideH, opts.strideW = padding, stride, stride
    opts.dilationHFactor = opts.dilationWFactor = 1
    opts.fusedActivationFunction = act
    inputs = [x, sg.new_constant("w", w.astype(np.float32))]
    inputs.append(sg.new_constant("b", b.astype(np.float32)))
    y = sg.new_tensor("y", out_shape)
    sg.ops.append(Op(OpCode.of("CONV_2D"), inputs, [y], options_type=S.BuiltinOptions.Conv2DOptions, options=opts))
    return y


def three_conv_model(path: Path) -> Path:
    """x[1,12,12,8] -> conv3x3 SAME+RELU -> conv3x3 VALID -> conv3x3 stride 2 -> y."""
    rng = np.random.default_rng(0)
    sg = Subgraph("main")
    x = sg.new_tensor("x", (1, 12, 12, 8))
    sg.inputs = [x]
    y1 = _conv(sg, x, rng.standard_normal((16, 3, 3, 8)) / 8, rng.standard_normal(16), (1, 12, 12, 16),
               S.Padding.SAME, S.ActivationFunctionType.RELU)
    y2 = _conv(sg, y1, rng.standard_normal((8, 3, 3, 16)) / 12, rng.standard_normal(8), (1, 10, 10, 8),
               S.Padding.VALID)
    y3 = _conv(sg, y2, rng.standard_normal((4, 3, 3, 8)) / 8, rng.standard_normal(4), (1, 5, 5, 4), S.Padding.SAME,
               stride=2)
    sg.outputs = [y3]
    model = Model(subgraphs=[sg], signatures=[SignatureDef("serving_default", sg, [("x", x)], [("y", y3)])])
    return write_model(model, path)


def test_iter_convs_reads_shapes_and_options(tmp_path: Path) -> None:
    model = read_model(three_conv_model(tmp_path / "m.tflite"))
    specs = [s for _, _, s in iter_convs(model)]
    assert [(s.in_h, s.in_c, s.out_c, s.padding, s.activation, s.stride_h) for s in specs] == [
        (12, 8, 16, "SAME", "relu", 1), (12, 16, 8, "VALID", "none", 1), (10, 8, 4, "SAME", "none", 2)]
    assert all(s.filter_is_constant and s.dtype == "float32" for s in specs)
    assert [s.op_index for s in specs] == [0, 1, 2]


def test_apply_forced_plan_rewrites_suitable_convs(tmp_path: Path) -> None:
    src = three_conv_model(tmp_path / "m.tflite")
    model = read_model(src)
    plan = plan_model(model, 6, "cpu")
    assert [d.tile for d in plan.decisions] == [6, 6, 0]
    assert apply_plan(model, plan) == 2
    assert model.op_histogram() == {"SdConv2DWinograd": 2, "CONV_2D": 1}
    assert [op.type for op in model.main.ops] == ["SdConv2DWinograd", "SdConv2DWinograd", "CONV_2D"]
    assert model.main.validate() == []
    first, second = model.main.ops[0], model.main.ops[1]
    assert SPEC.decode(first.custom_options) == Conv2DWinogradAttrs(tile=6, padding="SAME", activation="relu")
    assert SPEC.decode(second.custom_options) == Conv2DWinogradAttrs(tile=6, padding="VALID", activation="none")
    assert first.inputs[1].shape == (16, 3, 3, 8)                     # original filter, not transformed
    out = write_model(model, tmp_path / "w.tflite")
    assert out.stat().st_size - src.stat().st_size < 256             # no transformed weights in the file

    # semantics: the original graph (TFLite builtin convs) == the op references chained on the same data
    x = np.random.default_rng(1).standard_normal((1, 12, 12, 8)).astype(np.float32)
    want = Interpreter(model_path=str(src)).get_signature_runner()(x=x)["y"]
    consts = lambda op: [t.numpy() for t in op.inputs[1:]]  # noqa: E731
    h = SPEC.reference([x, *consts(first)], SPEC.decode(first.custom_options))
    h = SPEC.reference([h, *consts(second)], SPEC.decode(second.custom_options))
    w3, b3 = consts(model.main.ops[2])
    from sdconvert.winograd.reference import direct_conv2d

    h = direct_conv2d(np.pad(h, ((0, 0), (0, 1), (0, 1), (0, 0))), w3, b3, "VALID")[:, ::2, ::2]
    np.testing.assert_allclose(h, want, rtol=0, atol=1e-4)


def test_mismatched_plan_is_rejected(tmp_path: Path) -> None:
    model = read_model(three_conv_model(tmp_path / "m.tflite"))
    specs = [s for _, _, s in iter_convs(model)]
    with pytest.raises(ValueError, match="plan has 2 convs but the model has 3"):
        apply_plan(model, make_plan(specs[:2], 4))
    from dataclasses import replace

    other = [replace(specs[0], in_h=13), *specs[1:]]
    with pytest.raises(ValueError, match="plan does not match the model at conv"):
        apply_plan(model, make_plan(other, 4))


def test_off_plan_changes_nothing(tmp_path: Path) -> None:
    model = read_model(three_conv_model(tmp_path / "m.tflite"))
    assert apply_plan(model, plan_model(model, "off")) == 0
    assert model.op_histogram() == {"CONV_2D": 3}


def test_missing_bias_becomes_a_zero_constant(tmp_path: Path) -> None:
    model = read_model(three_conv_model(tmp_path / "m.tflite"))
    model.main.ops[1].inputs[2] = None                 # CONV_2D's optional bias omitted
    assert apply_plan(model, plan_model(model, 2)) == 2
    bias = model.main.ops[1].inputs[2]
    assert bias.is_constant and bias.shape == (8,) and not bias.numpy().any()


def test_winograd_pass_plans_and_rewrites(tmp_path: Path) -> None:
    from sdconvert.winograd.apply import WinogradOptions, winograd_pass

    model = read_model(three_conv_model(tmp_path / "m.tflite"))
    plan = winograd_pass(model, WinogradOptions(mode="4", profile="h200", tune=True))   # tune only applies to auto
    assert plan.to_json()["summary"]["decisions"] == {"direct": 1, "F2": 0, "F4": 2, "F6": 0}
    assert all(d.source == "model" for d in plan.decisions)
    assert model.op_histogram() == {"SdConv2DWinograd": 2, "CONV_2D": 1}
