"""The benchmark kit (bench/) end to end on the tiny export: PoCL stands in for the GPU, CPU torch for
CUDA. Guards the kit against rot between device sessions: packing, weight refill, every row kind, the JSON/markdown."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from bench import h200_report as report
from bench.kit import Variant, Work
from sdlite import native

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "bench"


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "python"), str(ROOT / "converter"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "SDLITE_DELEGATE_PATH": str(native.delegate_path()),
            "PYTHON": sys.executable}


def _run(*cmd: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{cmd}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r


def test_weights_zero_and_refill_keep_the_model_outside_the_holes(tmp_path: Path, tiny_export: Path) -> None:
    src = tiny_export / "unet.tflite"
    gz = tmp_path / "unet.tflite.gz"
    _run(sys.executable, "-m", "bench.weights", "zero", src, gz)
    doc = json.loads(Path(f"{gz}.json").read_text())
    original = np.fromfile(src, np.uint8)
    assert doc["bytes"] == original.size and doc["hole_bytes"] == sum(h[1] for h in doc["holes"])
    assert doc["hole_bytes"] > 0.7 * original.size  # the float weights are most of the file...
    assert gz.stat().st_size < 0.1 * original.size  # ...and do not travel
    outs = []
    for seed in (0, 0, 1):
        out = tmp_path / f"unet-{len(outs)}.tflite"
        _run(sys.executable, "-m", "bench.weights", "refill", gz, out, "--seed", str(seed))
        outs.append(np.fromfile(out, np.uint8))
    keep = np.ones(original.size, bool)
    for offset, n, dtype in doc["holes"]:
        keep[offset:offset + n] = False
        values = outs[0][offset:offset + n].view("<" + dtype)
        assert np.isfinite(values).all() and 0.01 < values.std() < 0.03
    np.testing.assert_array_equal(outs[0][keep], original[keep])
    np.testing.assert_array_equal(outs[0], outs[1])  # seeded
    assert (outs[0][~keep] != outs[2][~keep]).mean() > 0.5


def test_kit_runs_every_row_kind_on_tiny_models(tmp_path: Path, tiny_export: Path) -> None:
    dest = tmp_path / "kit"
    r = _run("bash", KIT / "prepare.sh", "--b1", tiny_export, "--b2", tiny_export, "--dest", dest, "--models",
             "unet_b1", "--skip-downloads", "--wheels", tmp_path / "whl", "--debs", tmp_path / "debs")
    assert "TOTAL" in r.stdout
    kit = json.loads((dest / "models" / "kit.json").read_text())
    assert kit["config"] == "tiny" and list(kit["models"]) == ["unet_b1"]
    assert (dest / "models" / "unet_b1.tflite.gz").is_file() and (dest / "models" / "manifest_b1.json").is_file()
    assert (dest / "lib" / "libsdgpu_delegate.so").stat().st_size == native.delegate_path().stat().st_size
    assert (dest / "setup.sh").read_text() == (KIT / "setup.sh").read_text()  # `source .h200/setup.sh` on the device

    work, out = tmp_path / "work", tmp_path / "out"
    args = ["--models-dir", dest / "models", "--work", work, "--out", out, "--quick", "--torch-device", "cpu",
            "--variants", "plain,plain+tc,fused+wino4,fused+wino4+tc", "--deadline-s", "400",
            "--stages", "prepare,ours,torch,cpu,litert-gpu"]  # the e2e stage has its own test below
    r = _run(sys.executable, "-m", "bench.bench", *args)
    md = (out / "h200.md").read_text()
    assert r.stdout.rstrip().endswith(md.rstrip())  # the markdown is printed last
    data = json.loads((out / "h200.json").read_text())
    rows = data["rows"]
    # what the device returns: few files, plain names, shallow (see bench.py DETAILS)
    assert sorted(p.name for p in out.iterdir()) == ["h200-details.tar.gz", "h200.json", "h200.md"]
    with tarfile.open(out / "h200-details.tar.gz") as tar:
        details = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}
    details = {k: json.loads(v) if k.endswith(".json") else v for k, v in details.items()}
    assert details["results.json"]["rows"] == rows
    ours = ["ours-opencl-plain", "ours-opencl-plain+tc", "ours-opencl-fused+wino4", "ours-opencl-fused+wino4+tc"]
    stock = ["litert-gpu-plain", "litert-gpu-litert"]  # the plain export and `--fuse --target litert`
    assert set(rows) == {f"unet_b1|{r}" for r in [*ours, "litert-cpu-plain", *stock, "torch-fp32", "torch-fp16"]}
    assert data["prepare"]["unet_b1"]["status"] == "ok"
    assert set(data["prepare"]["unet_b1"]["variants"]) == {"plain", "fused", "fused+wino4", "litert"}
    for rid in [*ours, "litert-cpu-plain", "torch-fp32"]:
        assert rows[f"unet_b1|{rid}"]["status"] == "ok", rows[f"unet_b1|{rid}"]
    for rid in stock:
        gpu = rows[f"unet_b1|{rid}"]
        assert gpu["status"] in ("ok", "error", "crashed", "timeout") and (gpu["status"] == "ok" or gpu["error"])
    for rid in ours:
        row = rows[f"unet_b1|{rid}"]
        assert row["backend"] == "opencl" and row["timings_us"]["count"] == 2 and row["timings_us"]["median"] > 0
        dev = row["device"]
        assert dev["partitions"] == 1 and dev["cpu_nodes"] == 0 and dev["arena_mb"] > 0 and dev["weight_mb"] > 0
        prof = row["profile"]
        assert prof["kind"] == "device" and prof["nodes_timed"] == row["num_ops"] and len(prof["top"]) == 5
        assert [t["avg_ms"] for t in prof["top"]] == sorted((t["avg_ms"] for t in prof["top"]), reverse=True)
        # The profile comes from a second session (--profile separate), so it is not compared with the timed
        # runs' wall time (two PoCL sessions on a loaded 1-core host differ by tens of %): check it adds up.
        full = details[f"profiles/unet_b1/{rid}.json"]
        assert full["nodes_timed"] == row["num_ops"] and prof["mode"] == "separate"
        assert prof["total_ms"] > 0
        assert sum(o["avg_us"] for o in full["ops"]) / 1e3 == pytest.approx(prof["total_ms"], rel=1e-9)
        assert sum(e["ms"] for e in prof["by_type"].values()) == pytest.approx(prof["total_ms"], rel=1e-9)
        assert sum(e["count"] for e in prof["by_type"].values()) == row["num_ops"]
        assert sum(e["ms"] for e in prof["by_kernel"].values()) == pytest.approx(prof["total_ms"], rel=1e-4)
        assert details[f"reports/unet_b1/{rid}.txt"].startswith("INFO: Loaded model ")  # benchmark_model-shaped
        parity = data["derived"]["parity"][f"unet_b1|{rid}"]
        assert parity["reference"] == "litert-cpu-plain" and parity["rel"] < 1e-4
    assert rows["unet_b1|ours-opencl-fused+wino4"]["op_histogram"].get("SdConv2DWinograd", 0) > 0
    # "+tc" runs the same model file with tensor_cores=3xtf32 (no tensor cores on PoCL: the fp32 kernels, same result)
    assert rows["unet_b1|ours-opencl-fused+wino4+tc"]["op_histogram"] == rows["unet_b1|ours-opencl-fused+wino4"]["op_histogram"]
    assert rows["unet_b1|ours-opencl-plain+tc"]["op_histogram"] == rows["unet_b1|ours-opencl-plain"]["op_histogram"]
    ratios = data["derived"]["ratios"]["unet_b1"]
    # a "+tc" fused row is compared with the fp32 unfused row and with the unfused row under the same option
    assert set(ratios) == {"ours opencl: fused+wino4 / unfused", "ours opencl: fused+wino4+tc / unfused",
                           "ours opencl: fused+wino4+tc / unfused + 3xTF32 tensor cores",
                           "best ours / PyTorch fp32", "best ours / PyTorch fp16"}
    targets = data["derived"]["targets"]
    assert {"unet_b1: fused+wino4+tc >= 2x faster than unfused (opencl)",
            "unet_b1: fused+wino4+tc >= 2x faster than unfused + 3xTF32 tensor cores (opencl)"} <= set(targets)
    plain_ms = rows["unet_b1|ours-opencl-plain"]["timings_us"]["median"]
    wino_ms = rows["unet_b1|ours-opencl-fused+wino4"]["timings_us"]["median"]
    assert ratios["ours opencl: fused+wino4 / unfused"]["ratio"] == pytest.approx(wino_ms / plain_ms)

    table = md.split("| Implementation |", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0].strip() == "UNet step b1 (ms) |"
    labels = [line.split("|")[1].strip() for line in table[2:]]
    assert labels == ["ours OpenCL, unfused", "ours OpenCL, unfused + 3xTF32 tensor cores",
                      "ours OpenCL, fused + Winograd F4", "ours OpenCL, fused + Winograd F4 + 3xTF32 tensor cores",
                      f"LiteRT CPU (XNNPACK, {data['plan']['cpu_threads']} threads)", "LiteRT GPU (stock accelerator)",
                      "LiteRT GPU (stock accelerator), --fuse --target litert",
                      "PyTorch CPU fp32 (TF32 off)", "PyTorch CPU fp16"]
    assert float(table[2].split("|")[2]) == pytest.approx(plain_ms / 1e3, abs=0.06)
    assert md.startswith("### tiny random-weight fp32 on ")
    mem_table = md.split("Delegate memory, placement and parity", 1)[1].split("\n\n")[1]
    mem_rows = [line.split("|") for line in mem_table.splitlines() if line.startswith("| UNet step b1 | ours OpenCL")]
    assert len(mem_rows) == 4  # unfused, fused + Winograd F4, each also + 3xTF32: set-up host ms (pack / upload /
    # tune) from the stats
    assert all(re.fullmatch(r"\d+ / \d+ / \d+", cells[-2].strip()) for cells in mem_rows), mem_rows
    for heading in ("- Command: `", "Time ratios (same machine, same model files):", "Delegate memory, placement and parity",
                    "Slowest five ops per implementation", "Targets (issue #5):"):
        assert heading in md

    # a second call of the same warm machine adds rows and keeps the earlier ones
    r = _run(sys.executable, "-m", "bench.bench", *args, "--stages", "cpu", "--cpu-variants", "fused+wino4")
    again = json.loads((out / "h200.json").read_text())
    assert again["rows"]["unet_b1|ours-opencl-plain"] == rows["unet_b1|ours-opencl-plain"]
    assert again["rows"]["unet_b1|litert-cpu-fused+wino4"]["status"] == "ok"
    assert len(again["calls"]) == 2


def test_variant_names() -> None:
    v = Variant("fused+winoauto+tc")
    assert (v.model_name, v.winograd, v.fused, v.delegate_options) == ("fused+winoauto", "auto", True, "tensor_cores:3xtf32")
    assert v.title == "fused + Winograd auto + 3xTF32 tensor cores"
    assert Variant("fused+tc").title == "fused + 3xTF32 tensor cores"
    p = Variant("plain+tc")
    assert (p.model_name, p.fused, p.delegate_options, p.title) == ("plain", False, "tensor_cores:3xtf32",
                                                                    "unfused + 3xTF32 tensor cores")
    assert Work(Path("/w")).model("unet_b1", v) == Path("/w/models/unet_b1/fused+winoauto.tflite")
    assert Variant("plain").delegate_options == "" and Variant("plain").model_name == "plain"
    # the default is tensor_cores=auto (FP64 tensor cores on sm_90); "+fp32" / "+fp64" name either side explicitly
    f = Variant("fused+winoauto+fp32")
    assert (f.model_name, f.delegate_options, f.title) == ("fused+winoauto", "tensor_cores:off",
                                                           "fused + Winograd auto + fp32 FMAs only")
    assert Variant("plain+fp64").title == "unfused + FP64 tensor cores"
    for bad, message in (("litert+tc", "applies to our delegate's models only"), ("fused+wino5", "unknown variant"),
                         ("fused+tc+tc", "unknown variant")):
        with pytest.raises(SystemExit, match=message):
            Variant(bad)


def _e2e_row(png: float, second: float | None = None, hits: int = 0, misses: int = 5) -> dict:
    delegate = {"cache_hits": {"program": hits, "tiles": hits}, "cache_misses": {"program": misses, "tiles": misses},
                "setup_phases_ms": {"compiling kernels": 1500.0, "preparing weights": 300.0, "first inference": 200.0},
                "weights_on_device": 300, "weights_on_host": 40, "tiles_tuned": 3, "tiles_from_cache": 0,
                "tiles_untuned": 1}
    return {"status": "ok", "png_s": png, "process_start_known": True, "wall_s": png + 0.4, "imports_done_s": 0.3,
            "models_loaded_s": 0.6, "text_encoder_s": 0.01, "unet_first_step_s": 0.5, "unet_step_steady_mean_s": 0.034,
            "vae_decode_s": 0.05, "second_image_s": second,
            "models": {"unet": {"delegate_s": 0.1, "load_s": 0.2, "first_call_s": 0.5, "second_call_s": 0.034,
                                "delegate": delegate}}}


def test_e2e_targets_and_markdown_from_rows() -> None:
    """The end-to-end section (issue #31): start to PNG against 2.0 s warm / 4.0 s cold for fused + Winograd auto,
    the second image against 0.75 s and diffusers fp16, fused no later than unfused, both below the issue's 10.9 s."""
    plan = {"e2e_variants": ["plain", "fused+winoauto"], "e2e_runs": ["cold", "warm", "2images"], "e2e_steps": 20,
            "e2e_backend": "opencl"}
    rows = {"e2e|ours-opencl-fused+winoauto-cold": _e2e_row(3.5), "e2e|ours-opencl-fused+winoauto-warm":
            _e2e_row(2.2, hits=5, misses=0), "e2e|ours-opencl-fused+winoauto-2images": _e2e_row(2.1, 0.70, hits=5,
                                                                                                  misses=0),
            "e2e|ours-opencl-plain-cold": _e2e_row(3.0), "e2e|ours-opencl-plain-warm": _e2e_row(2.5, hits=5, misses=0),
            "e2e|diffusers-fp16": {"status": "ok", "image_s": 0.83, "first_image_s": 1.9},
            "e2e|diffusers-fp32": {"status": "error", "error": "CUDA out of memory"}}
    t = report.derive_e2e(rows, plan)
    assert t["e2e fused+winoauto: warm start to PNG <= 2.0 s"] == {"s": 2.2, "target_s": 2.0, "met": False}
    assert t["e2e fused+winoauto: cold start to PNG <= 4.0 s"]["met"] is True
    assert t["e2e fused+winoauto: second image <= 0.75 s"] == {"s": 0.70, "target_s": 0.75, "met": True}
    assert t["e2e fused+winoauto: second image faster than diffusers fp16"]["met"] is True
    assert t["e2e fused+winoauto no later to its first image than unfused (cold)"] == {"s": 3.5, "unfused_s": 3.0,
                                                                                      "met": False}
    assert t["e2e fused+winoauto no later to its first image than unfused (warm)"]["met"] is True
    assert t["e2e plain: warm start to PNG below issue #31's 10.9 s"]["met"] is True
    assert not any(k.startswith("e2e plain: warm start to PNG <=") for k in t)  # the absolute targets: fused only
    lines = report._e2e_lines(rows, plan, t)
    text = "\n".join(lines)
    assert "| ours, fused + Winograd auto | warm | 2.20 | 2.60 | 0.30 | 0.60 | 0.010 | 0.500 | 0.0340 | 0.050 | - | " \
           "5/5 / 5/5 |" in text
    assert "| ours, fused + Winograd auto | 2images | 2.10 |" in text and "| 0.700 |" in text
    assert "| diffusers StableDiffusionPipeline fp16 | in process | first image 1.90, then 0.830 s per image |" in text
    assert "- e2e diffusers-fp32: error: CUDA out of memory" in text
    assert "- e2e fused+winoauto: warm start to PNG <= 2.0 s: NOT met (s=2.2, target_s=2)" in text
    assert "| fused + Winograd auto | cold | unet | 0.100 | 0.200 | 0.500 | 0.0340 | compiling kernels 1.50, " \
           "preparing weights 0.30, first inference 0.20 | 300 / 40 | 3 / 0 / 1 |" in text
    # a process without /proc: its wall time stands in for the timeline
    assert report.e2e_png_s({**_e2e_row(9.0), "process_start_known": False}) == pytest.approx(9.4)


def test_e2e_stage_on_tiny_models_and_its_dry_run(tmp_path: Path, tiny_export: Path) -> None:
    """The e2e stage end to end on the tiny export (PoCL, diffusers on the CPU): the folder assembled from the kit, a
    cold and a two-image `sdlite generate` process, diffusers' pipeline; and --dry-run printing the same commands."""
    dest = tmp_path / "kit"
    _run("bash", KIT / "prepare.sh", "--b1", tiny_export, "--b2", tiny_export, "--dest", dest, "--models",
         "unet_b2,vae_decoder", "--skip-downloads", "--wheels", tmp_path / "whl", "--debs", tmp_path / "debs")
    kit = json.loads((dest / "models" / "kit.json").read_text())
    assert kit["e2e"]["text_encoder"] == "text_encoder.tflite.gz" and (dest / "models" / "e2e_assets.tar.gz").is_file()
    work, out = tmp_path / "work", tmp_path / "out"
    args = ["--models-dir", dest / "models", "--work", work, "--out", out, "--quick", "--torch-device", "cpu",
            "--torch-dtypes", "fp32", "--stages", "prepare,e2e", "--variants", "plain", "--e2e-variants", "plain",
            "--e2e-runs", "cold,2images", "--e2e-steps", "3", "--deadline-s", "500"]
    dry = _run(sys.executable, "-m", "bench.bench", *args, "--dry-run")
    would = [ln.split("would run (timeout ", 1)[1] for ln in dry.stdout.splitlines() if "dry run: would run" in ln]
    assert any("bench.worker prepare-e2e" in c for c in would) and any("bench.worker pipeline" in c for c in would)
    generate = [c for c in would if " -m sdlite generate " in c]
    assert len(generate) == 2 and all("--steps 3" in c and "--backend opencl" in c for c in generate)
    assert "--num-images 2" in generate[1] and "--num-images" not in generate[0]
    assert not out.exists() and not work.exists()  # a dry run writes nothing
    # "first": the same command with NVIDIA's driver compile cache off; "cold" leaves the driver alone
    dry = _run(sys.executable, "-m", "bench.bench", *args[:-5], "first,cold", *args[-4:], "--dry-run")
    generate = [ln.split(" s): ", 1)[1] for ln in dry.stdout.splitlines() if " -m sdlite generate " in ln]
    assert len(generate) == 2 and generate[0].startswith("CUDA_CACHE_DISABLE=1 ") and "CUDA_CACHE" not in generate[1]
    assert generate[0].split(" ", 1)[1].replace("plain-first.png", "plain-cold.png") == generate[1]

    r = _run(sys.executable, "-m", "bench.bench", *args)
    data = json.loads((out / "h200.json").read_text())
    rows = data["rows"]
    assert rows["e2e|prepare"]["status"] == "ok", rows["e2e|prepare"]
    cold, two = rows["e2e|ours-opencl-plain-cold"], rows["e2e|ours-opencl-plain-2images"]
    for row in (cold, two):
        assert row["status"] == "ok", row
        assert 0 < row["imports_done_s"] < row["models_loaded_s"] < row["png_s"] <= row["wall_s"] + 1
        assert set(row["models"]) == {"text_encoder", "unet", "vae_decoder"}
        # PNDM: steps + 1 evaluations, each two batch-1 calls (CFG), per image, after the warm-up's inference
        assert row["models"]["unet"]["calls"] == 1 + 8 * (2 if row is two else 1)
        assert all(m["warmed_up"] for m in row["models"].values())
    unet_cold = cold["models"]["unet"]["delegate"]
    assert unet_cold["cache_hits"]["program"] == 0 and unet_cold["cache_dir"].endswith("/e2e/cache/plain")
    assert two["second_image_s"] > 0 and two["png2_s"] > two["png_s"]
    # the delegates' set-up ran in the warm-up (models_loaded -> models_ready), before the first image: both images
    # run at steady speed (the first used to carry the set-up and be the slower one)
    assert two["models_loaded_s"] < two["models_ready_s"] < two["png_s"]
    assert two["second_image"]["unet_calls"] == 8 and two["second_image_s"] < 2 * two["first_image_s"]
    assert rows["e2e|diffusers-fp32"]["status"] == "ok" and rows["e2e|diffusers-fp32"]["image_s"] > 0
    md = (out / "h200.md").read_text()
    assert "End to end: `sdlite generate` 3 steps" in md and "| ours, unfused | cold |" in md
    assert "| diffusers StableDiffusionPipeline fp32 (TF32 off) | in process |" in md
    assert "Targets (issue #31):" in md and "e2e plain: cold start to PNG below issue #31's 10.9 s" in md
    assert r.stdout.rstrip().endswith(md.rstrip())
