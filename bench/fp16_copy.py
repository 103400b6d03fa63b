"""``python3 bench/fp16_copy.py SRC DST``: the converted folder SRC with fp16 weight-only model files (the DEQUANTIZE
form ``sdconvert --precision fp16`` writes) in DST, its manifest's sizes and sha256 sums updated: the fp16 download
of the same weights and plan, for the phone runs (bench/phone_runs.sh)."""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

from sdconvert.export.precision import convert_weights


def main(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.tflite"), dirs_exist_ok=True)
    manifest = json.loads((src / "manifest.json").read_text())
    for name, spec in manifest["models"].items():
        convert_weights(src / spec["file"], dst / spec["file"], "fp16")
        data = (dst / spec["file"]).read_bytes()
        spec["sha256"], spec["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
        print(name, len(data) >> 20, "MiB", flush=True)
    manifest["precision"] = "fp16"
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a converted folder (manifest.json, *.tflite)")
    ap.add_argument("dst", type=Path, help="the fp16 copy")
    args = ap.parse_args()
    main(args.src, args.dst)
