"""``python3 -m bench.fp16_copy SRC DST``: the converted folder SRC with fp16 weight-only model files (the DEQUANTIZE
form ``sdconvert --precision fp16`` writes) in DST, each model's manifest entry made anew (sdconvert.manifest, as
``sdconvert optimize`` does): the fp16 download of the same weights and plan, for the phone runs (phone_runs.sh)."""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from sdconvert import manifest as mf
from sdconvert.export.precision import convert_weights


def main(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.tflite"), dirs_exist_ok=True)
    manifest = mf.read(src)
    for name, entry in manifest["models"].items():
        convert_weights(src / entry["file"], dst / entry["file"], "fp16")
        manifest["models"][name] = mf.model_entry(dst / entry["file"])
        print(name, manifest["models"][name]["bytes"] >> 20, "MiB", flush=True)
    manifest["precision"] = "fp16"
    mf.write(dst / "manifest.json", manifest)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a converted folder (manifest.json, *.tflite)")
    ap.add_argument("dst", type=Path, help="the fp16 copy")
    args = ap.parse_args()
    main(args.src, args.dst)
