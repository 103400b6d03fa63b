"""GL backend end to end (Mesa llvmpipe in CI): every tiny SD model -- plain, fused (Sd* ops), and fused +
Winograd -- runs as ONE delegated partition with no CPU nodes and matches the plain CPU interpreter running
the unrewritten model to <= 1e-4 relative."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from harness import assert_close, signature_inputs
from sdconvert.graph import read_model
from sdlite import native

MODELS = ("text_encoder", "unet", "vae_decoder", "vae_encoder")


@pytest.fixture(scope="module")
def tiny_fused_winograd_export(tmp_path_factory, tiny_export: Path) -> Path:
    """``sdconvert optimize --fuse --winograd 4 --attention-variant flash`` of the tiny export (the session's
    ``tiny_fused_export`` uses the default variant, so the two fused folders cover both attention kernels)."""
    from sdconvert.export.optimize import GraphOptions
    from sdconvert.optimize_cli import optimize_folder

    out = tmp_path_factory.mktemp("tiny-fused-winograd") / "sd-tiny"
    optimize_folder(tiny_export, out, GraphOptions(fuse=True, winograd="4", attention_variant="flash"))
    return out


def _check(reference_path: Path, path: Path, rng) -> dict[str, int]:
    """Run `path` on gl twice and compare with the CPU interpreter on `reference_path`; returns the op
    histogram of `path`."""
    reference = Interpreter(model_path=str(reference_path)).get_signature_runner("serving_default")
    inputs = signature_inputs(reference, rng, timestep=500.0)
    expected = reference(**inputs)
    histogram = read_model(path).op_histogram()

    delegate = native.load(backend="gl")
    runner = Interpreter(model_path=str(path), experimental_delegates=[delegate]).get_signature_runner(
        "serving_default")
    runner(**inputs)
    actual = runner(**inputs)  # second invoke: buffers and programs reused, same answer
    stats = native.stats(delegate)
    assert stats["backend"] == "gl"
    assert stats["partitions"] == 1
    assert stats["claimed_nodes"] == sum(histogram.values())
    assert stats["declined_nodes"] == 0 and stats["declined"] == []
    assert stats["invocations"] == 2
    assert set(actual) == set(expected)
    for name, value in expected.items():
        assert_close(actual[name], value, rtol=1e-4)
    return histogram


@pytest.mark.parametrize("model", MODELS)
def test_plain_model_fully_delegated_and_matches_cpu(tiny_export: Path, rng, model):
    path = tiny_export / f"{model}.tflite"
    histogram = _check(path, path, rng)
    assert not any(op.startswith("Sd") for op in histogram)


@pytest.mark.parametrize("model", MODELS)
def test_fused_model_fully_delegated_and_matches_unfused_cpu(tiny_export: Path, tiny_fused_export: Path, rng,
                                                             model):
    histogram = _check(tiny_export / f"{model}.tflite", tiny_fused_export / f"{model}.tflite", rng)
    if model != "vae_encoder":  # every other tiny model has attention + norms to fuse
        assert histogram.get("SdAttention", 0) > 0 and histogram.get("SdGroupNorm", 0) + histogram.get(
            "SdGelu", 0) > 0, histogram


@pytest.mark.parametrize("model", ("unet", "vae_decoder"))
def test_fused_winograd_model_fully_delegated_and_matches_unfused_cpu(tiny_export: Path,
                                                                      tiny_fused_winograd_export: Path, rng, model):
    histogram = _check(tiny_export / f"{model}.tflite", tiny_fused_winograd_export / f"{model}.tflite", rng)
    assert histogram.get("SdConv2DWinograd", 0) > 0, histogram
    assert histogram.get("SdAttention", 0) > 0, histogram


def test_a_profile_that_cannot_be_written_is_one_warning_not_a_failed_inference(tmp_path):
    """The profile folder vanishes after the delegate was created: the inference still succeeds, the delegate logs
    one warning (it used to fail every invoke, a RuntimeError traceback out of sdlite's runner)."""
    import subprocess
    import sys

    from tflite_models import flex, gelu_model

    folder = tmp_path / "prof"
    folder.mkdir()
    model = tmp_path / "gelu.tflite"
    model.write_bytes(gelu_model([2, 8], flex({"approximate": "tanh"})))
    code = (
        "import shutil\nimport numpy as np\nfrom ai_edge_litert.interpreter import Interpreter\nfrom sdlite import native\n"
        f"d = native.load('gl', profile_path={str(folder / 'p.json')!r}, log_level='warning')\n"
        f"it = Interpreter(model_path={str(model)!r}, experimental_delegates=[d])\n"
        "it.allocate_tensors()\n"
        f"shutil.rmtree({str(folder)!r})\n"
        "for _ in range(3):\n"
        "    it.set_tensor(it.get_input_details()[0]['index'], np.ones((2, 8), np.float32))\n"
        "    it.invoke()\n"
        "print(float(it.get_tensor(it.get_output_details()[0]['index'])[0, 0]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert abs(float(proc.stdout) - 0.8411920) < 1e-5
    warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line]
    assert warnings == [f"sdgpu: WARNING: gl: cannot write the profile to {folder / 'p.json'}"], proc.stderr


def test_the_first_inference_names_each_gl_program_while_it_compiles(tiny_fused_winograd_export: Path, tmp_path):
    """A GL program compiles on its first launch, inside the first inference, and a driver may take seconds for one
    (NVIDIA's GL: 35 s for the VAE's attn_flash_d512 before its loops were bounded): the set-up's detail (stats
    ``setup_detail``, the progress lines, sdlite's bar) names the program meanwhile. A fresh process with Mesa's
    shader cache off (a cached llvmpipe compile takes ~1 ms, too short to be seen by polling) and an empty delegate
    cache, so every program compiles for tens of milliseconds while the stats are read every few hundred
    microseconds."""
    import json
    import os
    import subprocess
    import sys

    code = (
        "import json, threading, numpy as np\n"
        "from ai_edge_litert.interpreter import Interpreter\nfrom sdlite import native\n"
        f"d = native.load('gl', cache_dir={str(tmp_path / 'cache')!r})\n"
        f"it = Interpreter(model_path={str(tiny_fused_winograd_export / 'vae_decoder.tflite')!r}, "
        "experimental_delegates=[d])\n"
        "it.allocate_tensors()\n"
        "for det in it.get_input_details():\n"
        "    it.set_tensor(det['index'], np.ones(det['shape'], np.float32))\n"
        "seen, done = [], threading.Event()\n"
        "def poll():\n"
        "    while not done.is_set():\n"
        "        s = native.stats(d)\n"
        "        seen.append((s['setup_phase'], s['setup_detail']))\n"
        "t = threading.Thread(target=poll)\nt.start()\n"
        "it.invoke()\ndone.set()\nt.join()\n"
        "s = native.stats(d)\n"
        "print(json.dumps({'seen': sorted(set(seen)), 'built': s['programs_built'], 'detail': s['setup_detail']}))\n"
    )
    env = {**os.environ, "MESA_SHADER_CACHE_DISABLE": "true", "MESA_GLSL_CACHE_DISABLE": "true"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    compiling = {d.split("'")[1] for _, d in out["seen"] if d.startswith("compiling kernel '")}
    assert out["built"] >= 10 and len(compiling) >= out["built"] // 2, (out["built"], sorted(compiling))
    assert {"winograd_output_f4_st", "group_norm_finalize_affine"} <= compiling, sorted(compiling)
    assert all(phase for phase, d in out["seen"] if d.startswith("compiling kernel ")), "a compile outside a phase"
    assert out["detail"] == ""  # nothing left behind
