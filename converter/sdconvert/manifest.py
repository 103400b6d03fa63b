"""``manifest.json``: what was converted, from where, how, and what each model file contains."""
from __future__ import annotations

import hashlib
import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from .tflite_info import op_histogram, signature_io

FORMAT = "sdconvert-manifest"
VERSION = 1
TOOL_PACKAGES = ("sdconvert", "litert-torch", "ai-edge-litert", "torch", "diffusers", "transformers", "numpy", "flatbuffers")


def sha256(path: Path, chunk: int = 16 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def tool_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in TOOL_PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def model_entry(path: Path) -> dict[str, Any]:
    hist = op_histogram(path)
    return {
        "file": path.name,
        "sha256": sha256(path),
        "bytes": path.stat().st_size,
        **signature_io(path),
        "num_ops": sum(hist.values()),
        "op_histogram": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def write(path: Path, manifest: dict[str, Any]) -> None:
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")


def read(folder: Path) -> dict[str, Any]:
    data = json.loads((folder / "manifest.json").read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{folder}/manifest.json is not an sdconvert manifest")
    return data
