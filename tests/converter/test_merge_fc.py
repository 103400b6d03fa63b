"""``merge_sibling_fcs`` (the ``merge_sibling_fc`` pass of ``--fuse``): sibling FULLY_CONNECTEDs -> one FC + SLICEs.

Parity runs the written models on the LiteRT CPU interpreter (builtin FC / SLICE / DEQUANTIZE only)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S
from ai_edge_litert.interpreter import Interpreter

from sdconvert.graph import Model, Op, OpCode, Subgraph, Tensor, read_model, write_model
from sdconvert.rewrite import fuse_model
from sdconvert.rewrite.merge_fc import merge_sibling_fcs

from ir_graphs import relu as _relu
from ir_graphs import single_subgraph_model as _model


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _fc(sg: Subgraph, x: Tensor, w: np.ndarray, b: np.ndarray | None, *, act: int = 0, f16: bool = False,
        keep: bool = True) -> tuple[Tensor, Op]:
    if f16:
        wc = sg.new_constant("w16", w.astype(np.float16))
        wt = sg.add_tensor(Tensor(f"w32_{len(sg.ops)}", w.shape))
        sg.ops.append(Op(OpCode.of("DEQUANTIZE"), [wc], [wt]))
    else:
        wt = sg.new_constant("w", w)
    o = S.FullyConnectedOptionsT()
    o.fusedActivationFunction, o.keepNumDims = act, keep
    shape = (*x.shape[:-1], w.shape[0]) if keep else (int(np.prod(x.shape[:-1])), w.shape[0])
    y = sg.add_tensor(Tensor(f"fc_{len(sg.ops)}", shape))
    ins = [x, wt] + ([sg.new_constant("b", b)] if b is not None else [])
    op = Op(OpCode.of("FULLY_CONNECTED"), ins, [y], options_type=S.BuiltinOptions.FullyConnectedOptions, options=o)
    sg.ops.append(op)
    return y, op


def _run(path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return Interpreter(model_path=str(path)).get_signature_runner()(**inputs)


def _siblings(rng: np.random.Generator, *, f16: bool = False) -> tuple[Model, Tensor, list[Tensor]]:
    """x -> 3 FCs (64, 32, 48 wide; biases: yes, no, yes) like q/k/v + an unrelated FC on another input."""
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (1, 5, 16)))
    z = sg.add_tensor(Tensor("z", (1, 5, 16)))
    outs = []
    for n, has_b in ((64, True), (32, False), (48, True)):
        w = rng.standard_normal((n, 16)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32) if has_b else None
        outs.append(_relu(sg, _fc(sg, x, w, b, f16=f16)[0]))
    outs.append(_relu(sg, _fc(sg, z, rng.standard_normal((8, 16)).astype(np.float32), None)[0]))
    return _model(sg, [x, z], outs), x, outs


@pytest.mark.parametrize("f16", [False, True])
def test_siblings_become_one_fc_and_slices(tmp_path, rng, f16):
    model, _, _ = _siblings(rng, f16=f16)
    src = write_model(model, tmp_path / "src.tflite")
    assert merge_sibling_fcs(model) == 2
    dst = write_model(model, tmp_path / "dst.tflite")
    hist = read_model(dst).op_histogram()
    assert hist["FULLY_CONNECTED"] == 2 and hist["SLICE"] == 3 and hist["RELU"] == 4
    assert hist.get("DEQUANTIZE", 0) == (1 if f16 else 0)  # the three fp16 weights dequantized as one
    merged = next(op for op in read_model(dst).main.ops if op.type == "FULLY_CONNECTED" and op.inputs[1].shape[0] > 8)
    assert tuple(merged.inputs[1].shape) == (144, 16) and tuple(merged.inputs[2].shape) == (144,)
    inputs = {"x": rng.standard_normal((1, 5, 16)).astype(np.float32),
              "z": rng.standard_normal((1, 5, 16)).astype(np.float32)}
    want, got = _run(src, inputs), _run(dst, inputs)
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def test_incompatible_fcs_stay_apart(rng):
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (4, 16)))
    w = rng.standard_normal((8, 16)).astype(np.float32)
    a = _relu(sg, _fc(sg, x, w, None)[0])
    b = _relu(sg, _fc(sg, x, w, None, act=1)[0])            # other fused activation
    c = _relu(sg, _fc(sg, x, w, None, keep=False)[0])       # other keepNumDims (and output rank)
    d, _ = _fc(sg, x, w, None)                               # a model output: its tensor must survive
    wv = sg.add_tensor(Tensor("w_input", (8, 16)))           # weights that are not constants
    e = _relu(sg, _fc(sg, x, np.zeros((8, 16), np.float32), None)[0])
    sg.ops[-2].inputs[1] = wv
    model = _model(sg, [x, wv], [a, b, c, d, e])
    assert merge_sibling_fcs(model) == 0
    assert model.op_histogram()["FULLY_CONNECTED"] == 5


def test_fuse_runs_the_pass_and_reports_it(tmp_path, rng):
    model, _, _ = _siblings(rng)
    src = write_model(model, tmp_path / "src.tflite")
    rep = fuse_model(src, tmp_path / "fused.tflite")
    assert rep.passes == {"merge_sibling_fc": 2, "transpose_pairs_cancelled": 0}
    assert "merge_sibling_fc       2  (pass)" in rep.format_table()
    assert rep.histogram_after["FULLY_CONNECTED"] == 2 and rep.histogram_after["SLICE"] == 3
    off = fuse_model(src, tmp_path / "off.tflite", merge_fcs=False)
    assert off.passes == {"transpose_pairs_cancelled": 0} and off.histogram_after["FULLY_CONNECTED"] == 4


def test_tiny_unet_projections_merge(tiny_export):
    """Tiny UNet: every attention's q/k/v (3 -> 1), the cross-attentions' k/v on the text states (bias-free: one FC
    per width) and the ResNets' time projections (biased: one FC over all blocks)."""
    from sdconvert.rewrite.fuse import fuse

    model = read_model(tiny_export / "unet.tflite")
    _, passes = fuse(model, merge_fcs=False)
    fcs = [op for op in model.main.ops if op.type == "FULLY_CONNECTED"]
    text = next(t for t in model.main.inputs if t.name.endswith("encoder_hidden_states"))
    widths = {int(op.outputs[0].shape[-1]) for op in fcs if op.inputs[0] is text}
    assert len(widths) >= 2  # the tiny UNet has two channel widths, so the split is exercised
    text_fcs = {w: sum(1 for op in fcs if op.inputs[0] is text and int(op.outputs[0].shape[-1]) == w) for w in widths}
    parts: dict[tuple, int] = {}
    for op in fcs:
        biased = len(op.inputs) > 2 and op.inputs[2] is not None
        key = (id(op.inputs[0]), -1 if biased else int(op.outputs[0].shape[-1]))
        parts[key] = parts.get(key, 0) + 1
    groups = [n for n in parts.values() if n > 1]
    assert merge_sibling_fcs(model) == sum(groups) - len(groups)
    assert model.op_histogram()["SLICE"] == sum(groups)
    merged_text = [op for op in model.main.ops if op.type == "FULLY_CONNECTED" and op.inputs[0] is text]
    assert sorted(int(op.outputs[0].shape[-1]) for op in merged_text) == sorted(w * n for w, n in text_fcs.items())


def test_bias_free_siblings_merge_per_width(tmp_path, rng):
    """k/v-like bias-free FCs of two widths on one input: one merged FC per width (the GPU delegate runs each as
    one GEMM batched over equal column blocks); a group with a bias anywhere merges whole (test above)."""
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (1, 7, 16)))
    outs = [_relu(sg, _fc(sg, x, rng.standard_normal((n, 16)).astype(np.float32), None)[0])
            for n in (32, 64, 32, 64, 64)]
    model = _model(sg, [x], outs)
    src = write_model(model, tmp_path / "src.tflite")
    assert merge_sibling_fcs(model) == 3
    dst = write_model(model, tmp_path / "dst.tflite")
    merged = [op for op in read_model(dst).main.ops if op.type == "FULLY_CONNECTED"]
    assert sorted(int(op.inputs[1].shape[0]) for op in merged) == [64, 192]
    assert read_model(dst).op_histogram()["SLICE"] == 5
    inputs = {"x": rng.standard_normal((1, 7, 16)).astype(np.float32)}
    want, got = _run(src, inputs), _run(dst, inputs)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


def _late_time_projection(rng: np.random.Generator, *, f16: bool, rows: int = 1, seq: bool = False) -> Model:
    """SD's ResNet order, small: e = RELU(t) (the time embedding), a big op on the image (h = FC(x)), then
    s = RELU(e) (each ResNet's SiLU of e, exported after its conv1) read by three biased FCs (the time projections),
    each added to h. With `seq` the projections read [1, rows, 8] (q/k/v-like, not hoisted)."""
    sg = Subgraph("main")
    t = sg.add_tensor(Tensor("t", (1, rows, 8) if seq else (rows, 8)))
    x = sg.add_tensor(Tensor("x", (1, rows, 8) if seq else (rows, 8)))
    e = _relu(sg, t)
    h, _ = _fc(sg, x, rng.standard_normal((8, 8)).astype(np.float32), None)  # "conv1"
    s = _relu(sg, e)
    outs = []
    for _ in range(3):
        p, _ = _fc(sg, s, rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal(8).astype(np.float32),
                   f16=f16)
        y = sg.add_tensor(Tensor(f"add_{len(sg.ops)}", h.shape))
        sg.ops.append(Op(OpCode.of("ADD"), [h, p], [y], options_type=S.BuiltinOptions.AddOptions,
                         options=S.AddOptionsT()))
        outs.append(y)
    return _model(sg, [t, x], outs)


@pytest.mark.parametrize("f16", [False, True])
def test_few_row_projection_is_hoisted_before_the_conv(tmp_path, rng, f16):
    """The merged time projection, the SiLU it reads and (fp16) its weights' DEQUANTIZE move to just after the time
    embedding: before "conv1", so a GPU delegate can fold every ADD into the op that writes h. Parity unchanged."""
    model = _late_time_projection(rng, f16=f16)
    src = write_model(model, tmp_path / "src.tflite")
    assert merge_sibling_fcs(model) == 2
    dst = write_model(model, tmp_path / "dst.tflite")
    ops = read_model(dst).main.ops
    order = [op.type for op in ops]
    conv1 = next(i for i, op in enumerate(ops) if op.type == "FULLY_CONNECTED" and op.inputs[0].name == "x")
    merged = next(i for i, op in enumerate(ops) if op.type == "FULLY_CONNECTED" and op.inputs[1].shape[0] == 24)
    assert order[:2] == ["RELU", "RELU"]  # e, then the hoisted s
    assert merged == (3 if f16 else 2) and merged < conv1 and order[merged + 1:merged + 4] == ["SLICE"] * 3
    assert order[2] == ("DEQUANTIZE" if f16 else "FULLY_CONNECTED")  # the weights' DEQUANTIZE right before it
    assert all(i > conv1 for i, op in enumerate(ops) if op.type == "ADD")
    inputs = {"t": rng.standard_normal((1, 8)).astype(np.float32), "x": rng.standard_normal((1, 8)).astype(np.float32)}
    want, got = _run(src, inputs), _run(dst, inputs)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rows, seq", [(17, False), (1, True)])
def test_projections_of_many_rows_or_sequences_stay_in_place(rng, rows, seq):
    """Only a [rows <= HOIST_MAX_ROWS, C] input hoists: 17 rows, or a [1, S, C] sequence (q/k/v), keep the merged FC
    at its first sibling's position (after "conv1"): moving those would make large tensors live longer."""
    model = _late_time_projection(rng, f16=False, rows=rows, seq=seq)
    assert merge_sibling_fcs(model) == 2
    ops = model.main.ops
    conv1 = next(i for i, op in enumerate(ops) if op.type == "FULLY_CONNECTED" and op.inputs[0].name == "x")
    merged = next(i for i, op in enumerate(ops) if op.type == "FULLY_CONNECTED" and op.inputs[1].shape[0] == 24)
    assert [op.type for op in ops][:2] == ["RELU", "FULLY_CONNECTED"] and merged > conv1


def test_tiny_unet_time_projection_precedes_every_resnet_conv(tiny_export):
    """Tiny UNet: after `--fuse`, the merged time-embedding projection (the only merged FC with a bias) and all its
    SLICEs come before the first 3x3 conv of the first ResNet, i.e. right after the time embedding."""
    from sdconvert.rewrite.fuse import fuse

    model = read_model(tiny_export / "unet.tflite")
    fuse(model)
    ops = model.main.ops
    temb = [i for i, op in enumerate(ops) if op.type == "FULLY_CONNECTED" and len(op.inputs) > 2
            and op.inputs[2] is not None and "merged_fc" in op.outputs[0].name]
    assert len(temb) == 1
    slices = [i for i, op in enumerate(ops) if op.type == "SLICE" and op.inputs[0] is ops[temb[0]].outputs[0]]
    convs = [i for i, op in enumerate(ops) if op.type in ("CONV_2D", "SdConv2DWinograd")
             and "ResnetBlock2D_0" in op.outputs[0].name and "conv1" in op.outputs[0].name]
    assert len(slices) >= 4 and convs and max([temb[0], *slices]) < min(convs)
