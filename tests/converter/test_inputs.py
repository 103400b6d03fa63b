"""Sources and bad input: single-file checkpoints, and one-line errors that leave no output behind."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sdconvert.cli import main


def _no_output(out: Path) -> bool:
    return not out.exists() and not list(out.parent.glob(f".{out.name}.tmp-*"))


def _fail(capsys, args: list[str], out: Path) -> str:
    rc = main([*args, "-o", str(out), "-q"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("sdconvert: error: ") and "Traceback" not in err
    assert _no_output(out)
    return err


@pytest.fixture(scope="module")
def tiny_single_file(tmp_path_factory, tiny_modules) -> Path:
    import safetensors.torch as st

    from sdconvert.export.ldm_keys import to_ldm_state_dict

    path = tmp_path_factory.mktemp("ckpt") / "tiny-sd1.safetensors"
    st.save_file(to_ldm_state_dict(tiny_modules), str(path))
    return path


def _edit_folder(src: Path, dst: Path, sub: str, **changes) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    for s in ("unet", "vae", "text_encoder"):  # weights are not read before the architecture check
        (dst / s / "diffusion_pytorch_model.safetensors").write_bytes(b"")
    cfg = json.loads((dst / sub / "config.json").read_text())
    cfg.update(changes)
    (dst / sub / "config.json").write_text(json.dumps(cfg))
    return dst


def test_missing_and_unknown_folders(capsys, tmp_path):
    assert "does not exist" in _fail(capsys, [str(tmp_path / "nope")], tmp_path / "o1")
    (tmp_path / "empty").mkdir()
    assert "not a diffusers pipeline folder" in _fail(capsys, [str(tmp_path / "empty")], tmp_path / "o2")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "model_index.json").write_text('{"_class_name": "KandinskyPipeline"}')
    assert "KandinskyPipeline" in _fail(capsys, [str(tmp_path / "other")], tmp_path / "o3")
    assert "unknown --random-weights config 'sd3'" in _fail(capsys, ["--random-weights", "sd3"], tmp_path / "o4")
    assert "exactly one source" in _fail(capsys, [], tmp_path / "o5")


def test_sd2_and_sdxl_folders_rejected(capsys, tmp_path, tiny_diffusers_dir):
    sd2 = _edit_folder(tiny_diffusers_dir, tmp_path / "sd2", "unet", cross_attention_dim=1024, use_linear_projection=True,
                       attention_head_dim=[5, 10, 20, 20])
    assert "Stable Diffusion 2.x" in _fail(capsys, [str(sd2)], tmp_path / "o1")
    xl = _edit_folder(tiny_diffusers_dir, tmp_path / "xl", "unet", addition_embed_type="text_time", addition_time_embed_dim=256)
    assert "SDXL" in _fail(capsys, [str(xl)], tmp_path / "o2")
    inpaint = _edit_folder(tiny_diffusers_dir, tmp_path / "inp", "unet", in_channels=9)
    assert "in_channels=9" in _fail(capsys, [str(inpaint)], tmp_path / "o3")


def test_truncated_and_corrupt_safetensors(capsys, tmp_path, tiny_diffusers_dir, tiny_single_file):
    trunc = tmp_path / "trunc"
    shutil.copytree(tiny_diffusers_dir, trunc)
    w = trunc / "unet" / "diffusion_pytorch_model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    assert "truncated safetensors file" in _fail(capsys, [str(trunc)], tmp_path / "o1")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\xff" * 64)
    assert "corrupt safetensors file" in _fail(capsys, ["--checkpoint", str(bad)], tmp_path / "o2")
    half = tmp_path / "half.safetensors"
    half.write_bytes(tiny_single_file.read_bytes()[:100_000])
    assert "truncated safetensors file" in _fail(capsys, ["--checkpoint", str(half)], tmp_path / "o3")


def test_checkpoint_kinds_rejected(capsys, tmp_path):
    import safetensors.torch as st
    import torch

    ckpt = tmp_path / "model.ckpt"
    torch.save({"state_dict": {}}, str(ckpt))
    assert "--allow-pickle" in _fail(capsys, ["--checkpoint", str(ckpt)], tmp_path / "o1")
    sd2 = tmp_path / "sd2.safetensors"
    st.save_file({"cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight": torch.zeros(3, 3),
                  "model.diffusion_model.input_blocks.0.0.weight": torch.zeros(320, 4, 3, 3)}, str(sd2))
    assert "2.x" in _fail(capsys, ["--checkpoint", str(sd2)], tmp_path / "o2")
    xl = tmp_path / "xl.safetensors"
    st.save_file({"conditioner.embedders.0.x": torch.zeros(1)}, str(xl))
    assert "SDXL" in _fail(capsys, ["--checkpoint", str(xl)], tmp_path / "o3")
    other = tmp_path / "lora.safetensors"
    st.save_file({"lora_unet_down.weight": torch.zeros(1)}, str(other))
    assert "not a Stable Diffusion 1.x checkpoint" in _fail(capsys, ["--checkpoint", str(other)], tmp_path / "o4")


def test_bad_options(capsys, tmp_path):
    assert "multiple of 64" in _fail(capsys, ["--random-weights", "tiny", "--height", "100"], tmp_path / "o1")
    assert "unknown model" in _fail(capsys, ["--random-weights", "tiny", "--models", "unet,refiner"], tmp_path / "o2")


def test_existing_and_unwritable_output(capsys, tmp_path):
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    rc = main(["--random-weights", "tiny", "-o", str(out), "-q"])
    assert rc == 2 and "already exists; pass --overwrite" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "x"
    # /proc refuses new entries even for root
    assert "cannot write output folder" in _fail(capsys, ["--random-weights", "tiny"], Path("/proc/sdconvert-out"))
    file_parent = tmp_path / "a-file"
    file_parent.write_text("")
    assert "cannot write output folder" in _fail(capsys, ["--random-weights", "tiny"], file_parent / "out")


def test_disk_full_during_write_leaves_nothing(tmp_path):
    """A file-size limit makes the model write fail mid-way (EFBIG), as a full disk does (ENOSPC)."""
    out = tmp_path / "full"
    limit = 2 << 20  # the tiny text encoder is ~6 MiB

    def limit_writes() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-m", "sdconvert.cli", "--random-weights", "tiny", "--models", "text_encoder",
                        "-o", str(out), "-q"], capture_output=True, text=True, preexec_fn=limit_writes, env=env, timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().startswith("sdconvert: error: no space left while writing"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert _no_output(out)


# -- outputs that would overlap or delete an input, and folders left behind (issue 34) ---------------------------
def _source_folder(tmp_path: Path) -> Path:
    src = tmp_path / "my-sd"
    (src / "unet").mkdir(parents=True)
    (src / "model_index.json").write_text("{}")
    (src / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(b"weights")
    return src


def _intact(src: Path) -> bool:
    return (src / "unet" / "diffusion_pytorch_model.safetensors").read_bytes() == b"weights"


@pytest.mark.parametrize(("out", "message"), [
    ("{src}", "output {src} is the input {src}; give another output folder"),
    ("{src}/out", "output {src}/out is inside the input {src}; give a folder outside it"),
    ("{parent}", "output {parent} contains the input {src}; replacing it would delete the input"),
])
def test_output_may_not_overlap_the_input(capsys, tmp_path, out, message):
    src = _source_folder(tmp_path)
    out = out.format(src=src, parent=tmp_path)
    rc = main([str(src), "-o", out, "--overwrite", "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and err == f"sdconvert: error: {message.format(src=src, parent=tmp_path)}\n"
    assert _intact(src) and sorted(p.name for p in tmp_path.iterdir()) == ["my-sd"]


def test_overwrite_replaces_only_sdconvert_outputs(capsys, tmp_path):
    out = tmp_path / "photos"
    out.mkdir()
    (out / "cat.jpg").write_bytes(b"jpg")
    rc = main(["--random-weights", "tiny", "-o", str(out), "--overwrite", "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and err == (f"sdconvert: error: output {out} is a folder with other files (no manifest.json), not an "
                               "sdconvert output; refusing to replace it\n")
    assert (out / "cat.jpg").read_bytes() == b"jpg"


def test_failed_conversion_leaves_no_parent_folders(capsys, tmp_path):
    out = tmp_path / "a" / "b" / "c"
    rc = main([str(tmp_path / "no-such-model"), "-o", str(out), "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("sdconvert: error: ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_failed_optimize_leaves_no_parent_folders(capsys, tiny_export, tmp_path):
    from sdconvert.optimize_cli import main as optimize_main

    src = tmp_path / "export"
    shutil.copytree(tiny_export, src)
    (src / "vae_decoder.tflite").write_bytes((tiny_export / "vae_decoder.tflite").read_bytes()[:5000])
    rc = optimize_main([str(src), "--fuse", "-q", "-o", str(tmp_path / "x" / "y" / "fused")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"sdconvert optimize: error: {src / 'vae_decoder.tflite'}: corrupt flatbuffer: ")
    assert err.count("\n") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_optimize_output_inside_its_input_folder_is_refused(capsys, tiny_export, tmp_path):
    from sdconvert.optimize_cli import main as optimize_main

    rc = optimize_main([str(tiny_export), "--fuse", "-o", str(tiny_export / "fused")])
    err = capsys.readouterr().err
    assert rc == 2 and err == (f"sdconvert optimize: error: output {tiny_export / 'fused'} is inside the input "
                               f"{tiny_export}; give a folder outside it\n")
    assert not (tiny_export / "fused").exists()
