"""``sdconvert inspect``: histogram + fused-op listing, JSON output, exit codes for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sdconvert.graph import Model, Op, OpCode, SignatureDef, Subgraph, Tensor, write_model
from sdconvert.inspect import main
from sdconvert.ops import get
from sdconvert.ops.attention import AttentionAttrs
from sdconvert.ops.gelu import GeluAttrs
from sdconvert.rewrite import fuse_model


def _fused_model(path: Path, gelu_options: bytes | None = None) -> Path:
    sg = Subgraph("main")
    q, k, v = (sg.add_tensor(Tensor(n, (1, 6, 8))) for n in "qkv")
    o, y = sg.add_tensor(Tensor("o", (1, 6, 8))), sg.add_tensor(Tensor("y", (1, 6, 8)))
    att = get("SdAttention")
    gelu = get("SdGelu")
    sg.ops = [
        Op(OpCode.of(att.name), [q, k, v], [o], custom_options=att.encode(AttentionAttrs(2, 4, 0.5, causal=True))),
        Op(
            OpCode.of(gelu.name),
            [o],
            [y],
            custom_options=gelu_options if gelu_options is not None else gelu.encode(GeluAttrs("tanh")),
        ),
    ]
    sg.inputs, sg.outputs = [q, k, v], [y]
    return write_model(
        Model([sg], [SignatureDef("serving_default", sg, [("q", q), ("k", k), ("v", v)], [("y", y)])]), path
    )


def test_lists_histogram_and_fused_ops(tmp_path, capsys):
    path = _fused_model(tmp_path / "m.tflite")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 ops" in out and "signature serving_default: q[1, 6, 8], k[1, 6, 8], v[1, 6, 8] -> y[1, 6, 8]" in out
    assert "SdAttention heads=2 head_dim=4 scale=0.5 causal=true variant=partial_softmax" in out
    assert "SdGelu approximate=tanh" in out
    assert "fused ops (2):" in out


def test_json_output(tmp_path, capsys):
    path = _fused_model(tmp_path / "m.tflite")
    assert main([str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["histogram"] == {"SdAttention": 1, "SdGelu": 1}
    assert info["fused"][0]["attrs"] == {
        "heads": 2,
        "head_dim": 4,
        "scale": 0.5,
        "causal": True,
        "variant": "partial_softmax",
    }
    assert info["invalid_fused"] == 0


def test_invalid_options_are_listed_and_exit_1(tmp_path, capsys):
    from flatbuffers import flexbuffers

    bad = bytes(flexbuffers.Dumps({"approximate": "cubic"}))
    path = _fused_model(tmp_path / "m.tflite", gelu_options=bad)
    assert main([str(path)]) == 1
    cap = capsys.readouterr()
    # the delegate's own reason: what the runtime says when it refuses this op
    assert "SdGelu INVALID: SdGelu: attribute 'approximate' = 'cubic' is not one of none|tanh|quick" in cap.out
    assert "1 fused op(s) with invalid options" in cap.err


@pytest.mark.parametrize("content", [None, b"", b"not a model at all, just text" * 3])
def test_unreadable_files_exit_2_with_one_line(tmp_path, capsys, content):
    path = tmp_path / "x.tflite"
    if content is not None:
        path.write_bytes(content)
    assert main([str(path)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("sdconvert inspect: error: ") and cap.err.count("\n") == 1


def test_usage_error_exits_2(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err


def test_inspect_a_fused_tiny_model(tiny_export, tmp_path, capsys):
    fuse_model(tiny_export / "text_encoder.tflite", tmp_path / "t.tflite")
    assert main([str(tmp_path / "t.tflite"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["histogram"]["SdAttention"] == 2 and info["histogram"]["SdGelu"] == 2
    assert all(f["attrs"]["causal"] for f in info["fused"] if f["op"] == "SdAttention")
    assert np.prod(info["fused"][0]["outputs"][0]) > 0


def test_inspect_a_folder(tiny_export, tmp_path, capsys):
    """A conversion's output folder is inspected model by model (it used to say "no such file")."""
    assert main([str(tiny_export)]) == 0
    out = capsys.readouterr().out
    headers = [line.split(":")[0] for line in out.splitlines() if line.endswith(" ops") and "bytes" in line]
    assert headers == [str(tiny_export / f"{n}.tflite") for n in ("text_encoder", "unet", "vae_decoder", "vae_encoder")]
    assert main([str(tiny_export), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["folder"] == str(tiny_export) and data["invalid_fused"] == 0
    assert [Path(m["file"]).name for m in data["models"]] == [Path(h).name for h in headers]
    assert main([str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"sdconvert inspect: error: {tmp_path}: folder has no .tflite files\n"
    assert main([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err == f"sdconvert inspect: error: {tmp_path / 'nothing'}: no such file or folder\n"


def test_a_closed_pipe_ends_quietly(tiny_export):
    """`sdconvert inspect ... | head`: the reader leaves early; no BrokenPipeError traceback, exit status 141."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import sys; from sdconvert.cli import main; sys.exit(main())",
                             "inspect", str(tiny_export / "unet.tflite")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child writes anything: its first write finds no reader
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""


def test_without_the_native_library_options_are_judged_by_opspec(tmp_path, capsys, monkeypatch):
    """No delegate built: the fused ops' options are still checked (``OpSpec.decode``, which the C++ parsers mirror),
    and inspect says that the shape rules were not applied."""
    from flatbuffers import flexbuffers

    import sdlite.model_check

    monkeypatch.setattr(sdlite.model_check, "native_op_checker", lambda: (None, "not checked: no library"))
    path = _fused_model(tmp_path / "m.tflite", gelu_options=bytes(flexbuffers.Dumps({"approximate": "cubic"})))
    assert main([str(path)]) == 1
    cap = capsys.readouterr()
    assert "SdGelu INVALID: SdGelu: approximate must be one of" in cap.out
    assert "(checked by: sdconvert.ops, without shape rules (not checked: no library))" in cap.out
