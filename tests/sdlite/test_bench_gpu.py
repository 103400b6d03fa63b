"""``sdlite bench`` on the GPU backends (PoCL in CI): per-node device-event profiles, the delegate's memory figures."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_bench_cli import check_timings, run_cli, section

from sdlite.bench.device_profile import ProfileSnapshot, window_average_ms, window_kernel_ms
from sdlite.errors import SdliteError
from sdlite.tflite_info import read_model_info

RUNS = ["--num_runs", "3", "--warmup_runs", "1", "--min_secs", "0", "--warmup_min_secs", "0"]


def test_opencl_profile_is_per_node_device_time(capsys, tiny_export: Path) -> None:
    path = tiny_export / "unet.tflite"
    info = read_model_info(path)
    rc, out, err = run_cli(capsys, "bench", str(path), "--backend", "opencl", "--enable_op_profiling", "--json", *RUNS)
    assert rc == 0, err
    (r,) = json.loads(out)["results"]
    prof = r["op_profile"]
    assert r["profile_error"] == ""
    assert prof["kind"] == "device" and prof["method"].startswith("method: device events")
    assert prof["runs_averaged"] == 3 and prof["device"]
    assert prof["skipped"] == {}
    # every node is delegated (one partition) and has its own device time
    assert [o["index"] for o in prof["ops"]] == list(range(len(info.ops)))
    assert [o["op_name"] for o in prof["ops"]] == [op.op_name for op in info.ops]
    assert all(o["executor"] == "sdgpu" for o in prof["ops"])
    # Nodes that launch nothing, with zero device time: views (RESHAPE/SQUEEZE/EXPAND_DIMS alias their input inside
    # a partition), SLICEs that are contiguous runs, residual ADDs folded into the epilogue of the FC / conv that
    # produces an operand (tests/native/test_opencl_residual.py), and the timestep phase's MUL, whose product the SIN
    # and COS compute themselves (tests/native/test_gpu_timestep_phase.py). Every other node launches and takes time.
    views = {"RESHAPE", "SQUEEZE", "EXPAND_DIMS"}
    silent = views | {"SLICE", "ADD"}
    producer = {t: op.index for op in info.ops for t in op.outputs}
    phase = {producer[op.inputs[0]] for op in info.ops if op.op_name in ("SIN", "COS") and op.inputs[0] in producer}
    assert phase and all(info.ops[i].op_name == "MUL" for i in phase)
    assert all(o["avg_us"] > 0 and o["first_us"] > 0 for o in prof["ops"]
               if o["op_name"] not in silent and o["index"] not in phase)
    assert all(o["avg_us"] == 0 for o in prof["ops"] if o["index"] in phase)
    assert all(o["avg_us"] == 0 for o in prof["ops"] if o["op_name"] in views)
    assert any(o["avg_us"] == 0 for o in prof["ops"] if o["op_name"] == "ADD")  # the plain UNet's FC residuals
    # each node's time is split by the kernels it launched
    for o in prof["ops"]:
        assert (o["kernels"] == []) == (o["avg_us"] == 0), o
        assert sum(ms for _, ms in o["kernels"]) == pytest.approx(o["avg_us"], rel=1e-4, abs=1e-2)
    # device time of the nodes fits inside the wall time of a run (which adds uploads, downloads, launches)
    total = sum(o["avg_us"] for o in prof["ops"])
    assert total == pytest.approx(prof["total_us"])
    assert 0 < total <= r["timings_us"]["avg"] * 1.02
    dev = r["device"]
    assert dev["partitions"] == 1 and dev["cpu_nodes"] == 0 and dev["delegated_nodes"] == len(info.ops)
    assert dev["arena_bytes"] > 0 and dev["arena_mb"] == pytest.approx(dev["arena_bytes"] / 2**20)
    # the delegate's own count of what it uploaded (exact values: tests/native/test_opencl_weight_bytes.py)
    assert dev["weight_source"] == "delegate stats device_weight_bytes"
    assert dev["weight_bytes"] > 0 and dev["weight_mb"] == pytest.approx(dev["weight_bytes"] / 2**20)
    # host time to submit one invoke's work: a part of the invoke (whose wall time also waits for the device)
    assert 0 < dev["dispatch_us"] <= r["timings_us"]["max"] * 1.02
    # host set-up of the lazy first-run preparation (weights packed and uploaded, GEMM tiles tuned): it happened
    # while the model loaded (the partitions' constant uploads) or during the first inference, so it fits in them
    setup = dev["setup_weights_host_us"] + dev["setup_weights_upload_us"] + dev["setup_tuning_us"]
    assert dev["setup_weights_upload_us"] > 0 and dev["setup_tuning_us"] >= 0 and dev["setup_programs_us"] > 0
    # every weight of the plain tiny UNet (FC / conv packing transposes) is made on the device from the model's bytes
    assert dev["weights_on_device"] > 0 and dev["weights_on_host"] == 0 and dev["setup_weights_host_us"] == 0
    assert setup <= r["load_s"] * 1e6 + r["first_run_us"]
    # the persistent cache's counters per kind of entry
    assert set(dev["cache_hits"]) == set(dev["cache_misses"]) == {"program", "tiles"}


def test_opencl_profile_text_report(capsys, tiny_export: Path) -> None:
    path = tiny_export / "vae_decoder.tflite"
    info = read_model_info(path)
    rc, out, err = run_cli(capsys, "bench", str(path), "--backend", "opencl", "--enable_op_profiling", "--top", "5",
                           *RUNS)
    assert rc == 0, err
    assert re.findall(r"^=+ (.+?) =+$", out, re.M) == ["Run Order", "Top by Computation Time", "Summary by node type",
                                                       "Summary by kernel"]
    assert "Note: method: device events" in out and "3 timed runs averaged" in out
    run_order = section(out, "Run Order")
    assert len(run_order) == len(info.ops)
    assert {row.split("\t")[2].strip() for row in run_order} == {"sdgpu"}
    top = [float(row.split("\t")[4]) for row in section(out, "Top by Computation Time")]
    assert len(top) == 5 and top == sorted(top, reverse=True)
    counts = {row.split("\t")[1].strip(): int(row.split("\t")[2]) for row in section(out, "Summary by node type")}
    assert counts == info.op_histogram
    by_type = sum(float(row.split("\t")[3]) for row in section(out, "Summary by node type"))
    rows = [row.split("\t") for row in section(out, "Summary by kernel")]
    kernels = {row[1].strip(): float(row[4]) for row in rows}
    assert sum(kernels.values()) == pytest.approx(by_type, rel=1e-3, abs=5e-3)
    assert all(int(row[3]) >= int(row[2]) >= 1 for row in rows), rows  # launches per invocation, at least one a node
    assert any(k.startswith("conv_t") for k in kernels), kernels  # the VAE's CONV_2D nodes, by tiled kernel
    m = re.search(r"^Delegate: 1 partition, 0 CPU nodes; intermediate arena ([\d.]+) MB .*; GPU weights ([\d.]+) MB",
                  out, re.M)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0
    assert float(re.search(r"; host dispatch ([\d.]+) ms \(last invoke\)$", out, re.M).group(1)) > 0
    share = re.search(r"Sum of node times ([\d.]+) ms = ([\d.]+)% of the whole-model avg ([\d.]+) ms", out)
    assert share and 0 < float(share.group(2)) <= 102
    assert len(check_timings(out, 3)) == 1


def test_window_average_recovers_the_timed_runs() -> None:
    # 2 untimed runs at 1 ms then 4 timed runs at 3 ms for node 0; node 5 only appears later (0 before)
    before = ProfileSnapshot("d", 2, {0: ("CONV_2D", 1.0)})
    after = ProfileSnapshot("d", 6, {0: ("CONV_2D", (2 * 1.0 + 4 * 3.0) / 6), 5: ("ADD", 0.5)})
    avg = window_average_ms(before, after)
    assert avg[0] == pytest.approx(3.0) and avg[5] == pytest.approx(0.5 * 6 / 4)
    with pytest.raises(SdliteError, match="did not advance"):
        window_average_ms(after, after)
    # per kernel the same way: a kernel first launched inside the window counts from zero
    before = ProfileSnapshot("d", 2, {0: ("W", 1.0)}, {0: {"in": 1.0}})
    after = ProfileSnapshot("d", 6, {0: ("W", 2.0)}, {0: {"in": (2 * 1.0 + 4 * 0.5) / 6, "gemm": 2.0 * 6 / 6}})
    assert window_kernel_ms(before, after) == {0: pytest.approx({"in": 0.5, "gemm": 3.0})}


def test_launches_per_kernel_are_read_with_one_as_the_default(tmp_path: Path) -> None:
    # the delegate writes each kernel's launches per invocation (a banded Winograd conv: its transforms once per band);
    # files of delegates before that have none: one launch per listed kernel
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"device": "d", "invocations": 2, "nodes": [
        {"node": 3, "op": "SdConv2DWinograd", "ms": 1.5, "kernels": [
            {"name": "winograd_input_f6", "ms": 0.5, "launches": 3}, {"name": "gemm_t64x64", "ms": 1.0}]}]}))
    snap = ProfileSnapshot.read(path)
    assert snap.launches == {3: {"winograd_input_f6": 3, "gemm_t64x64": 1}}


def test_missing_or_bad_profile_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SdliteError, match="wrote no profile"):
        ProfileSnapshot.read(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"invocations": 1}')
    with pytest.raises(SdliteError, match="unexpected format"):
        ProfileSnapshot.read(bad)


def test_extra_delegate_options_are_scoped_and_checked(tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter
    from sdlite_models import fused_gelu_model

    from sdlite import native

    assert native.DelegateOptions(backend="opencl", profile_path="/p.json").as_strings() == {
        "backend": "opencl", "log_level": "warning", "profile_path": "/p.json"}
    with pytest.raises(native.NativeDelegateError, match="unknown delegate option"):
        with native.extra_options(profile_file="x"):
            pass
    profile = tmp_path / "p.json"
    for inside in (True, False):  # only a delegate created inside the block gets the profile path
        profile.unlink(missing_ok=True)
        if inside:
            with native.extra_options(profile_path=str(profile)):
                delegate = native.load("opencl")
        else:
            delegate = native.load("opencl")
        runner = Interpreter(model_content=fused_gelu_model(), experimental_delegates=[delegate]).get_signature_runner()
        runner(**{n: np.ones(d["shape"], d["dtype"]) for n, d in runner.get_input_details().items()})
        assert profile.exists() == inside
        if inside:
            assert [op for op, _ in ProfileSnapshot.read(profile).nodes.values()] == ["ADD", "SdGelu", "MUL"]
