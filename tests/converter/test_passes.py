"""``cancel_transpose_pairs`` (run by every ``--fuse`` target): TRANSPOSE -> TRANSPOSE chains that compose to the
identity are bypassed. Parity runs the written models on the LiteRT CPU interpreter."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from ai_edge_litert import schema_py_generated as S
from ai_edge_litert.interpreter import Interpreter

from sdconvert.graph import Op, OpCode, Subgraph, Tensor, read_model, write_model
from sdconvert.rewrite.passes import cancel_transpose_pairs

from ir_graphs import relu as _relu
from ir_graphs import single_subgraph_model as _model


def _transpose(sg: Subgraph, x: Tensor, perm: list[int]) -> Tensor:
    y = sg.add_tensor(Tensor(f"t_{len(sg.ops)}", tuple(x.shape[p] for p in perm)))
    sg.ops.append(Op(OpCode.of("TRANSPOSE"), [x, sg.new_constant("perm", np.array(perm, np.int32))], [y],
                     options_type=S.BuiltinOptions.TransposeOptions, options=S.TransposeOptionsT()))
    return y


def _run(path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    return Interpreter(model_path=str(path)).get_signature_runner()(x=x)


def test_inverse_pairs_cancel_and_others_stay(tmp_path):
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (1, 3, 4, 5)))
    a = _relu(sg, x)
    back = _transpose(sg, _transpose(sg, a, [0, 2, 3, 1]), [0, 3, 1, 2])   # NCHW -> NHWC -> NCHW: cancels
    y1 = _relu(sg, back)
    same = _transpose(sg, _transpose(sg, a, [0, 2, 3, 1]), [0, 2, 3, 1])   # composes to [0, 3, 1, 2]: stays
    y2 = _relu(sg, same)
    inner = _transpose(sg, a, [0, 1, 3, 2])                                # read twice: only the outer goes
    y3 = _relu(sg, _transpose(sg, inner, [0, 1, 3, 2]))
    y4 = _relu(sg, inner)
    y5 = _transpose(sg, _transpose(sg, a, [1, 0, 2, 3]), [1, 0, 2, 3])     # a model output: must survive
    model = _model(sg, [x], [y1, y2, y3, y4, y5])
    src = write_model(model, tmp_path / "src.tflite")
    assert model.op_histogram()["TRANSPOSE"] == 8
    assert cancel_transpose_pairs(model) == 2
    dst = write_model(model, tmp_path / "dst.tflite")
    ops = read_model(dst).main.ops
    assert read_model(dst).op_histogram()["TRANSPOSE"] == 8 - 2 - 1  # pair 1 whole, pair 3's outer
    relus = [op for op in ops if op.type == "RELU"]
    assert relus[1].inputs[0] is relus[0].outputs[0]  # y1 reads relu(x) directly
    xv = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float32)
    want, got = _run(src, xv), _run(dst, xv)
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_fused_tiny_unet_has_no_cancelling_pairs_left(tiny_export, tmp_path):
    from sdconvert.rewrite import fuse_model

    rep = fuse_model(tiny_export / "unet.tflite", tmp_path / "unet.tflite")
    assert rep.passes["transpose_pairs_cancelled"] == 7  # one per up-block ResNet with a shortcut conv
    main = read_model(tmp_path / "unet.tflite").main
    for op in main.ops:
        if op.type == "TRANSPOSE" and op.inputs[0].producer is not None:
            assert op.inputs[0].producer.type != "TRANSPOSE"
    assert rep.histogram_after.get("TRANSPOSE", 0) == 2  # the NCHW <-> NHWC at the model's input and output
