"""``manifest.json``: what was converted, from where, how, and what each model file contains."""
from __future__ import annotations

import hashlib
import json
import platform
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sdlite.tflite_info import ModelInfo

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
    """File facts for ``manifest["models"][name]``: checksum, size, first signature's I/O, op histogram.

    Op facts come from :func:`sdlite.tflite_info.read_model_info` (the runtime's own reader, mmap, no weight copies),
    so the manifest describes the model exactly as ``sdlite`` sees it: the main subgraph, i.e. what runs.
    """
    from sdlite.tflite_info import read_model_info

    info = read_model_info(path)
    hist = info.op_histogram
    return {
        "file": path.name,
        "sha256": sha256(path),
        "bytes": path.stat().st_size,
        **signature_io(path, info),
        "num_ops": sum(hist.values()),
        "op_histogram": dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def signature_io(path: Path, info: ModelInfo | None = None) -> dict[str, Any]:
    """``{"signature": key, "inputs": [{name, shape, dtype}], "outputs": [...]}`` of the first signature.

    ``sdlite``'s :class:`~sdlite.tflite_info.ModelInfo` knows the main subgraph's tensors but not the signature's
    name -> tensor maps, so only those maps are read here (flatbuffer reader over an mmap); shapes and dtypes
    come from ``info``.
    """
    import mmap

    from ai_edge_litert import schema_py_generated as S  # noqa: N812 - generated schema module

    from sdlite.tflite_info import read_model_info

    info = info if info is not None else read_model_info(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        m = S.Model.GetRootAs(mm, 0)
        if m.SignatureDefsLength() < 1:
            raise ValueError(f"{path} has no signature")
        sig = m.SignatureDefs(0)
        if sig.SubgraphIndex() != 0:
            raise ValueError(f"{path}: signature {sig.SignatureKey()!r} runs subgraph {sig.SubgraphIndex()}, not 0")
        key = sig.SignatureKey().decode()
        ins = [(sig.Inputs(i).Name().decode(), sig.Inputs(i).TensorIndex()) for i in range(sig.InputsLength())]
        outs = [(sig.Outputs(i).Name().decode(), sig.Outputs(i).TensorIndex()) for i in range(sig.OutputsLength())]
        del m, sig

    def io(pairs: list[tuple[str, int]]) -> list[dict[str, Any]]:
        return [{"name": n, "shape": list(info.tensors[t].shape), "dtype": info.tensors[t].dtype} for n, t in pairs]

    return {"signature": key, "inputs": io(ins), "outputs": io(outs)}


def write(path: Path, manifest: dict[str, Any]) -> None:
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")


def read(folder: Path) -> dict[str, Any]:
    data = json.loads((folder / "manifest.json").read_text())
    if data.get("format") != FORMAT:
        raise ValueError(f"{folder}/manifest.json is not an sdconvert manifest")
    return data
