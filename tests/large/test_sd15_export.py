"""Full-size SD1.5 export (random weights): runs only with SDCONVERT_LARGE=1 (~20 GB RAM, several minutes)."""
from __future__ import annotations

import os

from sdconvert.export.convert import ConvertOptions, run


def test_sd15_fp16_export_verify(tmp_path_factory):
    out = tmp_path_factory.mktemp("sd15") / "sd15-fp16"
    res = run(ConvertOptions(out=out, random_weights="sd15", precision="fp16", verify=True, quiet=True,
                             models=("text_encoder", "unet", "vae_decoder")))
    assert res.ok, res.parity
    m = res.manifest
    assert sorted(m["models"]) == ["text_encoder", "unet", "vae_decoder"]
    ops = m["models"]["unet"]["num_ops"]
    # the DEQUANTIZE ops of weight-only fp16 come on top of the UNet's own ops
    own = ops - m["models"]["unet"]["op_histogram"].get("DEQUANTIZE", 0)
    assert 2837 <= own <= 3200, own
    assert m["models"]["unet"]["bytes"] < 2**31  # fp16 UNet fits in one flatbuffer (~1.6 GB)
    assert {p["model"] for p in m["parity"]} == {"text_encoder", "unet", "vae_decoder"}
    for p in m["parity"]:
        assert p["rel"] <= 2e-2, p
    assert os.path.getsize(out / "unet.tflite") == m["models"]["unet"]["bytes"]
