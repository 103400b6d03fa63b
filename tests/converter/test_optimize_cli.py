"""``sdconvert optimize``: the graph stages on an existing export (file and folder), same results as a ``--fuse``
conversion, delegate parity with the plain model, one-line errors, atomic output.

Also checks the conversion's memory order: the torch module of a model is released before its graph stages and
its .tflite run (so a fused SD1.5 verify never holds the torch weights next to the interpreter's copy).
"""
from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sdconvert.cli import main as sdconvert_main
from sdconvert.configs import TINY
from sdconvert.export.optimize import GraphOptions
from sdconvert.export.verify import run_tflite
from sdconvert.optimize_cli import main
from sdconvert.rewrite import expected_sites
from sdlite import native
from sdlite.tflite_info import read_model_info

# fused op -> the rules that emit it (LayerNorms become one-group SdGroupNorms)
FUSED_OPS = {"SdAttention": ("attention",), "SdGelu": ("gelu",), "SdGroupNorm": ("group_norm", "layer_norm")}
TINY_UNET_SITES = {"attention": 14, "gelu": 7, "group_norm": 30, "layer_norm": 21}  # 21 = 7 transformer blocks x 3


def _fused_ops(sites: dict[str, int]) -> dict[str, int]:
    return {op: sum(sites[r] for r in rules) for op, rules in FUSED_OPS.items()}


@pytest.fixture(scope="module")
def unet_inputs(tiny_export: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    unet = json.loads((tiny_export / "manifest.json").read_text())["models"]["unet"]
    shapes = {i["name"]: i["shape"] for i in unet["inputs"]}
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    feeds["timestep"] = np.array([321.0], np.float32)
    return feeds


@pytest.fixture(scope="module")
def fused_conversion(tmp_path_factory) -> dict[str, Any]:
    """``sdconvert --random-weights tiny --models unet --fuse --winograd 4 --verify``, recording whether the torch UNet
    was still alive when the graph stages and the .tflite run started."""
    import sdconvert.export.convert as convert

    seen: dict[str, Any] = {"modules": {}}
    real_load, real_optimize, real_run = convert._load, convert.optimize, convert.verify.run_tflite

    def load(opts):  # noqa: ANN001, ANN202
        loaded = real_load(opts)
        seen["modules"] = {k: weakref.ref(m) for k, m in loaded.modules.items()}
        return loaded

    def optimize(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen["unet_alive_at_graph"] = seen["modules"]["unet"]() is not None
        return real_optimize(*args, **kwargs)

    def run_tflite(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen["unet_alive_at_tflite"] = seen["modules"]["unet"]() is not None
        return real_run(*args, **kwargs)

    out = tmp_path_factory.mktemp("fused-conv") / "tiny-unet"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(convert, "_load", load)
        mp.setattr(convert, "optimize", optimize)
        mp.setattr(convert.verify, "run_tflite", run_tflite)
        res = convert.run(convert.ConvertOptions(out=out, random_weights="tiny", models=("unet",), verify=True,
                                                 quiet=True, graph=GraphOptions(fuse=True, winograd="4")))
    assert res.ok, res.parity
    return {"out": out, "manifest": res.manifest, **seen}


def _optimize(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def test_fuse_counts_and_table_match_a_fused_conversion(tiny_export, fused_conversion, tmp_path, capsys):
    out = tmp_path / "unet-fused.tflite"
    rc, stdout, _ = _optimize(capsys, str(tiny_export / "unet.tflite"), "--fuse", "-o", str(out))
    assert rc == 0 and out.is_file()
    conv = fused_conversion["manifest"]["fusion"]["unet"]
    assert conv["counts"] == TINY_UNET_SITES == expected_sites(TINY)["unet"]
    # the table sdconvert --fuse prints: "unet: N -> M ops" then one row per rule
    lines = stdout.splitlines()
    assert lines[0] == f"unet: {conv['ops_before']} -> {conv['ops_after']} ops"
    fit = conv["fit_residual_max"]  # the norm rules' own numeric check: worst residual of the accepted sites
    assert set(fit) == {"group_norm", "layer_norm"} and all(0 <= v <= 1e-6 for v in fit.values())
    assert lines[1:5] == [f"  {'attention':<24}{14:>6}", f"  {'gelu':<24}{7:>6}",
                          f"  {'group_norm':<24}{30:>6}   fit residual <= {fit['group_norm']:.1e}",
                          f"  {'layer_norm':<24}{21:>6}   fit residual <= {fit['layer_norm']:.1e}"]
    assert "Winograd plan" not in stdout
    hist = read_model_info(out).op_histogram
    assert {op: hist.get(op, 0) for op in FUSED_OPS} == _fused_ops(TINY_UNET_SITES)
    # same graph as the conversion's fused UNet except for the Winograd convs the conversion also made
    conv_hist = dict(fused_conversion["manifest"]["models"]["unet"]["op_histogram"])
    n_wino = conv_hist.pop("SdConv2DWinograd")
    conv_hist["CONV_2D"] += n_wino
    assert hist == conv_hist


def test_fused_model_matches_plain_through_delegate(tiny_export, tmp_path, unet_inputs):
    src = tiny_export / "unet.tflite"
    out = tmp_path / "unet-fused.tflite"
    assert main([str(src), "--fuse", "-q", "-o", str(out)]) == 0
    plain = run_tflite(src, unet_inputs)["noise_pred"]
    delegate = native.load("cpu")
    fused = run_tflite(out, unet_inputs, delegates=[delegate])["noise_pred"]
    # 51 SdGroupNorm = 30 GroupNorms + 21 LayerNorms
    assert native.stats(delegate)["claimed_by_op"] == {"SdAttention": 14, "SdGelu": 7, "SdGroupNorm": 51}
    assert _rel(fused, plain) <= 1e-5


def test_fuse_winograd_json_and_parity(tiny_export, fused_conversion, tmp_path, unet_inputs, capsys):
    src = tiny_export / "unet.tflite"
    out = tmp_path / "unet-fw.tflite"
    rc, stdout, _ = _optimize(capsys, str(src), "--fuse", "--winograd", "4", "--json", "-o", str(out))
    assert rc == 0
    info = json.loads(stdout)
    unet = info["models"]["unet"]
    assert info["options"]["winograd"] == "4" and info["out"] == str(out)
    assert unet["fusion"]["counts"] == TINY_UNET_SITES
    summary = unet["winograd"]["summary"]
    assert summary == fused_conversion["manifest"]["winograd"]["unet"]["summary"]
    assert summary["decisions"]["F4"] == summary["suitable"] == 26
    assert unet["num_ops"] == len(read_model_info(out).ops)
    assert unet["num_ops_before"] == len(read_model_info(src).ops) > unet["num_ops"]
    assert read_model_info(out).op_histogram["SdConv2DWinograd"] == 26
    plain = run_tflite(src, unet_inputs)["noise_pred"]
    got = run_tflite(out, unet_inputs, delegates=[native.load("cpu")])["noise_pred"]
    assert 0 < _rel(got, plain) <= 1e-4  # fp32 Winograd tolerance (see tests/converter/test_sd15_blocks.py)


def test_tune_times_through_the_delegate_the_cli_passes(tiny_export, tmp_path, capsys):
    """--tune: the command line hands the tuner the delegate-backed timer; the plan then rests on measurements."""
    rc, stdout, _ = _optimize(capsys, str(tiny_export / "unet.tflite"), "--winograd", "auto", "--device-profile", "cpu",
                              "--tune", "--json", "-o", str(tmp_path / "t.tflite"))
    assert rc == 0
    convs = json.loads(stdout)["models"]["unet"]["winograd"]["convs"]
    suitable = [c for c in convs if c["suitable"]]
    assert len(suitable) == 26 and all(c["source"] == "measured" for c in suitable)


def test_winograd_plan_table_printed(tiny_export, tmp_path, capsys):
    rc, stdout, _ = _optimize(capsys, str(tiny_export / "unet.tflite"), "--winograd", "2",
                              "-o", str(tmp_path / "w.tflite"))
    assert rc == 0
    assert "unet Winograd plan:" in stdout and "| # | conv |" in stdout
    assert stdout.count("| F2 |") == 26  # the decision column of every suitable conv
    assert "attention" not in stdout  # no fusion table without --fuse


def test_phone_preset_fuses_with_the_mobile_winograd_plan(tiny_export, tmp_path, capsys):
    """--phone = --fuse --winograd auto on the adreno740 profile (its plan counts fp16 weight bytes)."""
    rc, stdout, _ = _optimize(capsys, str(tiny_export / "unet.tflite"), "--phone", "--json",
                              "-o", str(tmp_path / "p.tflite"))
    assert rc == 0
    info = json.loads(stdout)
    assert (info["options"]["fuse"], info["options"]["winograd"], info["options"]["device_profile"]) == (
        True, "auto", "adreno740")
    assert info["models"]["unet"]["fusion"]["counts"] == TINY_UNET_SITES


def test_dispatched_by_the_main_cli(tiny_export, tmp_path, capsys):
    out = tmp_path / "u.tflite"
    assert sdconvert_main(["optimize", str(tiny_export / "unet.tflite"), "--fuse", "-q", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""  # -q
    assert read_model_info(out).op_histogram["SdAttention"] == 14
    assert sdconvert_main(["optimize", str(tmp_path / "missing.tflite"), "--fuse", "-o", str(out)]) == 2


def test_folder_is_optimized_with_manifest(tiny_export, tiny_fused_export):
    from sdlite.manifest import load_manifest

    m = json.loads((tiny_fused_export / "manifest.json").read_text())
    base = json.loads((tiny_export / "manifest.json").read_text())
    sites = expected_sites(TINY)
    assert sorted(m["fusion"]) == sorted(base["models"])
    for name, entry in m["models"].items():
        assert m["fusion"][name]["counts"] == sites[name]
        hist = read_model_info(tiny_fused_export / entry["file"]).op_histogram
        assert entry["op_histogram"] == hist and entry["num_ops"] < base["models"][name]["num_ops"]
        assert {op: hist.get(op, 0) for op in FUSED_OPS} == _fused_ops(sites[name])
        assert entry["inputs"] == base["models"][name]["inputs"] and entry["outputs"] == base["models"][name]["outputs"]
    assert m["optimized"]["source"] == str(tiny_export.absolute()) and m["optimized"]["options"]["fuse"] is True
    assert m["winograd"] == {}
    vocab = Path("tokenizer") / "vocab.json"
    assert (tiny_fused_export / vocab).read_bytes() == (tiny_export / vocab).read_bytes()
    load_manifest(tiny_fused_export).verify_checksums()  # sdlite accepts it as it is
    assert not list(tiny_fused_export.parent.glob(".*tmp-*"))


def test_conversion_releases_torch_module_before_graph_and_tflite(fused_conversion):
    assert fused_conversion["unet_alive_at_graph"] is False
    assert fused_conversion["unet_alive_at_tflite"] is False
    assert fused_conversion["manifest"]["parity"][0]["rel"] <= 1e-4


def test_fused_conversion_verify_records_the_per_op_table(fused_conversion):
    """``sdconvert --fuse --winograd 4 --verify``: one row per Sd* op of the written UNet in the manifest, each with
    its CPU error against the unfused graph; the unfused copy the check needed is gone."""
    m = fused_conversion["manifest"]
    table = m["op_errors"]["unet"]
    hist = m["models"]["unet"]["op_histogram"]
    counts: dict[str, int] = {}
    for row in table["rows"]:
        counts[row["op"]] = counts.get(row["op"], 0) + 1
        assert "problem" not in row and row["errors"]["cpu"]["rel"] <= 2e-5, row
    assert counts == {op: n for op, n in hist.items() if op.startswith("Sd")}
    assert counts == {**_fused_ops(TINY_UNET_SITES), "SdConv2DWinograd": 26}
    assert table["backends"] == ["cpu"] and table["end_to_end"]["cpu"]["noise_pred"]["rel"] <= 1e-4
    assert [s["stage"] for s in m["stages"]] == ["load", "export unet", "graph unet", "op check unet", "verify unet"]
    assert sorted(p.name for p in fused_conversion["out"].iterdir()) == [
        "conversion.log", "manifest.json", "scheduler", "tokenizer", "unet.tflite"]


# ---------------------------------------------------------------- errors: one line on stderr, exit 2, nothing written

def _one_line_error(rc: int, stdout: str, stderr: str, needle: str) -> None:
    assert rc == 2 and stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sdconvert optimize: error: ") and needle in lines[0], stderr


def test_missing_input(tmp_path, capsys):
    rc, out, err = _optimize(capsys, str(tmp_path / "nope.tflite"), "--fuse", "-o", str(tmp_path / "o.tflite"))
    _one_line_error(rc, out, err, "nope.tflite: no such file or folder")
    assert not (tmp_path / "o.tflite").exists()


@pytest.mark.parametrize(("content", "needle"), [
    (b"hello, not a model", "is not a .tflite model (no TFL3 identifier)"),
    (b"", "is empty, not a .tflite model"),
])
def test_not_a_tflite(tmp_path, capsys, content: bytes, needle: str):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(content)
    rc, out, err = _optimize(capsys, str(bad), "--fuse", "-o", str(tmp_path / "o.tflite"))
    _one_line_error(rc, out, err, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tflite"]


def test_truncated_tflite(tiny_export, tmp_path, capsys):
    bad = tmp_path / "trunc.tflite"
    bad.write_bytes((tiny_export / "unet.tflite").read_bytes()[:4096])
    rc, out, err = _optimize(capsys, str(bad), "--fuse", "-o", str(tmp_path / "o.tflite"))
    _one_line_error(rc, out, err, "trunc.tflite")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trunc.tflite"]


def test_existing_output_needs_overwrite(tiny_export, tmp_path, capsys):
    out = tmp_path / "o.tflite"
    out.write_bytes(b"keep me")
    rc, stdout, err = _optimize(capsys, str(tiny_export / "unet.tflite"), "--fuse", "-o", str(out))
    _one_line_error(rc, stdout, err, "already exists; pass --overwrite to replace it")
    assert out.read_bytes() == b"keep me"
    assert main([str(tiny_export / "unet.tflite"), "--fuse", "-q", "--overwrite", "-o", str(out)]) == 0
    assert read_model_info(out).op_histogram["SdGroupNorm"] == 51  # 30 GroupNorms + 21 LayerNorms


def test_in_place_with_overwrite(tiny_export, tmp_path):
    f = tmp_path / "vae_decoder.tflite"
    f.write_bytes((tiny_export / "vae_decoder.tflite").read_bytes())
    assert main([str(f), "--fuse", "-q", "--overwrite", "-o", str(f)]) == 0
    assert read_model_info(f).op_histogram["SdGroupNorm"] == 22
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vae_decoder.tflite"]


@pytest.mark.parametrize(("args", "needle"), [
    ((), "nothing to do: pass --fuse and/or --winograd"),
    (("--winograd", "4", "--target", "litert"), "--winograd emits SdConv2DWinograd custom ops"),
    (("--fuse", "--device-profile", "toaster"), "unknown device profile 'toaster'"),
    (("--winograd", "auto", "--memory-budget", "lots"), "--memory-budget: cannot parse 'lots'"),
    (("--fuse", "--verify-backend", "gl"), "--verify-backend applies with --verify"),
    (("--phone", "--device-profile", "h200"), "--phone plans for --device-profile adreno740 and --target sdgpu"),
    (("--fuse", "--verify", "--verify-backend", "cpu,vulkan"),
     "--verify-backend takes a comma list of cpu, opencl, gl, got 'cpu,vulkan'"),
])
def test_bad_options(tiny_export, tmp_path, capsys, args: tuple[str, ...], needle: str):
    rc, out, err = _optimize(capsys, str(tiny_export / "unet.tflite"), *args, "-o", str(tmp_path / "o.tflite"))
    _one_line_error(rc, out, err, needle)
    assert not list(tmp_path.iterdir())


def test_folder_errors(tiny_export, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, out, err = _optimize(capsys, str(empty), "--fuse", "-o", str(tmp_path / "o"))
    _one_line_error(rc, out, err, "is not an sdconvert output folder (no manifest.json)")
    rc, out, err = _optimize(capsys, str(tiny_export), "--fuse", "-o", str(tmp_path / "o.tflite"))
    assert rc == 0  # a folder output may have any name
    rc, out, err = _optimize(capsys, str(tiny_export / "unet.tflite"), "--fuse", "-o", str(tmp_path / "o.tflite"))
    _one_line_error(rc, out, err, "already exists")
    rc, out, err = _optimize(capsys, str(tiny_export / "unet.tflite"), "--fuse", "--overwrite",
                             "-o", str(tmp_path / "o.tflite"))
    _one_line_error(rc, out, err, "is a folder; give a .tflite file path for this input")


def test_failure_mid_way_leaves_no_output(tiny_export, tmp_path, capsys, monkeypatch):
    import sdconvert.optimize_cli as cli
    from sdconvert.errors import UserError

    real = cli.optimize

    def failing(src, opts, say, dst=None):  # noqa: ANN001, ANN202
        real(src, opts, say, dst=dst)  # the temporary output is complete ...
        raise UserError("simulated failure")  # ... but the job fails before the rename

    monkeypatch.setattr(cli, "optimize", failing)
    rc, out, err = _optimize(capsys, str(tiny_export / "unet.tflite"), "--fuse", "-o", str(tmp_path / "f.tflite"))
    _one_line_error(rc, out, err, "simulated failure")
    rc, out, err = _optimize(capsys, str(tiny_export), "--fuse", "-q", "-o", str(tmp_path / "folder"))
    _one_line_error(rc, out, err, "simulated failure")  # -q: no progress lines, the error still shows
    assert not list(tmp_path.iterdir())
