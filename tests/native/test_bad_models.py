"""Issue 34's malformed-model cases, each through ``sdconvert inspect`` and ``sdlite bench`` on cpu, opencl and gl:
the same verdict everywhere, one line, never a crash or a traceback; and the delegate itself, without sdlite's
validator in front, survives what it is handed."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import flatbuffers
import pytest
from ai_edge_litert import schema_py_generated as S

from sdconvert.inspect import main as inspect_main
from sdlite.cli import main as sdlite_main
from sdlite.errors import SdliteError
from sdlite.tflite_info import read_model_info
from tflite_models import flex

BACKENDS = ("cpu", "opencl", "gl")


def _edit(src: Path, dst: Path, change: Callable[[S.ModelT], None]) -> Path:
    model = S.ModelT.InitFromPackedBuf(src.read_bytes(), 0)
    change(model)
    builder = flatbuffers.Builder(src.stat().st_size + (1 << 16))
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    dst.write_bytes(bytes(builder.Output()))
    return dst


def _tensor(model: S.ModelT, name_part: str) -> S.TensorT:
    sg = model.subgraphs[0]
    for i in sg.inputs:
        if name_part in sg.tensors[i].name.decode():
            return sg.tensors[i]
    raise AssertionError(name_part)


def _fused_op(model: S.ModelT, name: str) -> S.OperatorT:
    for op in model.subgraphs[0].operators:
        code = model.operatorCodes[op.opcodeIndex]
        if code.customCode is not None and code.customCode.decode() == name:
            return op
    raise AssertionError(name)


def _verdicts(capsys, path: Path) -> dict[str, tuple[int, str]]:
    """``{tool: (exit code, stderr)}`` for inspect and a one-run bench on each backend."""
    out = {"inspect": (inspect_main([str(path)]), capsys.readouterr().err)}
    for b in BACKENDS:
        rc = sdlite_main(["bench", str(path), "--backend", b, "--num_runs", "1", "--warmup_runs", "0",
                          "--delegate_options", "gemm_autotune:0" if b != "cpu" else ""])
        out[b] = (rc, capsys.readouterr().err)
    return out


def _assert_refused_everywhere(verdicts: dict[str, tuple[int, str]], reason: str, inspect_rc: int = 2) -> None:
    assert verdicts["inspect"][0] == inspect_rc, verdicts
    for tool, (rc, err) in verdicts.items():
        assert err.count("\n") == 1 and "Traceback" not in err, (tool, err)
        assert reason in err, (tool, err)
        if tool != "inspect":
            assert rc == 2 and err.startswith("sdlite: error: "), (tool, err)


def test_graph_output_minus_one(capsys, tiny_fused_winograd_models, tmp_path):
    """It crashed the cpu path (TFLite reads tensor -1) and gl (in ~Interpreter after the partition failed)."""
    for name in ("unet", "text_encoder"):
        src = tiny_fused_winograd_models / f"{name}.tflite"
        n = len(read_model_info(src).tensors)
        bad = _edit(src, tmp_path / f"{name}.tflite", lambda m: setattr(m.subgraphs[0], "outputs", [-1]))
        _assert_refused_everywhere(_verdicts(capsys, bad),
                                   f"subgraph 0 outputs: tensor index -1 out of range ({n} tensors)")


@pytest.mark.parametrize("backend", ["gl", "opencl"])
def test_delegate_alone_survives_a_graph_output_of_minus_one(tiny_fused_winograd_models, tmp_path, backend):
    """Without sdlite's validator (any LiteRT app): the GPU delegate declines the graph with an error status and the
    process lives on (it used to die in ~Interpreter)."""
    bad = _edit(tiny_fused_winograd_models / "text_encoder.tflite", tmp_path / "te.tflite",
                lambda m: setattr(m.subgraphs[0], "outputs", [-1]))
    code = (
        "import sys\nfrom ai_edge_litert.interpreter import Interpreter\nfrom sdlite import native\n"
        f"d = native.load({backend!r}, gemm_autotune=False, log_level='silent')\n"
        "try:\n"
        f"    it = Interpreter(model_path={str(bad)!r}, experimental_delegates=[d])\n"
        "    it.allocate_tensors()\n"
        "except (RuntimeError, ValueError) as e:\n"
        "    print('refused:', str(e).splitlines()[0][:200])\n"
        "print(native.stats(d)['claimed_nodes'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("refused: sdgpu: partitioning failed: a delegated partition would read or write "
                                  "tensor -1, which does not exist"), proc.stdout


def test_batch_zero_input(capsys, tiny_fused_winograd_models, tmp_path):
    """opencl / gl ran it (rc 0) while cpu refused it."""
    bad = _edit(tiny_fused_winograd_models / "unet.tflite", tmp_path / "unet.tflite",
                lambda m: setattr(_tensor(m, "sample"), "shape", [0, 4, 8, 8]))
    _assert_refused_everywhere(_verdicts(capsys, bad), "has the empty shape [0, 4, 8, 8] (a zero-sized activation")


def test_rank_four_encoder_hidden_states(capsys, tiny_fused_winograd_models, tmp_path):
    """opencl / gl ran it (rc 0) while cpu refused it."""
    def change(m: S.ModelT) -> None:
        t = _tensor(m, "encoder_hidden_states")
        t.shape = [1, *t.shape]
        t.shapeSignature = list(t.shape)

    bad = _edit(tiny_fused_winograd_models / "unet.tflite", tmp_path / "unet.tflite", change)
    _assert_refused_everywhere(_verdicts(capsys, bad), "(FULLY_CONNECTED): output tensor")


def test_fused_op_version_99(capsys, tiny_fused_winograd_models, tmp_path):
    """inspect refused it, every backend ran it: the delegate cannot see the opcode version through the C ABI, so
    the validator checks it from the file, with the delegate's own CheckOpHeader."""
    def change(m: S.ModelT) -> None:
        for code in m.operatorCodes:
            if code.customCode == b"SdGroupNorm":
                code.version = 99

    bad = _edit(tiny_fused_winograd_models / "unet.tflite", tmp_path / "unet.tflite", change)
    _assert_refused_everywhere(_verdicts(capsys, bad), "(SdGroupNorm): SdGroupNorm: version 99 is not supported "
                                                       "(expected 1)", inspect_rc=1)


def test_plausible_but_wrong_attention_options(capsys, tiny_fused_winograd_models, tmp_path):
    """inspect accepted heads=3 (the options decode), the runtime refused it (its shape rule)."""
    def change(m: S.ModelT) -> None:
        op = _fused_op(m, "SdAttention")
        import numpy as np

        op.customOptions = np.frombuffer(flex({"heads": 3, "head_dim": 8, "scale": 0.35}), dtype=np.uint8)

    bad = _edit(tiny_fused_winograd_models / "text_encoder.tflite", tmp_path / "te.tflite", change)
    verdicts = _verdicts(capsys, bad)
    _assert_refused_everywhere(verdicts, "SdAttention: heads*head_dim = 24 but Q/K/V last dims are 32/32/32",
                               inspect_rc=1)


def test_signature_tensor_that_is_not_an_input(capsys, tiny_fused_winograd_models, tmp_path):
    """runner.py failed with a traceback (IndexError: _Map_base::at)."""
    def change(m: S.ModelT) -> None:
        m.signatureDefs[0].inputs[0].tensorIndex = len(m.subgraphs[0].tensors) - 1

    bad = _edit(tiny_fused_winograd_models / "text_encoder.tflite", tmp_path / "te.tflite", change)
    _assert_refused_everywhere(_verdicts(capsys, bad), "signature 'serving_default' input")


@pytest.mark.parametrize("cut", [9, 100, 1000, 20_000, 100_000, 1_000_000])
def test_truncated_files_are_one_line_errors_for_the_readers(tiny_fused_winograd_models, tmp_path, cut):
    """sdlite.tflite_info raised struct.error / IndexError / TypeError on truncated or flipped files."""
    bad = tmp_path / "t.tflite"
    bad.write_bytes((tiny_fused_winograd_models / "unet.tflite").read_bytes()[:cut])
    with pytest.raises(SdliteError, match=r"t\.tflite: corrupt flatbuffer: .* runs past the end at byte \d+"):
        read_model_info(bad)
