"""Full-size SD1.5 single-file checkpoint (issue #38 acceptance 1, large tier): a CompVis/LDM-layout .safetensors of
random SD1.5 weights with an EMA copy converts all four models with ``--verify``; the default takes the non-EMA
UNet and says so. Runs only with SDCONVERT_LARGE=1: the file is ~7.5 GB (two fp32 UNets), the export peaks at ~20 GB
RAM, tens of minutes on 2 cores."""
from __future__ import annotations

import gc
import json

import numpy as np

from sdconvert.cli import main
from sdconvert.configs import SD15, build_random_modules
from sdconvert.export.ldm_keys import to_ldm_state_dict

MODELS = ("text_encoder", "unet", "vae_decoder", "vae_encoder")


def test_sd15_single_file_with_ema_converts_all_models(tmp_path_factory, capfd):
    import safetensors.torch as st

    root = tmp_path_factory.mktemp("sd15-ldm")
    path = root / "sd15-random-ema.safetensors"
    modules = build_random_modules(SD15, seed=0)
    ema = build_random_modules(SD15, seed=1)["unet"]
    st.save_file(to_ldm_state_dict(modules, ema_unet=ema), str(path))
    text_ref = {k: v.numpy().copy() for k, v in modules["text_encoder"].state_dict().items()}
    del modules, ema
    gc.collect()

    out = root / "out"
    rc = main(["--checkpoint", str(path), "--verify", "-o", str(out)])
    printed, err = capfd.readouterr()
    assert rc == 0, err[-3000:]
    m = json.loads((out / "manifest.json").read_text())
    assert list(m["models"]) == list(MODELS) and m["config"] == "sd15"
    assert {p["model"] for p in m["parity"]} == set(MODELS)
    assert all(p["ok"] and p["rel"] <= 1e-4 for p in m["parity"]), m["parity"]
    assert m["source"]["ema"] == {"available": True, "used": False} and m["source"]["clip_layout"] == "sd15"
    assert "UNet weights: non-EMA" in printed
    # the text encoder really holds the file's weights (the token embedding table is the first constant that big)
    from sdconvert.graph.io import read_model

    te = read_model(out / "text_encoder.tflite")
    table = text_ref["embeddings.token_embedding.weight"]
    assert any(t.is_constant and t.shape == table.shape and np.array_equal(t.numpy(), table) for t in te.main.tensors)
