"""``sdlite generate``: PNG output with parameters, --json timings, img2img, and one-line errors (exit 2)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sdlite.cli import main
from sdlite.images import read_png_parameters

FAST = ["--steps", "3", "--num-threads", "1", "--no-progress"]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_generate_writes_pngs_with_parameters(capsys, tiny_export: Path, tmp_path: Path) -> None:
    out_png = tmp_path / "cat.png"
    rc, out, err = run_cli(capsys, "generate", tiny_export, "-p", "a photo of a cat", "-n", "blurry", "--seed", "5",
                           "--num-images", "2", "--scheduler", "ddim", "-o", out_png, *FAST)
    assert rc == 0, err
    files = [tmp_path / "cat-0.png", tmp_path / "cat-1.png"]
    assert f"wrote {files[0]} (seed 5)" in out and f"wrote {files[1]} (seed 6)" in out
    assert "timings: text encoder " in out
    assert "xnnpack" not in out  # where ops ran is --verbose output, not a result
    for k, path in enumerate(files):
        with Image.open(path) as im:
            assert im.size == (64, 64) and im.mode == "RGB"
            text = im.text["parameters"]
        assert text.splitlines()[0] == "a photo of a cat"
        assert text.splitlines()[1] == "Negative prompt: blurry"
        assert f"Steps: 3, Sampler: ddim, CFG scale: 7.5, Seed: {5 + k}, Size: 64x64" in text
        params = read_png_parameters(path)
        assert params["seed"] == 5 + k and params["image_index"] == k and params["backend"] == "cpu"
        assert "strength" not in params and "Denoising strength" not in text  # text-to-image has no strength
    a, b = (np.asarray(Image.open(f)) for f in files)
    assert not np.array_equal(a, b)


def test_generate_json_summary_and_img2img(capsys, tiny_export: Path, tmp_path: Path) -> None:
    first = tmp_path / "first.png"
    rc, out, _ = run_cli(capsys, "generate", tiny_export, "-p", "a cat", "-o", first, "--json", *FAST)
    assert rc == 0
    summary = json.loads(out)
    t = summary["timings"]
    assert summary["images"] == [str(first)] and summary["seeds"] == [0]
    assert len(t["unet_step_s"]) == 4  # PNDM: steps + 1 UNet evaluations
    assert t["text_encoder_s"] > 0 and len(t["vae_decode_s"]) == 1 and t["total_s"] >= t["unet_total_s"]
    assert set(summary["placement"]) == {"text_encoder", "unet", "vae_decoder"}

    second = tmp_path / "second.png"
    rc, out, err = run_cli(capsys, "generate", tiny_export, "-p", "a dog", "--init-image", first, "--strength",
                           "0.5", "--steps", "4", "--scheduler", "euler_a", "-o", second, "--json",
                           "--num-threads", "1")
    assert rc == 0, err
    summary = json.loads(out)
    assert len(summary["timings"]["unet_step_s"]) == 2  # 4 steps at strength 0.5
    assert summary["timings"]["vae_encode_s"] > 0
    assert read_png_parameters(second)["init_image"] == str(first)
    assert read_png_parameters(second)["strength"] == 0.5
    assert "Denoising strength: 0.5" in Image.open(second).text["parameters"]


def test_opencl_startup_records_say_which_programs_a_model_took_from_the_others(capsys, tiny_export: Path,
                                                                                  tmp_path: Path) -> None:
    """The three delegates of one process share their OpenCL programs: the UNet, loaded and set up first, builds;
    the VAE decoder and the text encoder, set up beside it, take the units it built or is building (the persistent
    cache is off, so none of it comes from disk); --json copies each model's counts into its startup record."""
    rc, out, err = run_cli(capsys, "generate", tiny_export, "-p", "a cat", "-o", tmp_path / "a.png", "--json",
                           "--backend", "opencl", "--delegate-options", "cache_dir:none", *FAST)
    assert rc == 0, err
    models = json.loads(out)["startup"]["models"]
    delegates = {name: models[name]["delegate"] for name in ("text_encoder", "unet", "vae_decoder")}
    for d in delegates.values():
        assert d["programs_built"] >= 0 and d["programs_shared"] >= 0 and d["cache_hits"]["program"] == 0, d
    assert delegates["unet"]["programs_built"] > 0
    assert delegates["text_encoder"]["programs_shared"] + delegates["vae_decoder"]["programs_shared"] > 0, delegates


def test_gl_startup_records_count_the_set_up_waits(capsys, tiny_export: Path, tmp_path: Path) -> None:
    """GL: a weight set-up refill waits on a fence after the launch that read its staging buffer (upload_waits), never
    for every launch (upload_drains; GlDevice::Upload); only an invoke's input refill after the previous invoke
    may drain, once. OpenCL's in-order queue needs neither (-1)."""
    models = {}
    for backend in ("gl", "opencl"):
        rc, out, err = run_cli(capsys, "generate", tiny_export, "-p", "a cat", "-o", tmp_path / f"{backend}.png",
                               "--json", "--backend", backend, "--delegate-options", "cache_dir:none", *FAST)
        assert rc == 0, err
        models[backend] = json.loads(out)["startup"]["models"]
    unet, calls = models["gl"]["unet"]["delegate"], models["gl"]["unet"]["calls"]
    # tens of set-up waits, then one wait per later invoke; at most those later ones drained (the first of them may
    # find a fence after the launch it waits for, made by the first invoke's own input upload)
    assert unet["upload_waits"] >= 10 + (calls - 1) and unet["upload_drains"] <= calls - 1, (unet, calls)
    assert all((m["delegate"]["upload_waits"], m["delegate"]["upload_drains"]) == (-1, -1)
               for m in models["opencl"].values()), models["opencl"]


def test_long_prompt_warns_on_one_line(capsys, tiny_export: Path, tmp_path: Path) -> None:
    rc, _, err = run_cli(capsys, "generate", tiny_export, "-p", " ".join(["cat"] * 80), "-o",
                         tmp_path / "x.png", "--steps", "1", "--no-progress")
    assert rc == 0
    assert err == ("sdlite: warning: prompt is longer than 77 tokens and was truncated; "
                   "dropped: 'cat cat cat cat cat'\n")


@pytest.mark.parametrize(("extra", "message"), [
    (["-p", ""], "prompt is empty"),
    (["-p", "   "], "prompt is empty"),
    (["-p", "x", "--height", "100"], "height must be a positive multiple of 8, got 100"),
    (["-p", "x", "--width", "128"], "width 128 differs from the exported size 64x64 (models have fixed shapes; "
                                    "re-export with the size you want)"),
    (["-p", "x", "--scheduler", "heun"], "unknown scheduler 'heun'; choose one of pndm, ddim, euler_a, "
                                         "dpmpp_2m, dpmpp_2m_karras"),
    (["-p", "x", "--steps", "0"], "steps must be in 1..1000, got 0"),
    (["-p", "x", "--guidance-scale", "inf"], "guidance scale must be a finite number in 0..1000, got inf"),
    (["-p", "x", "--guidance-scale", "nan"], "guidance scale must be a finite number in 0..1000, got nan"),
    (["-p", "x", "--strength", "nan", "--init-image", "x.png"], "strength must be in (0, 1], got nan"),
    (["-p", "x", "--num-images", "0"], "num_images must be in 1..1000, got 0"),
    (["-p", "x", "--num-threads", "99999"], "num_threads must be in 1..256, got 99999"),
    (["-p", "x", "--strength", "1.5", "--init-image", "x.png"], "strength must be in (0, 1], got 1.5"),
    (["-p", "x", "--backend", "tpu"], "unknown backend 'tpu'; choose one of cpu, opencl, gl, litert-gpu, litert-cpu"),
    (["-p", "x", "-o", "out.jpg"], "--output must end in .png, got out.jpg"),
    (["-p", "x", "--init-image", "/nonexistent.png"], "init image not found: /nonexistent.png"),
    ([], "the following arguments are required: -p/--prompt"),
])
def test_generate_errors_are_one_line(capsys, tiny_export: Path, extra: list[str], message: str) -> None:
    rc, out, err = run_cli(capsys, "generate", tiny_export, *extra)
    assert (rc, out, err) == (2, "", f"sdlite: error: {message}\n")


def test_missing_model_file(capsys, tiny_export: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_export, broken)
    (broken / "vae_decoder.tflite").unlink()
    rc, _, err = run_cli(capsys, "generate", broken, "-p", "x")
    assert rc == 2
    assert err == f"sdlite: error: model file missing: {broken / 'vae_decoder.tflite'} (listed in manifest.json)\n"
    rc, _, err = run_cli(capsys, "generate", tmp_path / "nothing", "-p", "x")
    assert err == f"sdlite: error: model folder not found: {tmp_path / 'nothing'}\n"


def test_verbose_shows_where_ops_ran(capsys, tiny_export: Path, tmp_path: Path) -> None:
    rc, out, err = run_cli(capsys, "generate", tiny_export, "-p", "a cat", "-o", tmp_path / "v.png", "--verbose",
                           *FAST)
    assert rc == 0, err
    lines = [line for line in out.splitlines() if line.split(":")[0] in ("text_encoder", "unet", "vae_decoder")]
    assert [line.split(":")[0] for line in lines] == ["text_encoder", "unet", "vae_decoder"]
    assert all(": xnnpack: " in line for line in lines)


def test_a_model_file_names_its_folder(capsys, tiny_export: Path, tmp_path: Path) -> None:
    rc, out, err = run_cli(capsys, "generate", tiny_export / "unet.tflite", "-p", "x")
    assert (rc, out) == (2, "")
    assert err == f"sdlite: error: {tiny_export / 'unet.tflite'} is a file; give the converted model folder: {tiny_export}\n"
    stray = tmp_path / "m.tflite"
    stray.write_bytes(b"x")
    rc, _, err = run_cli(capsys, "generate", stray, "-p", "x")
    assert err == f"sdlite: error: {stray} is a file; give the converted model folder (with manifest.json)\n"


def test_unavailable_backend_fails_before_work(capsys, tiny_export: Path, tmp_path: Path) -> None:
    rc, _, err = run_cli(capsys, "generate", tiny_export, "-p", "x", "--backend", "litert-gpu",
                         "-o", tmp_path / "a.png")
    assert rc == 2 and err.startswith("sdlite: error: backend litert-gpu unavailable: ") and err.count("\n") == 1
    assert not (tmp_path / "a.png").exists()


def test_console_entry_point_exit_status(tiny_export: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "sdlite", "generate", str(tiny_export), "-p", "x", "--height", "63"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == "sdlite: error: height must be a positive multiple of 8, got 63\n"
    assert proc.stdout == ""


def test_the_png_writer_is_warmed_off_the_way_to_the_first_png() -> None:
    """warm_png_writer (called beside the models' warm-ups) makes the encoder's first use (its band threads, zlib's
    first encoder) happen there, so the first save_png pays only its encoding; writing PNGs never imports PIL."""
    code = ("import sys\n"
            "import sdlite.png_encode as png\n"
            "from sdlite.images import warm_png_writer\n"
            "assert png._pool is None\n"
            "warm_png_writer()\n"
            "assert png._pool is not None and 'zlib' in sys.modules\n"
            "assert not any(m == 'PIL' or m.startswith('PIL.') for m in sys.modules), 'PIL imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
