"""``sdlite bench`` with TFLite benchmark_model's flags: spellings, semantics, its report lines in its order."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_bench_cli import run_cli, section

from sdlite.backends import BackendOptions
from sdlite.bench.flags import FLAGS, echo_lines, parse_bool
from sdlite.bench.loop import RunLoop, TimingRules
from sdlite.bench.run import BenchTarget, bench_target, unique_labels
from sdlite.cli import _bench_plan, build_parser, parse_args
from sdlite.errors import SdliteError
from sdlite.tflite_info import read_model_info

FAST = ["--num_threads=1", "--min_secs=0", "--warmup_min_secs=0"]
NUM = r"([\d.]+)"


def test_benchmark_model_command_line_on_the_fused_unet(tiny_fused_export: Path) -> None:
    """The issue's command, verbatim, in a fresh process: benchmark_model's lines in benchmark_model's order."""
    from sdlite import native

    model = tiny_fused_export / "unet.tflite"
    lib = native.delegate_path()
    info = read_model_info(model)
    proc = subprocess.run(
        [sys.executable, "-m", "sdlite", "bench", f"--graph={model}", "--num_runs=3", "--warmup_runs=1",
         "--enable_op_profiling=true", f"--external_delegate_path={lib}", "--external_delegate_options=backend:cpu"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    expected = [  # (pattern, what it captures); each must come after the previous one
        (r"INFO: STARTING!", ()),
        (r"INFO: Log parameter values verbosely: \[0\]", ()),
        (r"INFO: Min num runs: \[3\]", ()),
        (r"INFO: Min warmup runs: \[1\]", ()),
        (rf"INFO: Graph: \[{re.escape(str(model))}\]", ()),
        (r"INFO: Enable op profiling: \[1\]", ()),
        (rf"INFO: External delegate path: \[{re.escape(str(lib))}\]", ()),
        (r"INFO: External delegate options: \[backend:cpu\]", ()),
        (rf"INFO: Loaded model {re.escape(str(model))}", ()),
        (r"INFO: Going to apply 1 delegates one after another\.", ()),
        (r"INFO: Explicitly applied EXTERNAL delegate, and the model graph will be partially executed by the "
         r"delegate w/ (\d+) delegate kernels\.", ("kernels",)),
        (rf"INFO: The input model file size \(MB\): {NUM}", ("size_mb",)),
        (rf"INFO: Initialized session in {NUM}ms\.", ("init_ms",)),
        (r"Placement: .*sdgpu: (\d+) ops in (\d+) partitions.*", ("sd_ops", "partitions")),
        (r"INFO: Running benchmark for at least 1 iterations and at least 0\.5 seconds but terminate if exceeding "
         r"150 seconds\.", ()),
        (rf"INFO: count=(\d+) first=(\d+) curr=\d+ min=\d+ max=\d+ avg={NUM} std=\d+", ("warm_n", "warm_first",
                                                                                       "warm_avg")),
        (r"INFO: Running benchmark for at least 3 iterations and at least 1 seconds but terminate if exceeding "
         r"150 seconds\.", ()),
        (rf"INFO: count=(\d+) first=\d+ curr=\d+ min=\d+ max=\d+ avg={NUM} std=\d+", ("n", "avg")),
        (rf"INFO: Inference timings in us: Init: (\d+), First inference: (\d+), Warmup \(avg\): (\d+), "
         rf"Inference \(avg\): {NUM}", ("init_us", "first_us", "warm_avg_us", "avg_us")),
        (r"INFO: Note: as the benchmark tool itself affects memory footprint, the following is only APPROXIMATE to "
         r"the actual memory footprint of the model at runtime\. Take the information at your discretion\.", ()),
        (rf"INFO: Memory footprint delta from the start of the tool \(MB\): init={NUM} overall={NUM}",
         ("mem_init", "mem_overall")),
        (r"INFO: Operator-wise Profiling Info for Regular Benchmark Runs:", ()),
        (r"=+ Run Order =+", ()),
        (r"=+ Top by Computation Time =+", ()),
        (r"Number of nodes executed: (\d+)", ("nodes",)),
        (r"=+ Summary by node type =+", ()),
        (rf"Timings \(microseconds\): count=(\d+) first=\d+ curr=\d+ min=\d+ max=\d+ avg={NUM} std=\d+",
         ("n_again", "avg_again")),
        (r"(\d+) nodes observed", ("observed",)),
    ]
    pos, got = 0, {}
    for pattern, names in expected:
        m = re.compile(rf"^{pattern}$", re.M).search(out, pos)
        assert m, f"{pattern!r} missing after offset {pos}:\n{out[pos:pos + 2000]}"
        got.update(zip(names, m.groups()))
        pos = m.end()
    n = int(got["n"])
    # semantics: at least --num_runs timed runs lasting at least --min_secs (1 s), one warm-up run at least and
    # 0.5 s of them; Init and the first inference are the same numbers in both lines
    assert n >= 3 and n * float(got["avg"]) >= 0.9e6
    assert int(got["warm_n"]) >= 1 and int(got["warm_first"]) == int(got["first_us"])
    assert int(got["warm_n"]) * float(got["warm_avg"]) >= 0.45e6
    assert float(got["init_ms"]) == pytest.approx(int(got["init_us"]) / 1e3, abs=1e-3 + 1e-5 * int(got["init_us"]))
    assert float(got["avg_us"]) == pytest.approx(float(got["avg"]), abs=0.06)
    assert (int(got["n_again"]), float(got["avg_again"])) == (n, float(got["avg"]))
    assert float(got["size_mb"]) == pytest.approx(model.stat().st_size / 1e6, rel=1e-5)
    # the delegate claims the fused Sd* ops (the model's only custom ops), one kernel per partition
    assert int(got["kernels"]) == int(got["partitions"]) > 0
    assert int(got["sd_ops"]) == sum(1 for op in info.ops if op.op_name.startswith("Sd"))
    assert int(got["nodes"]) == int(got["observed"]) == len(info.ops)
    # the memory figures: growth of the peak RSS, positive once the model is loaded, never shrinking
    assert 0 < float(got["mem_init"]) <= float(got["mem_overall"])
    run_order = section(out, "Run Order")
    assert [row.split("\t")[1].strip() for row in run_order] == [op.op_name for op in info.ops]
    sd = {row.split("\t")[2].strip() for row in run_order if row.split("\t")[1].strip().startswith("Sd")}
    assert sd == {"sdgpu"}


def _parse(*argv: str):
    return parse_args(build_parser(), ["bench", *argv])


@pytest.mark.parametrize(("argv", "expected"), [
    (["m.tflite", "--enable_op_profiling"], True),  # bare: sdlite's old spelling
    (["m.tflite", "--enable_op_profiling=true"], True),  # benchmark_model's
    (["m.tflite", "--enable_op_profiling=1"], True),
    (["m.tflite", "--enable_op_profiling=false"], False),
    (["m.tflite", "--enable-op-profiling=0"], False),
    (["--enable_op_profiling", "m.tflite"], True),  # a bare flag does not swallow the positional argument
    (["m.tflite"], None),  # not given: benchmark_model's default applies, and it is not echoed
])
def test_boolean_flag_spellings(argv: list[str], expected: bool | None) -> None:
    args = _parse(*argv)
    assert args.enable_op_profiling is expected and args.target == "m.tflite"


def test_value_flag_spellings() -> None:
    a = _parse("--graph=m.tflite", "--num_runs=7", "--warmup_runs", "2", "--min_secs=0.25", "--num-threads=3",
               "--external_delegate_options=backend:opencl;tensor_cores:off")
    assert (a.graph, a.num_runs, a.warmup_runs, a.min_secs, a.num_threads) == ("m.tflite", 7, 2, 0.25, 3)
    plan = _bench_plan(a)
    assert plan.backend.name == "opencl" and plan.backend.num_threads == 3
    assert plan.delegate_options == {"tensor_cores": "off"}  # backend is the sdlite backend, not a delegate option
    assert plan.value("max_secs") == 150.0 and plan.value("warmup_min_secs") == 0.5  # benchmark_model's defaults
    assert _bench_plan(_parse("m.tflite", "--use_gpu=true")).backend.name == "litert-gpu"
    assert _bench_plan(_parse("m.tflite", "--num_threads=-1")).backend.num_threads is None  # = every core
    assert not _bench_plan(_parse("m.tflite", "--use_xnnpack=false")).backend.use_xnnpack


@pytest.mark.parametrize(("argv", "message"), [
    (["m.tflite", "--num_run=3"], "unknown flag --num_run; did you mean --num_runs?"),
    (["m.tflite", "--enable_op_profilng=true"], "unknown flag --enable_op_profilng; did you mean --enable_op_profiling?"),
    (["m.tflite", "--warmup-min-secs=1"], "unknown flag --warmup-min-secs; did you mean --warmup_min_secs?"),
    (["m.tflite", "--frobnicate"], "unknown flag --frobnicate (see --help)"),
    (["m.tflite", "--use_nnapi=true"], "benchmark_model's --use_nnapi is not supported by sdlite bench: this delegate "
                                       "exists only in Android/iOS builds of benchmark_model; sdlite runs LiteRT's "
                                       "Python runtime with its own delegate"),
    (["m.tflite", "--input_layer=x"], "benchmark_model's --input_layer is not supported by sdlite bench: sdlite bench "
                                      "feeds synthetic inputs of the model's fixed shapes (floats standard-normal, "
                                      "token ids a CLIP prompt)"),
    (["m.tflite", "--enable_op_profiling=yes"], "argument --enable_op_profiling/--enable-op-profiling: invalid bool "
                                                "value: 'yes'"),
    (["m.tflite", "other.tflite"], "unexpected argument 'other.tflite'"),
])
def test_flag_errors_are_one_line(capsys, argv: list[str], message: str) -> None:
    rc, out, err = run_cli(capsys, "bench", *argv)
    assert (rc, out, err) == (2, "", f"sdlite: error: {message}\n")


@pytest.mark.parametrize(("argv", "message"), [
    (["m.tflite", "--graph=m.tflite"], "give the model once: as the positional argument or as --graph"),
    (["m.tflite", "--use_gpu=true", "--backend", "cpu"],
     "conflicting backends: --backend gives cpu, --use_gpu=true gives litert-gpu"),
    (["m.tflite", "--external_delegate_options=backend:gl", "--backend", "opencl"],
     "conflicting backends: --backend gives opencl, --external_delegate_options=backend:... gives gl"),
    (["m.tflite", "--external_delegate_options=tensor_cores:tf32"],
     "tensor_cores must be one of auto, off, 3xtf32, fp64 or None, got 'tf32'"),
    (["m.tflite", "--external_delegate_path=/nonexistent/lib.so"], "delegate library not found: /nonexistent/lib.so"),
    (["m.tflite", "--max_secs=-1"], "--max_secs must be >= 0, got -1"),
])
def test_contradictions_are_one_line(capsys, argv: list[str], message: str) -> None:
    rc, out, err = run_cli(capsys, "bench", *argv)
    assert (rc, out, err) == (2, "", f"sdlite: error: {message}\n")


def test_external_delegate_must_be_ours(capsys, tiny_export: Path) -> None:
    import ctypes.util

    libm = ctypes.util.find_library("m")
    path = next(p for p in (Path("/lib/x86_64-linux-gnu") / libm, Path("/usr/lib/x86_64-linux-gnu") / libm,
                            Path("/lib64") / libm) if p.is_file())
    rc, _, err = run_cli(capsys, "bench", str(tiny_export / "text_encoder.tflite"),
                         f"--external_delegate_path={path}", *FAST)
    assert rc == 2
    assert err == (f"sdlite: error: {path} is not a build of libsdgpu_delegate.so (it has no sdgpu_version symbol); "
                   "sdlite loads only its own delegate\n")


def test_parameter_echo() -> None:
    given = {"num_runs": 3, "enable_op_profiling": True, "graph": "m.tflite", "min_secs": 0.5}
    assert echo_lines(given, verbose=False) == [
        "Log parameter values verbosely: [0]", "Min num runs: [3]", "Min runs duration (seconds): [0.5]",
        "Graph: [m.tflite]", "Enable op profiling: [1]"]
    every = echo_lines({"graph": "m.tflite"}, verbose=True)
    assert every[0] == "Log parameter values verbosely: [1]" and len(every) == len(FLAGS)
    assert "Max runs duration (seconds): [150]" in every and "Use xnnpack: [1]" in every
    assert parse_bool("TRUE") and not parse_bool("0")


def test_run_loop_follows_benchmark_model() -> None:
    calls: list[float] = []

    def work(seconds: float):
        def invoke() -> None:
            calls.append(time.perf_counter())
            time.sleep(seconds)
        return invoke

    assert len(RunLoop(3).run(work(0))) == 3  # runs only
    t0 = time.perf_counter()
    runs = RunLoop(1, min_secs=0.2).run(work(0.02))  # runs until min_secs
    assert len(runs) >= 2 and time.perf_counter() - t0 >= 0.2
    calls.clear()
    t0 = time.perf_counter()
    runs = RunLoop(1000, max_secs=0.1).run(work(0.03))  # no run starts after max_secs
    assert 1 <= len(runs) < 1000 and all(c - t0 <= 0.11 for c in calls)
    calls.clear()
    RunLoop(3, run_delay=0.05).run(work(0))  # a delay after every run
    assert calls[-1] - calls[0] >= 0.1
    first = [0.5]  # the first inference opens the warm-up and counts towards it
    assert RunLoop(1).run(work(0), first, started=time.perf_counter()) == first
    assert len(RunLoop(2).run(work(0), first, started=time.perf_counter())) == 2
    assert RunLoop.timed(5, TimingRules(min_secs=1.5, max_secs=20)).announce() == (
        "Running benchmark for at least 5 iterations and at least 1.5 seconds but terminate if exceeding 20 seconds.")


def test_min_secs_and_csv_profile(capsys, tiny_export: Path, tmp_path: Path) -> None:
    path = tiny_export / "vae_decoder.tflite"
    info = read_model_info(path)
    csv = tmp_path / "profile.csv"
    rc, out, err = run_cli(capsys, "bench", f"--graph={path}", "--num_runs=1", "--min_secs=0.3", "--warmup_runs=0",
                           "--warmup_min_secs=0", "--num_threads=1", "--enable_op_profiling=true",
                           f"--profiling_output_csv_file={csv}")
    assert rc == 0, err
    count, avg = re.search(r"^Timings \(microseconds\): count=(\d+) .* avg=([\d.]+)", out, re.M).groups()
    assert int(count) > 1 and int(count) * float(avg) >= 0.25e6  # more runs than --num_runs to fill --min_secs
    assert "INFO: CSV File to export profiling data to: [" in out
    assert "Run Order" not in out  # the profile went to the file
    lines = csv.read_text().splitlines()
    assert lines[0] == "Operator-wise Profiling Info for Regular Benchmark Runs:"
    assert lines[1] == "============================== Run Order =============================="
    assert lines[2] == "node type, start, first, avg_ms, %, cdf%, mem KB, times called, name"
    rows = lines[3:3 + len(info.ops)]
    assert [r.split(", ")[0] for r in rows] == [op.op_name for op in info.ops]
    assert float(rows[-1].split(", ")[5].rstrip("%")) == pytest.approx(100.0, abs=0.01)
    assert f"Number of nodes executed: {len(info.ops)}" in lines
    summary = lines[lines.index("node type, count, avg_ms, avg %, cdf %, mem KB, times called") + 1:]
    assert {r.split(", ")[0]: int(r.split(", ")[1]) for r in summary if r} == info.op_histogram


def test_csv_needs_profiling_and_one_model(capsys, tiny_export: Path, tmp_path: Path) -> None:
    rc, _, err = run_cli(capsys, "bench", str(tiny_export / "text_encoder.tflite"), "--num_runs=1",
                         f"--profiling_output_csv_file={tmp_path / 'p.csv'}", *FAST)
    assert rc == 0 and err == ("sdlite: warning: --profiling_output_csv_file has no effect without "
                               "--enable_op_profiling=true\n")
    rc, _, err = run_cli(capsys, "bench", str(tiny_export), "--num_runs=1", "--enable_op_profiling=true",
                         f"--profiling_output_csv_file={tmp_path / 'p.csv'}", *FAST)
    assert rc == 2 and err.startswith("sdlite: error: --profiling_output_csv_file takes one model; 4 are benchmarked")


def test_use_xnnpack_false_runs_builtin_kernels(tiny_export: Path) -> None:
    path = tiny_export / "vae_decoder.tflite"
    results = {}
    for xnnpack in (True, False):
        target = BenchTarget(path.name, path, BackendOptions("cpu", num_threads=1, use_xnnpack=xnnpack), "model")
        results[xnnpack] = bench_target(target, 1, 0, keep_outputs=True)
    assert results[True].placement.startswith("xnnpack: ")
    assert results[False].placement.startswith("tflite-cpu: ") and "xnnpack" not in results[False].placement
    (name, a), = results[True].outputs.items()
    np.testing.assert_allclose(results[False].outputs[name], a, rtol=1e-4, atol=1e-4)
    with pytest.raises(SdliteError, match="use_xnnpack=false needs an interpreter backend"):
        BackendOptions("litert-cpu", use_xnnpack=False)


def test_interpreter_state_and_peak_memory(capsys, tiny_export: Path) -> None:
    path = tiny_export / "text_encoder.tflite"
    info = read_model_info(path)
    rc, out, err = run_cli(capsys, "bench", str(path), "--num_runs=1", "--print_preinvoke_state=true",
                           "--print_postinvoke_state=true", "--report_peak_memory_footprint=true", *FAST)
    assert rc == 0, err
    for when in ("pre-invoke", "post-invoke"):
        begin = out.index(f"INFO: ====Printing out TfLite interpreter {when} state begins====")
        end = out.index(f"====Printing out TfLite interpreter {when} state ends====")
        block = out[begin:end].splitlines()
        assert len([ln for ln in block if re.match(r"Tensor +\d+ ", ln)]) == len(info.tensors)
        assert len([ln for ln in block if re.match(r"Node +\d+ Operator ", ln)]) == len(info.ops)
        assert any(re.match(r"Node +\d+ Delegate kernel ", ln) for ln in block)  # XNNPACK's partitions
    assert out.index("pre-invoke state ends") < out.index("INFO: Running benchmark") < out.index("post-invoke state")
    peak = float(re.search(r"^INFO: Overall peak memory footprint \(MB\) via periodic monitoring: ([\d.]+)$", out,
                           re.M).group(1))
    rss = int(re.search(r"^INFO: - VmRSS +: (\d+) MB$", out, re.M).group(1))
    anon = int(re.search(r"^INFO: \+ RssAnnon +: (\d+) MB$", out, re.M).group(1))
    shared = int(re.search(r"^INFO: \+ RssFile \+ RssShmem : (\d+) MB$", out, re.M).group(1))
    assert peak > 0 and rss > 0 and abs(anon + shared - rss) <= 1


def test_require_full_delegation(capsys, tiny_export: Path) -> None:
    path = tiny_export / "vae_decoder.tflite"
    rc, _, err = run_cli(capsys, "bench", str(path), "--require_full_delegation=true", "--num_runs=1", *FAST)
    assert rc == 2 and err.startswith("sdlite: error: vae_decoder.tflite: Disallowed CPU fallback detected "
                                      "(--require_full_delegation; placement: xnnpack: ")
    rc, out, err = run_cli(capsys, "bench", str(path), "--require_full_delegation=true", "--num_runs=1",
                           "--external_delegate_options=backend:opencl", *FAST)
    assert rc == 0, err
    assert ("INFO: Explicitly applied EXTERNAL delegate, and the model graph will be completely executed by the "
            "delegate.") in out


def test_compare_labels_tell_same_named_files_apart(capsys, tiny_export: Path, tiny_fused_export: Path) -> None:
    a, b = tiny_export / "unet.tflite", tiny_fused_export / "unet.tflite"
    rc, out, err = run_cli(capsys, "bench", "--compare", str(a), str(b), "--num_runs=2", *FAST)
    assert rc == 0, err
    rows = section(out, "Comparison (baseline: first row)")
    assert [r.split("\t")[1].strip() for r in rows] == [f"{a.parent.name}/unet.tflite", f"{b.parent.name}/unet.tflite"]
    same = [BenchTarget("unet.tflite", Path("x/y/unet.tflite"), BackendOptions(), "model"),
            BenchTarget("unet.tflite", Path("z/y/unet.tflite"), BackendOptions(), "model"),
            BenchTarget("unet.tflite", Path("x/y/unet.tflite"), BackendOptions("litert-cpu"), "model")]
    assert [t.label for t in unique_labels(same)] == ["x/y/unet.tflite", "z/y/unet.tflite", "x/y/unet.tflite"]
