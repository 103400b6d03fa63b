"""Foundation: tiny export parity, precisions, manifest, diffusers-folder round trip."""
from __future__ import annotations

import json

import numpy as np
import pytest

from sdconvert import manifest as mf
from sdconvert.export.convert import ConvertOptions, run
from sdconvert.export.verify import run_tflite
from sdlite.tflite_info import read_model_info

MODELS = ("text_encoder", "unet", "vae_decoder", "vae_encoder")


def test_tiny_export_all_models_fp32_parity(tiny_export):
    m = mf.read(tiny_export)
    assert sorted(m["models"]) == sorted(MODELS)
    assert {p["model"] for p in m["parity"]} == set(MODELS)
    for p in m["parity"]:
        assert p["rel"] <= 1e-4, p
        assert p["psnr_db"] > 80, p


def test_manifest_contents(tiny_export):
    m = mf.read(tiny_export)
    assert m["version"] == 1 and m["config"] == "tiny" and m["precision"] == "fp32"
    assert (m["height"], m["width"], m["cfg_batch"], m["vae_scale_factor"]) == (64, 64, 1, 8)
    assert m["source"] == {"kind": "random", "config": "tiny", "seed": 0}
    for k in ("litert-torch", "ai-edge-litert", "torch", "diffusers"):
        assert m["tools"][k]
    for name, e in m["models"].items():
        path = tiny_export / e["file"]
        assert e["sha256"] == mf.sha256(path) and e["bytes"] == path.stat().st_size
        assert e["op_histogram"] == read_model_info(path).op_histogram and e["num_ops"] == sum(e["op_histogram"].values())
    unet = m["models"]["unet"]
    assert {i["name"]: (i["shape"], i["dtype"]) for i in unet["inputs"]} == {
        "sample": ([1, 4, 8, 8], "float32"), "timestep": ([1], "float32"),
        "encoder_hidden_states": ([1, 77, 32], "float32")}
    assert [o["name"] for o in unet["outputs"]] == ["noise_pred"]
    assert m["models"]["text_encoder"]["inputs"][0] == {"name": "input_ids", "shape": [1, 77], "dtype": "int32"}
    assert m["models"]["vae_decoder"]["outputs"][0]["shape"] == [1, 3, 64, 64]
    assert m["models"]["vae_encoder"]["outputs"][0]["shape"] == [1, 8, 8, 8]
    assert unet["op_histogram"]["BATCH_MATMUL"] >= 8 and unet["op_histogram"]["CONV_2D"] > 10
    vocab = json.loads((tiny_export / "tokenizer" / "vocab.json").read_text())
    assert len(vocab) == 49408
    assert json.loads((tiny_export / "scheduler" / "scheduler_config.json").read_text())["_class_name"] == "PNDMScheduler"
    assert not list(tiny_export.parent.glob(".*tmp-*"))


def test_exported_unet_matches_torch_on_fresh_inputs(tiny_export, tiny_modules):
    import torch

    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4, 8, 8), dtype=np.float32)
    c = rng.standard_normal((1, 77, 32), dtype=np.float32)
    t = np.array([500.0], np.float32)
    got = run_tflite(tiny_export / "unet.tflite", {"sample": x, "timestep": t, "encoder_hidden_states": c})["noise_pred"]
    with torch.no_grad():
        ref = tiny_modules["unet"](torch.from_numpy(x), torch.from_numpy(t), encoder_hidden_states=torch.from_numpy(c)).sample.numpy()
    assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-4


@pytest.mark.parametrize("precision,ratio", [("fp16", 0.6), ("int8", 0.4)])
def test_weight_only_precisions_run_finite_and_shrink(tmp_path, tiny_export, precision, ratio):
    out = tmp_path / precision
    res = run(ConvertOptions(out=out, random_weights="tiny", precision=precision, models=("unet",), verify=True, quiet=True))
    assert res.ok, res.parity
    e = res.manifest["models"]["unet"]
    assert e["op_histogram"]["DEQUANTIZE"] > 10
    assert e["bytes"] < ratio * mf.read(tiny_export)["models"]["unet"]["bytes"]
    y = run_tflite(out / "unet.tflite", {"sample": np.ones((1, 4, 8, 8), np.float32), "timestep": np.array([10.0], np.float32),
                                         "encoder_hidden_states": np.ones((1, 77, 32), np.float32)})["noise_pred"]
    assert np.isfinite(y).all()
    assert res.parity[0].rel > 1e-6  # the weights really were rounded


def test_cfg_batch_2_and_custom_size(tmp_path):
    res = run(ConvertOptions(out=tmp_path / "b2", random_weights="tiny", cfg_batch=2, height=128, width=64,
                             models=("unet",), verify=True, quiet=True))
    assert res.ok
    shapes = {i["name"]: i["shape"] for i in res.manifest["models"]["unet"]["inputs"]}
    assert shapes["sample"] == [2, 4, 16, 8] and shapes["encoder_hidden_states"] == [2, 77, 32]


def test_diffusers_folder_round_trip(tmp_path, tiny_diffusers_dir, tiny_export):
    out = tmp_path / "from-folder"
    res = run(ConvertOptions(out=out, model_dir=tiny_diffusers_dir, models=("text_encoder", "unet"), verify=True, quiet=True))
    assert res.ok and res.manifest["source"]["kind"] == "diffusers"
    assert res.manifest["source"]["pipeline"] == "StableDiffusionPipeline"
    assert (res.manifest["height"], res.manifest["width"]) == (64, 64)
    # same weights as the random-weight export: identical outputs on the same inputs
    rng = np.random.default_rng(3)
    feeds = {"sample": rng.standard_normal((1, 4, 8, 8), dtype=np.float32), "timestep": np.array([42.0], np.float32),
             "encoder_hidden_states": rng.standard_normal((1, 77, 32), dtype=np.float32)}
    a = run_tflite(out / "unet.tflite", feeds)["noise_pred"]
    b = run_tflite(tiny_export / "unet.tflite", feeds)["noise_pred"]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    for f in ("vocab.json", "merges.txt"):  # rebuilt from the folder's tokenizer.json, identical content
        if f == "vocab.json":
            assert json.loads((out / "tokenizer" / f).read_text()) == json.loads((tiny_export / "tokenizer" / f).read_text())
        else:
            assert (out / "tokenizer" / f).read_text().split("\n")[1:] == (tiny_export / "tokenizer" / f).read_text().split("\n")[1:]
