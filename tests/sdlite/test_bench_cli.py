"""``sdlite bench`` on the tiny conversion: report shape, timing sanity, --compare ratios, op profiling."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from sdlite.bench.single_op import ModelCutter
from sdlite.cli import main
from sdlite.tflite_info import read_model_info

TIMINGS = re.compile(
    r"^Timings \(microseconds\): count=(\d+) first=(\d+) curr=(\d+) min=(\d+) max=(\d+) avg=([\d.]+) std=(\d+)$",
    re.M,
)
# exact run counts: benchmark_model's default minimum durations (--min_secs=1, --warmup_min_secs=0.5) turned off
RUNS = ["--num_runs", "5", "--warmup_runs", "1", "--num_threads", "1", "--min_secs", "0", "--warmup_min_secs", "0"]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def check_timings(out: str, expected_runs: int) -> list[float]:
    avgs = []
    for count, first, curr, lo, hi, avg, std in TIMINGS.findall(out):
        assert int(count) == expected_runs
        assert int(first) > 0 and int(curr) > 0 and int(lo) > 0
        assert int(lo) <= float(avg) + 1 and float(avg) <= int(hi) + 1  # printed values are rounded
        assert int(std) >= 0
        avgs.append(float(avg))
    return avgs


def section(out: str, title: str) -> list[str]:
    """Data rows of a report section: the lines after its column header, up to the next blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.fullmatch(rf"=+ {re.escape(title)} =+", line))
    rows = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        rows.append(line)
    return rows


def test_compare_two_backends(capsys, tiny_export: Path) -> None:
    unet = tiny_export / "unet.tflite"
    rc, out, err = run_cli(capsys, "bench", "--compare", f"{unet}@cpu", f"{unet}@litert-cpu", *RUNS)
    assert rc == 0, err
    assert out.count("INFO: Loaded model ") == 2 and "Backend: cpu (1 thread)" in out and "Backend: litert-cpu (1 thread)" in out
    avgs = check_timings(out, 5)
    assert len(avgs) == 2
    assert re.search(r"^Memory \(bytes\): weights=\d+ .* peak_activations_estimate=\d+", out, re.M)
    assert re.search(r"^Placement: xnnpack: \d+ ops in \d+ partitions", out, re.M)
    table = out[out.index("Comparison (baseline: first row)"):]
    rows = [line.split("\t")[1:] for line in table.splitlines()[2:] if line.strip()]
    assert [r[1].strip() for r in rows] == ["cpu", "litert-cpu"]
    ratios = [float(r[7].strip().rstrip("x")) for r in rows]
    assert ratios[0] == 1.0
    assert ratios[1] == pytest.approx(avgs[1] / avgs[0], abs=2e-3)
    speedup = float(rows[1][8].strip().rstrip("x"))
    assert speedup == pytest.approx(1 / ratios[1], rel=2e-3)


def test_compare_folders_per_model_json(capsys, tiny_export: Path) -> None:
    rc, out, _ = run_cli(capsys, "bench", "--compare", str(tiny_export), f"{tiny_export}@litert-cpu",
                         "--models", "vae_decoder,text_encoder", "--json", *RUNS)
    assert rc == 0
    data = json.loads(out)
    assert [(r["group"], r["backend"]) for r in data["results"]] == [
        ("text_encoder", "cpu"), ("vae_decoder", "cpu"), ("text_encoder", "litert-cpu"), ("vae_decoder", "litert-cpu")]
    for r in data["results"]:
        t = r["timings_us"]
        assert t["count"] == 5 and 0 < t["min"] <= t["avg"] <= t["max"]
        assert r["weight_bytes"] > 0 and r["num_ops"] == sum(r["op_histogram"].values())
    assert set(data["comparison"]) == {"text_encoder", "vae_decoder"}
    for rows in data["comparison"].values():
        assert rows[0]["ratio"] == 1.0 and rows[1]["ratio"] > 0


def test_op_profiling_sections(capsys, tiny_export: Path) -> None:
    path = tiny_export / "vae_decoder.tflite"
    info = read_model_info(path)
    rc, out, _ = run_cli(capsys, "bench", str(path), "--enable_op_profiling", "--top", "7", *RUNS)
    assert rc == 0
    sections = re.findall(r"^=+ (.+?) =+$", out, re.M)
    assert sections == ["Run Order", "Top by Computation Time", "Summary by node type"]
    assert "each node run alone as a one-node model" in out  # the method is stated, not hidden
    run_order, top, summary = (section(out, t) for t in sections)
    assert len(run_order) == len(info.ops)  # every node timed, in graph order
    assert [row.split("\t")[1].strip() for row in run_order] == [op.op_name for op in info.ops]
    assert len(top) == 7
    top_ms = [float(row.split("\t")[4]) for row in top]
    assert top_ms == sorted(top_ms, reverse=True)
    counts = {row.split("\t")[1].strip(): int(row.split("\t")[2]) for row in summary}
    assert counts == info.op_histogram
    assert float(summary[-1].split("\t")[5].strip().rstrip("%")) == pytest.approx(100.0, abs=0.01)
    assert len(check_timings(out, 5)) == 1


def test_isolated_nodes_compute_what_the_model_computes(tiny_export: Path) -> None:
    """The profiler's one-node models are faithful: same outputs as inside the full graph."""
    from ai_edge_litert.interpreter import Interpreter

    path = tiny_export / "unet.tflite"
    info = read_model_info(path)
    full = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True)
    full.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in full.get_input_details():
        full.set_tensor(d["index"], rng.standard_normal(d["shape"]).astype(d["dtype"]))
    full.invoke()
    wanted = ("CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "SOFTMAX", "MEAN", "CONCATENATION", "RESHAPE")
    picked = {}
    for op in info.ops:
        picked.setdefault(op.op_name, op)
    with ModelCutter(path) as cutter:
        for name in wanted:
            op = picked[name]
            single = Interpreter(model_content=cutter.cut(op.index).content)
            single.allocate_tensors()
            dynamic = [t for t in op.inputs if t >= 0 and not info.tensors[t].constant]
            for detail, t in zip(single.get_input_details(), dynamic):
                single.set_tensor(detail["index"], full.get_tensor(t))
            single.invoke()
            got = single.get_tensor(single.get_output_details()[0]["index"])
            np.testing.assert_array_equal(got, full.get_tensor(op.outputs[0]), err_msg=name)


@pytest.mark.parametrize(("args", "message"), [
    (["bench"], "bench needs a MODEL.tflite or FOLDER"),
    (["bench", "--compare", "x.tflite"], "--compare needs at least two PATH[@BACKEND] specs"),
    (["bench", "/nonexistent/model.tflite"], "model not found: /nonexistent/model.tflite"),
])
def test_bench_errors_are_one_line(capsys, args: list[str], message: str) -> None:
    rc, out, err = run_cli(capsys, *args)
    assert rc == 2 and out == ""
    assert err == f"sdlite: error: {message}" + err.split(message, 1)[1]
    assert err.count("\n") == 1


def test_bench_bad_run_counts(capsys, tiny_export: Path) -> None:
    rc, _, err = run_cli(capsys, "bench", str(tiny_export / "text_encoder.tflite"), "--num_runs", "0")
    assert rc == 2 and err == "sdlite: error: --num_runs must be >= 1, got 0\n"
    rc, _, err = run_cli(capsys, "bench", str(tiny_export), "--models", "controlnet")
    assert rc == 2 and "lists no model 'controlnet'" in err


def test_op_profiling_of_a_fused_model_runs_sd_ops_on_the_delegate(capsys, tmp_path: Path) -> None:
    from sdlite_models import fused_gelu_model

    from sdlite import native

    native.delegate_path()  # a missing build fails here with its one-line message
    path = tmp_path / "gelu.tflite"
    path.write_bytes(fused_gelu_model())
    rc, out, err = run_cli(capsys, "bench", str(path), "--enable_op_profiling", *RUNS)
    assert rc == 0, err
    rows = [r.split("\t") for r in section(out, "Run Order")]
    assert [(r[1].strip(), r[2].strip()) for r in rows] == [("ADD", "xnnpack"), ("SdGelu", "sdgpu"), ("MUL", "xnnpack")]
    assert "Placement: xnnpack: 2 ops in 2 partitions (ADD 1, MUL 1); sdgpu: 1 ops in 1 partition (SdGelu 1)" in out


def test_delegate_options_reach_the_delegate(capsys, tmp_path: Path) -> None:
    """--delegate_options (benchmark_model's key:value;key:value form): a profile_path given there is written by the
    OpenCL delegate; a bad entry is a one-line error before any model is read."""
    from sdlite_models import fused_gelu_model

    path = tmp_path / "gelu.tflite"
    path.write_bytes(fused_gelu_model())
    profile = tmp_path / "p.json"
    rc, out, err = run_cli(capsys, "bench", f"{path}@opencl", "--delegate_options",
                           f"profile_path:{profile};gemm_autotune:0", *RUNS)
    assert rc == 0, err
    assert json.loads(profile.read_text())["invocations"] >= 1
    rc, out, err = run_cli(capsys, "bench", f"{path}@opencl", "--delegate_options", "tensor_cores:tf32", *RUNS)
    assert rc == 2 and out == ""
    assert err == "sdlite: error: tensor_cores must be one of auto, off, 3xtf32, fp64 or None, got 'tf32'\n"
