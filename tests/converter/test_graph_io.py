"""Graph IR: bit-identical round trips (inline and >2 GB offset-buffer layout), edits, toposort, cleanup, bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as S
from ai_edge_litert.interpreter import Interpreter

from sdconvert.graph import (
    Model,
    ModelFormatError,
    Op,
    OpCode,
    SignatureDef,
    Subgraph,
    Tensor,
    parse_model,
    read_model,
    write_model,
)

MODELS = ("unet", "vae_decoder", "vae_encoder", "text_encoder")


def _run(path: Path, seed: int = 0) -> tuple[dict, dict[str, np.ndarray]]:
    it = Interpreter(model_path=str(path))
    runner = it.get_signature_runner()
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, d in runner.get_input_details().items():
        if np.issubdtype(d["dtype"], np.integer):
            feeds[name] = rng.integers(0, 49406, d["shape"]).astype(d["dtype"])
        else:
            feeds[name] = rng.standard_normal(d["shape"]).astype(d["dtype"])
    sig = {
        k: {
            "in": {n: (list(d["shape"]), str(d["dtype"])) for n, d in runner.get_input_details().items()},
            "out": {n: (list(d["shape"]), str(d["dtype"])) for n, d in runner.get_output_details().items()},
        }
        for k in it.get_signature_list()
    }
    return sig, runner(**feeds)


@pytest.mark.parametrize("model", MODELS)
def test_round_trip_is_bit_identical(tiny_export, tmp_path, model):
    src = tiny_export / f"{model}.tflite"
    dst = write_model(read_model(src), tmp_path / "rt.tflite")
    sig_a, out_a = _run(src)
    sig_b, out_b = _run(dst)
    assert sig_a == sig_b
    assert out_a.keys() == out_b.keys()
    for k in out_a:
        assert np.array_equal(out_a[k], out_b[k]), k


def test_offset_buffer_layout_round_trip(tiny_export, tmp_path):
    src = tiny_export / "vae_decoder.tflite"
    dst = write_model(read_model(src), tmp_path / "big.tflite", offset_buffers=True)
    raw = S.ModelT.InitFromPackedBuf(dst.read_bytes(), 0)
    data_buffers = [b for b in raw.buffers[1:]]
    assert data_buffers and all(
        b.data is None and b.offset > 1 and b.offset % 64 == 0 and b.size > 0 for b in data_buffers
    )
    _, out_a = _run(src)
    _, out_b = _run(dst)
    for k in out_a:
        assert np.array_equal(out_a[k], out_b[k])
    # and it reads back (offset buffers are resolved into views of the file)
    again = write_model(read_model(dst), tmp_path / "small.tflite", offset_buffers=False)
    _, out_c = _run(again)
    for k in out_a:
        assert np.array_equal(out_a[k], out_c[k])


def test_inline_buffers_are_16_byte_aligned(tiny_export, tmp_path):
    dst = write_model(read_model(tiny_export / "text_encoder.tflite"), tmp_path / "a.tflite")
    buf = dst.read_bytes()
    m = S.Model.GetRootAs(buf, 0)
    checked = 0
    for i in range(1, m.BuffersLength()):
        b = m.Buffers(i)
        if b.DataLength():
            pos = b._tab.Vector(b._tab.Offset(4))
            assert pos % 16 == 0
            checked += 1
    assert checked > 10


def test_constants_are_zero_copy_views(tiny_export):
    m = read_model(tiny_export / "unet.tflite")
    consts = [t for sg in m.subgraphs for t in sg.tensors if t.is_constant]
    assert consts and all(not t.buffer.data.flags.owndata for t in consts)
    w = max(consts, key=lambda t: t.numel)
    assert w.numpy().dtype == np.float32 and w.numpy().shape == w.shape


def _tiny_graph() -> tuple[Model, dict[str, Tensor]]:
    """x[1,4] -> ADD(x, c) -> a -> MUL(a, a) -> y ; plus a dead LOGISTIC(x) -> d."""
    sg = Subgraph("main")
    x = sg.add_tensor(Tensor("x", (1, 4)))
    c = sg.new_constant("c", np.arange(4, dtype=np.float32).reshape(1, 4))
    a, y, d = (sg.add_tensor(Tensor(n, (1, 4))) for n in ("a", "y", "d"))
    sg.ops = [
        Op(OpCode.of("ADD"), [x, c], [a], options_type=S.BuiltinOptions.AddOptions, options=S.AddOptionsT()),
        Op(OpCode.of("LOGISTIC"), [x], [d]),
        Op(OpCode.of("MUL"), [a, a], [y], options_type=S.BuiltinOptions.MulOptions, options=S.MulOptionsT()),
    ]
    sg.inputs, sg.outputs = [x], [y]
    m = Model([sg], [SignatureDef("serving_default", sg, [("x", x)], [("y", y)])])
    return m, dict(x=x, c=c, a=a, y=y, d=d)


def _eval(path: Path, x: np.ndarray) -> np.ndarray:
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    return runner(x=x)["y"]


def test_producers_and_consumers_stay_in_sync():
    m, t = _tiny_graph()
    add, log, mul = m.main.ops
    assert t["a"].producer is add and t["a"].consumers == [mul]
    assert t["x"].consumers == [add, log]
    mul.inputs[1] = t["x"]
    assert t["a"].consumers == [mul] and mul in t["x"].consumers
    mul.inputs = [t["x"], t["x"]]
    assert t["a"].consumers == []
    m.main.remove_ops([log])
    assert t["d"].producer is None and t["x"].consumers == [add, mul]
    with pytest.raises(ValueError, match="already produced"):
        Op(OpCode.of("NEG"), [t["x"]], [t["y"]])


def test_replace_uses_updates_outputs_and_consumers():
    m, t = _tiny_graph()
    sg = m.main
    n = sg.replace_uses(t["a"], t["x"])
    assert n == 2 and t["a"].consumers == [] and sg.ops[2].inputs == [t["x"], t["x"]]
    assert sg.replace_uses(t["y"], t["a"]) == 1 and sg.outputs == [t["a"]]


def test_toposort_restores_order_and_detects_cycles(tmp_path):
    m, t = _tiny_graph()
    sg = m.main
    sg.ops.reverse()
    assert sg.validate()  # MUL before ADD: used before produced
    sg.toposort()
    assert sg.validate() == []
    x = np.array([[1, 2, 3, 4]], np.float32)
    assert np.allclose(_eval(write_model(m, tmp_path / "t.tflite"), x), (x + np.arange(4)) ** 2)
    add = next(o for o in sg.ops if o.type == "ADD")
    add.inputs[0] = t["y"]  # ADD(y, c) while y depends on ADD: a cycle
    with pytest.raises(ValueError, match="cycle"):
        sg.toposort()


def test_cleanup_removes_dead_ops_tensors_and_buffers(tmp_path):
    m, t = _tiny_graph()
    sg = m.main
    dead_const = sg.new_constant("unused", np.ones(1000, np.float32))
    assert m.cleanup() == 1  # the LOGISTIC
    assert [o.type for o in sg.ops] == ["ADD", "MUL"]
    assert t["d"] not in sg.tensors and dead_const not in sg.tensors
    path = write_model(m, tmp_path / "c.tflite")
    raw = S.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    assert len(raw.buffers) == 2  # sentinel + the constant c
    assert len(raw.subgraphs[0].tensors) == 4
    x = np.ones((1, 4), np.float32)
    assert np.allclose(_eval(path, x), (x + np.arange(4)) ** 2)


def test_unreferenced_subgraphs_are_dropped_and_references_remapped(tmp_path):
    m, _ = _tiny_graph()
    orphan = Subgraph("orphan")
    m.subgraphs.insert(1, orphan)
    m.cleanup()
    assert m.subgraphs == [m.main]


def test_new_ops_round_trip_with_options(tmp_path):
    m, t = _tiny_graph()
    sg = m.main
    z = sg.add_tensor(Tensor("z", (4, 1)))
    shape = sg.new_constant("shape", np.array([4, 1], np.int32))
    opts = S.ReshapeOptionsT()
    opts.newShape = [4, 1]
    sg.insert_op(
        Op(OpCode.of("RESHAPE"), [t["y"], shape], [z], options_type=S.BuiltinOptions.ReshapeOptions, options=opts)
    )
    sg.outputs = [z]
    m.signatures[0].outputs = [("y", z)]
    path = write_model(m, tmp_path / "r.tflite")
    x = np.full((1, 4), 2.0, np.float32)
    assert _eval(path, x).shape == (4, 1)
    back = read_model(path)
    assert [o.type for o in back.main.ops] == ["ADD", "LOGISTIC", "MUL", "RESHAPE"]
    assert list(back.main.ops[-1].options.newShape) == [4, 1]


@pytest.mark.parametrize(
    "data, match",
    [
        (b"", "too small"),
        (b"\x00" * 64, "root offset"),
        (b"\x10\x00\x00\x00TFL3" + b"\xff" * 56, "corrupt|inconsistent"),
    ],
)
def test_bad_bytes_raise_one_line_errors(data, match):
    with pytest.raises(ModelFormatError, match=match) as e:
        parse_model(data)
    assert "\n" not in str(e.value)


def test_truncated_model_is_a_format_error(tiny_export, tmp_path):
    raw = (tiny_export / "text_encoder.tflite").read_bytes()
    (tmp_path / "t.tflite").write_bytes(raw[: len(raw) // 3])
    with pytest.raises(ModelFormatError):
        read_model(tmp_path / "t.tflite")
    with pytest.raises(ModelFormatError, match="cannot read"):
        read_model(tmp_path / "missing.tflite")
