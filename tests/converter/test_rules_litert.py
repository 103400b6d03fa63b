"""``--target litert``: no custom ops, no BROADCAST_TO, same outputs in the stock interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, Tensor, read_model, write_model
from sdconvert.graph.schema import S
from sdconvert.rewrite import fuse_model, remove_broadcasts
from sdconvert.rewrite.semantic import check_fused

MODELS = ("unet", "vae_decoder", "vae_encoder", "text_encoder")


def _run(path: Path, seed: int = 5) -> dict[str, np.ndarray]:
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    rng = np.random.default_rng(seed)
    feeds = {}
    for n, d in runner.get_input_details().items():
        if np.issubdtype(d["dtype"], np.integer):
            feeds[n] = rng.integers(0, 49406, d["shape"]).astype(d["dtype"])
        else:
            feeds[n] = rng.standard_normal(d["shape"]).astype(d["dtype"])
    return runner(**feeds)


@pytest.mark.parametrize("model", MODELS)
def test_litert_target(tiny_export, tmp_path, model):
    src = tiny_export / f"{model}.tflite"
    before = read_model(src).op_histogram()
    rep = fuse_model(src, tmp_path / "l.tflite", target="litert")
    after = read_model(tmp_path / "l.tflite").op_histogram()
    assert "BROADCAST_TO" not in after
    assert not any(k.startswith("Sd") or k == "STABLEHLO_COMPOSITE" for k in after)
    # exactly the GroupNorms that used BROADCAST_TO (C/G > 1: two per norm) were re-emitted
    assert rep.counts["group_norm_stock"] == before.get("BROADCAST_TO", 0) // 2
    a, b = _run(src), _run(tmp_path / "l.tflite")
    for k in a:
        assert np.abs(a[k] - b[k]).max() <= 1e-5 * np.abs(a[k]).max(), k
    if rep.fused:
        assert max(r.max_rel_err for r in check_fused(src, rep.fused)) <= 1e-5


def test_broadcast_to_folds_into_elementwise_consumer(tmp_path):
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (1, 4, 1)))
    y = sg.add_tensor(Tensor("y", (2, 4, 3)))
    bt = sg.add_tensor(Tensor("bt", (2, 4, 3)))
    out = sg.add_tensor(Tensor("out", (2, 4, 3)))
    sg.ops = [
        Op(OpCode.of("BROADCAST_TO"), [x, sg.new_constant("shape", np.array([2, 4, 3], np.int32))], [bt]),
        Op(OpCode.of("MUL"), [y, bt], [out], options_type=S.BuiltinOptions.MulOptions, options=S.MulOptionsT()),
    ]
    sg.inputs, sg.outputs = [x, y], [out]
    m = Model([sg], [SignatureDef("serving_default", sg, [("x", x), ("y", y)], [("out", out)])])
    assert remove_broadcasts(m) == 1
    assert [op.type for op in m.main.ops] == ["MUL"] and m.main.ops[0].inputs[1] is x
    runner = Interpreter(model_path=str(write_model(m, tmp_path / "b.tflite"))).get_signature_runner()
    xv = np.arange(4, dtype=np.float32).reshape(1, 4, 1)
    yv = np.ones((2, 4, 3), np.float32)
    assert np.array_equal(runner(x=xv, y=yv)["out"], yv * xv)
