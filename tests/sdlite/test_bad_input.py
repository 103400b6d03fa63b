"""Issue 34's runtime cases: bad numbers, changed model files, NaN during generation, bad delegate options and a bad
delegate library end in one line (exit 2), never a traceback, a silent black image or a swallowed option."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sdlite import checksums, json_out, native
from sdlite.cli import main
from sdlite.errors import SdliteError
from sdlite.flatbuffer_verify import parse_model_buffer
from sdlite.manifest import load_manifest

FAST = ["--steps", "2", "--num-threads", "1", "--no-progress"]


def run_cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def private_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where ``sdlite generate`` remembers verified files, for this test only."""
    record = tmp_path / "record" / checksums.RECORD_NAME
    monkeypatch.setattr(checksums, "default_record", lambda: record)
    return record


def _poison_weights(path: Path, value: float) -> None:
    """Write ``value`` over the largest float32 weight buffer of the model at ``path``."""
    data = bytearray(path.read_bytes())
    tree = parse_model_buffer(bytes(data))
    buffers = tree.get(12, [])
    floats = {t.get(8, 0) for t in tree.get(8)[0].get(4, []) if t.get(6, 0) == 0 and t.get(8, 0) > 0}
    start, n = max((buffers[b].get(4, (0, 0)) for b in floats), key=lambda span: span[1])
    data[start : start + n] = np.full(n // 4, value, np.float32).tobytes()
    path.write_bytes(bytes(data))


# -- numbers -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e30"])
def test_guidance_scale_must_be_finite_and_sane(capsys, tiny_export: Path, tmp_path: Path, value: str) -> None:
    png = tmp_path / "x.png"
    rc, out, err = run_cli(capsys, "generate", tiny_export, "-p", "x", f"--guidance-scale={value}", "-o", png, *FAST)
    assert (rc, out) == (2, "")
    assert err == f"sdlite: error: guidance scale must be a finite number in 0..1000, got {float(value)}\n"
    assert not png.exists()


def test_json_output_is_strict_json() -> None:
    text = json_out.dumps({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": np.float32(2.0), "d": np.arange(2),
                           "e": Path("/x")})
    assert json.loads(text) == {"a": None, "b": [None, None, 1.5], "c": 2.0, "d": [0, 1], "e": "/x"}
    assert "NaN" not in text and "Infinity" not in text


# -- non-finite values during generation --------------------------------------------------------------------------
def test_nan_from_the_unet_stops_naming_the_step_and_model(capsys, tiny_export: Path, tmp_path: Path,
                                                          private_record: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_export, broken)
    _poison_weights(broken / "unet.tflite", math.nan)
    png = tmp_path / "x.png"
    rc, out, err = run_cli(capsys, "generate", broken, "-p", "x", "-o", png, "--no-verify", *FAST)
    assert (rc, out) == (2, "")
    assert re.fullmatch(r"sdlite: error: step 1/\d: the noise prediction of unet\.tflite \(guidance 7\.5\) has \d+ "
                        r"non-finite value\(s\) \(NaN or Inf\) of 256; stopping\n", err), err
    assert not png.exists()


# -- checksums ---------------------------------------------------------------------------------------------------
def test_changed_model_file_is_named_and_no_verify_skips(capsys, tiny_export: Path, tmp_path: Path,
                                                          private_record: Path) -> None:
    changed = tmp_path / "changed"
    shutil.copytree(tiny_export, changed)
    data = bytearray((changed / "unet.tflite").read_bytes())
    start, n = next(b.get(4) for b in parse_model_buffer(bytes(data)).get(12, []) if b.get(4, (0, 0))[1] >= 64)
    data[start + n // 2] ^= 0x01  # one flipped weight bit: a valid model, a different file
    (changed / "unet.tflite").write_bytes(bytes(data))
    png = tmp_path / "x.png"
    rc, out, err = run_cli(capsys, "generate", changed, "-p", "x", "-o", png, *FAST)
    assert (rc, out) == (2, "")
    assert err == ("sdlite: error: unet.tflite does not match the sha256 in manifest.json (changed or corrupt since it "
                   "was written); re-export it, or pass --no-verify to run it anyway\n")
    assert not png.exists()
    rc, _, err = run_cli(capsys, "generate", changed, "-p", "x", "-o", png, "--no-verify", *FAST)
    assert rc == 0, err
    assert png.is_file()


def test_verified_files_are_remembered_until_they_change(tiny_export: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_export, folder)
    record = tmp_path / "verified.json"
    manifest = load_manifest(folder)
    names = ("text_encoder", "unet", "vae_decoder")
    assert sorted(p.name for p in manifest.verify_checksums(names, record)) == [f"{n}.tflite" for n in names]
    assert manifest.verify_checksums(names, record) == []  # remembered: no file hashed again
    unet = folder / "unet.tflite"
    os.utime(unet, ns=(unet.stat().st_atime_ns, unet.stat().st_mtime_ns + 1_000_000_000))
    assert manifest.verify_checksums(names, record) == [unet]  # touched: hashed again (and still matches)
    assert manifest.verify_checksums(names, record=None) != []  # no record: always hashed


def test_manifest_cannot_point_outside_its_folder(tiny_export: Path, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(tiny_export, folder)
    raw = json.loads((folder / "manifest.json").read_text())
    raw["models"]["unet"]["file"] = "../../etc/passwd"
    (folder / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(SdliteError, match=r"bad entry for model 'unet': file '../../etc/passwd' is not inside"):
        load_manifest(folder)
    raw["models"]["unet"]["file"] = "unet.tflite"
    raw["vae_scaling_factor"] = math.nan
    (folder / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(SdliteError, match=r"vae_scaling_factor must be a finite number > 0, got nan"):
        load_manifest(folder)


# -- delegate options --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("options", "message"), [
    ("num_threads:99999", "num_threads must be an int in 1..256, got 99999"),
    ("attention_tiling:zzz", "option attention_tiling='zzz' is not a tiling (e.g. r40, h80, r80, r160, dyn, legacy, "
                             "short, short32)"),
    ("attention_block_q:0", "attention_block_q must be an int in 1..1024, got 0"),
    ("gemm_tiles:64x", "option gemm_tiles='64x' is malformed; expected BMxBN[nTHREADS|tc][/splits] with splits 1, 2, "
                       "4, 8 or 16, e.g. 64x64n128/2"),
    ("gemm_tiles:64x64/3", "option gemm_tiles='64x64/3' is malformed; expected BMxBN[nTHREADS|tc][/splits] with "
                           "splits 1, 2, 4, 8 or 16, e.g. 64x64n128/2"),
    ("profile_path:/nonexistent-dir/p.json",
     "option profile_path='/nonexistent-dir/p.json' cannot be written: No such file or directory"),
    ("profile_path:/proc/p.json", "option profile_path='/proc/p.json' cannot be written: No such file or directory"),
])
def test_bad_delegate_options_are_refused_even_without_the_delegate(capsys, tiny_export: Path, options: str,
                                                                    message: str) -> None:
    """The plain text encoder runs on XNNPACK alone, so no delegate would ever read these options: they are still
    checked, by the delegate's own parser."""
    rc, out, err = run_cli(capsys, "bench", tiny_export / "text_encoder.tflite", "--num_runs", "1",
                           "--delegate_options", options)
    assert (rc, out, err) == (2, "", f"sdlite: error: {message}\n")


@pytest.mark.parametrize("key", ["cache_dir", "opencl_cache_dir"])  # opencl_cache_dir: the deprecated spelling
def test_unwritable_cache_dir_is_one_warning(capsys, tiny_export: Path, tmp_path: Path, key: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc, out, err = run_cli(capsys, "bench", tiny_export / "text_encoder.tflite", "--num_runs", "1",
                           "--delegate_options", f"{key}:{blocker}/cache")
    assert rc == 0 and "Inference timings" in out
    assert err == (f"sdlite: warning: {key} '{blocker}/cache' cannot be written; the GPU backends "
                   "compile their programs at every start\n")


def test_unwritable_profile_path_on_gl_is_refused_before_loading(capsys, tiny_export: Path) -> None:
    rc, out, err = run_cli(capsys, "bench", tiny_export / "text_encoder.tflite", "--backend", "gl", "--num_runs", "1",
                           "--delegate_options", "profile_path:/proc/none/p.json")
    assert (rc, out) == (2, "")
    assert err == "sdlite: error: option profile_path='/proc/none/p.json' cannot be written: No such file or directory\n"


def test_a_broken_delegate_library_is_one_line_without_an_ignored_exception(tiny_export: Path, tmp_path: Path) -> None:
    junk = tmp_path / native.LIBRARY_NAME
    junk.write_bytes(b"not a library")
    env = {**os.environ, native.ENV_DELEGATE_PATH: str(junk)}
    code = ("from sdlite import native\n"
            "try:\n    native.load('cpu')\nexcept native.NativeDelegateError as e:\n    print(e)\n"
            "import gc; gc.collect()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stderr == ""  # no "Exception ignored in: <function Delegate.__del__"
    assert proc.stdout == f"cannot load {junk}: {junk}: file too short\n"
