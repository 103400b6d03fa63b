"""Single-file (CompVis/LDM layout) checkpoints: every model converts, byte for byte as from the same weights in a
diffusers pipeline; the EMA choice; both CLIP key layouts (SD 1.5-era ``...transformer.text_model.*`` and SD 1.4-era
``...transformer.*``); pickle .ckpt with --allow-pickle.

The random-weight route (``tiny_export``) loads the very modules a diffusers folder of them holds
(``tests/converter/test_export.py::test_diffusers_folder_round_trip`` checks that route against the folder), so its
files are the reference here.
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from sdconvert.cli import main
from sdconvert.export import single_file
from sdconvert.configs import TINY, build_random_modules
from sdconvert.export.ldm_keys import CLIP_PREFIX, EMA_PREFIX, ema_key, to_ldm_state_dict
from sdconvert.export.verify import run_tflite

MODELS = ("text_encoder", "unet", "vae_decoder", "vae_encoder")
EMA_SEED = 1  # the EMA copy's weights: another random UNet, so the EMA choice shows in every output


@pytest.fixture(scope="module")
def ema_unet():
    return build_random_modules(TINY, seed=EMA_SEED)["unet"]


@pytest.fixture(scope="module")
def ldm_files(tmp_path_factory, tiny_modules, ema_unet) -> dict[str, Path]:
    """``ema``: SD 1.5-era keys + position_ids + LDM's EMA copy (as ``v1-5-pruned.safetensors``); ``sd14``: the older
    flat CLIP keys, no EMA; ``ckpt``: ``sd14`` as a pickle ``{"state_dict": ...}``."""
    import safetensors.torch as st
    import torch

    root = tmp_path_factory.mktemp("ldm")
    files = {"ema": root / "tiny-ema.safetensors", "sd14": root / "tiny-sd14.safetensors", "ckpt": root / "tiny.ckpt"}
    st.save_file(to_ldm_state_dict(tiny_modules, ema_unet=ema_unet), str(files["ema"]))
    sd14 = to_ldm_state_dict(tiny_modules, clip_layout="sd14")
    st.save_file(sd14, str(files["sd14"]))
    torch.save({"state_dict": sd14, "global_step": 1}, str(files["ckpt"]))
    return files


@pytest.fixture(scope="module")
def default_export(tmp_path_factory, ldm_files) -> tuple[Path, str]:
    """``sdconvert --checkpoint tiny-ema.safetensors --verify -o OUT``: all four models, default weights. Returns
    the folder and what the command printed (its summary; litert-torch's progress lines, which the CLI sends to
    conversion.log at the file-descriptor level, land here too because sys.stdout is swapped)."""
    out = tmp_path_factory.mktemp("sf") / "tiny-from-ldm"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["--checkpoint", str(ldm_files["ema"]), "--verify", "-o", str(out)])
    assert rc == 0, buf.getvalue()
    return out, buf.getvalue()


def _manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def test_file_layouts(ldm_files, tiny_modules):
    """What the fixtures write is what the issue describes: 540 tensors + position_ids, 326 EMA tensors."""
    import safetensors.torch as st

    ema = st.load_file(str(ldm_files["ema"]))
    n_unet = len(tiny_modules["unet"].state_dict())
    assert sum(k.startswith(EMA_PREFIX) for k in ema) == n_unet + 2  # + decay, num_updates
    assert len(ema) - n_unet - 2 == 541
    assert CLIP_PREFIX + "text_model.embeddings.position_ids" in ema
    assert ema_key("model.diffusion_model.input_blocks.0.0.weight") == "model_ema.diffusion_modelinput_blocks00weight"
    sd14 = st.load_file(str(ldm_files["sd14"]))
    assert CLIP_PREFIX + "embeddings.position_ids" in sd14
    assert not any(k.startswith(CLIP_PREFIX + "text_model.") or k.startswith(EMA_PREFIX) for k in sd14)


def test_default_export_converts_all_four_models_byte_identical(default_export, tiny_export):
    out, printed = default_export
    m, ref = _manifest(out), _manifest(tiny_export)
    assert list(m["models"]) == list(MODELS)
    for name in MODELS:  # same weights -> the same files, byte for byte
        assert m["models"][name]["sha256"] == ref["models"][name]["sha256"], name
    assert {p["model"] for p in m["parity"]} == set(MODELS) and all(p["ok"] for p in m["parity"])
    assert m["source"]["kind"] == "single_file" and m["config"] == "tiny"
    assert m["source"]["ema"] == {"available": True, "used": False}
    assert m["source"]["clip_layout"] == "sd15"
    note = "UNet weights: non-EMA (model.diffusion_model.*; the file also has EMA weights: --ema uses them)"
    assert note in printed.splitlines()


def test_ema_choice_changes_the_unet_and_is_recorded(capfd, tmp_path, ldm_files, default_export, ema_unet,
                                                     tiny_modules):
    import torch

    out = tmp_path / "ema"
    rc = main(["--checkpoint", str(ldm_files["ema"]), "--ema", "--models", "unet", "--verify", "--json",
               "-o", str(out)])
    assert rc == 0
    out_text = capfd.readouterr().out
    # under pytest, litert-torch's progress lines reach the captured sys.stdout (the CLI sends them to
    # conversion.log at the fd level); the JSON summary is the last thing printed
    summary = json.loads(out_text[out_text.index("\n{\n") + 1:])
    assert summary["source"]["ema"] == {"available": True, "used": True}
    m = _manifest(out)
    assert m["source"]["ema"] == {"available": True, "used": True} and m["parity"][0]["ok"]
    assert m["models"]["unet"]["sha256"] != _manifest(default_export[0])["models"]["unet"]["sha256"]
    rng = np.random.default_rng(7)
    feeds = {"sample": rng.standard_normal((1, 4, 8, 8), dtype=np.float32), "timestep": np.array([500.0], np.float32),
             "encoder_hidden_states": rng.standard_normal((1, 77, 32), dtype=np.float32)}
    got = run_tflite(out / "unet.tflite", feeds)["noise_pred"]
    with torch.no_grad():
        args = (torch.from_numpy(feeds["sample"]), torch.from_numpy(feeds["timestep"]))
        kw = {"encoder_hidden_states": torch.from_numpy(feeds["encoder_hidden_states"]), "return_dict": False}
        want_ema = ema_unet(*args, **kw)[0].numpy()
        want_plain = tiny_modules["unet"](*args, **kw)[0].numpy()
    np.testing.assert_allclose(got, want_ema, rtol=0, atol=1e-5)
    assert np.abs(got - want_plain).max() > 1e-2  # the other weights really are different


def test_ema_flag_errors(capsys, tmp_path, ldm_files):
    rc = main(["--checkpoint", str(ldm_files["sd14"]), "--ema", "-q", "-o", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("sdconvert: error: --ema: ") and "has no EMA weights" in err
    assert not (tmp_path / "a").exists()
    rc = main(["--random-weights", "tiny", "--no-ema", "-q", "-o", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip() == "sdconvert: error: --no-ema applies to --checkpoint files only"


def test_clip_layouts_and_pickle_load_the_same_weights(ldm_files, tiny_modules):
    want = tiny_modules["text_encoder"].state_dict()
    layouts = {}
    for kind, allow in (("ema", False), ("sd14", False), ("ckpt", True)):
        loaded = single_file.load(ldm_files[kind], allow_pickle=allow)
        layouts[kind] = loaded.source["clip_layout"]
        for module in ("text_encoder", "vae", "unet"):
            got = loaded.modules[module].state_dict()
            ref = tiny_modules[module].state_dict()
            assert set(got) == set(ref), (kind, module)
            assert all(np.array_equal(got[k].numpy(), ref[k].numpy()) for k in ref), (kind, module)
        ids = loaded.modules["text_encoder"].embeddings.position_ids
        assert not ids.is_meta and ids.tolist() == [list(range(TINY.text_encoder["max_position_embeddings"]))]
    assert set(want) and layouts == {"ema": "sd15", "sd14": "sd14", "ckpt": "sd14"}


def test_sd14_text_encoder_converts_byte_identical_and_verifies_on_every_backend(tmp_path, ldm_files, tiny_export):
    out = tmp_path / "sd14"
    assert main(["--checkpoint", str(ldm_files["sd14"]), "--models", "text_encoder", "--verify",
                 "--verify-backend", "cpu,opencl,gl", "-q", "-o", str(out)]) == 0
    m = _manifest(out)
    assert m["models"]["text_encoder"]["sha256"] == _manifest(tiny_export)["models"]["text_encoder"]["sha256"]
    assert m["source"]["ema"] == {"available": False, "used": False} and m["source"]["clip_layout"] == "sd14"
    assert [(p["model"], p["backend"]) for p in m["parity"]] == [("text_encoder", b) for b in ("cpu", "opencl", "gl")]
    assert all(p["ok"] and p["rel"] <= 1e-4 for p in m["parity"])
    assert m["op_errors"] == {}  # nothing fused, no per-op table
