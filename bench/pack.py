"""Pack converted random-weight models into the kit's ``models/`` folder (called by prepare.sh, runs HERE).

``python3 -m bench.pack --b1 /work/h200/sd15_b1 --b2 /work/h200/sd15_b2 --dest .h200/models``

unet_b1 and vae_decoder come from the batch-1 conversion, unet_b2 from the cfg-batch-2 one. Each .tflite is
cut into a weight-less skeleton (weights.py); an up-to-date skeleton (same source size and mtime) is kept.
A missing source model is skipped with a warning (the lead may ship a subset); none at all is an error.

The end-to-end rows (bench.py stage e2e: `sdlite generate` from process start to PNG) need a whole folder: when the
cfg-batch-2 conversion has a text encoder, its skeleton (text_encoder.tflite.gz) and the folder's manifest, tokenizer
and scheduler (e2e_assets.tar.gz) are packed too; the UNet (unet_b2) and the VAE decoder come from the rows' own
models.
"""
from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from bench.kit import KIT_FORMAT, MODELS, SOURCE_MODEL, read_json, write_json
from bench.weights import zero


def git_state(repo: Path) -> dict[str, object]:
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
        return r.stdout.strip() if r.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    return {"commit": commit or "unknown", "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def pack(b1: Path, b2: Path | None, dest: Path, names: list[str], min_bytes: int) -> dict:
    sources = {"unet_b1": b1, "vae_decoder": b1, "unet_b2": b2}
    kit = {"format": KIT_FORMAT, "version": 1, "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
           "git": git_state(Path(__file__).resolve().parents[1]), "config": None, "models": {}}
    dest.mkdir(parents=True, exist_ok=True)
    for name in names:
        folder = sources[name]
        manifest = read_json(folder / "manifest.json") if folder is not None else None
        entry = (manifest or {}).get("models", {}).get(SOURCE_MODEL[name])
        src = folder / entry["file"] if entry else None
        if src is None or not src.is_file():
            print(f"pack: skip {name}: no {SOURCE_MODEL[name]} model in {folder}", file=sys.stderr)
            continue
        if kit["config"] not in (None, manifest["config"]):
            raise SystemExit(f"pack: {folder} is config {manifest['config']!r}, other models are {kit['config']!r}")
        kit["config"] = manifest["config"]
        batch = "b2" if name == "unet_b2" else "b1"
        shutil.copyfile(folder / "manifest.json", dest / f"manifest_{batch}.json")
        gz = dest / f"{name}.tflite.gz"
        stat = src.stat()
        holes = read_json(Path(str(gz) + ".json"), {})
        fresh = (gz.is_file() and holes.get("min_bytes") == min_bytes
                 and (holes.get("source_bytes"), holes.get("source_mtime")) == (stat.st_size, stat.st_mtime))
        if not fresh:
            t0 = time.monotonic()
            holes = zero(src, gz, min_bytes)
            holes.update(source_bytes=stat.st_size, source_mtime=stat.st_mtime)
            write_json(Path(str(gz) + ".json"), holes)
            print(f"pack: {name}: {src} -> {gz.name} ({gz.stat().st_size / 2**20:.2f} MiB, "
                  f"{holes['hole_bytes'] / 2**20:.0f} MiB of weights cut, {time.monotonic() - t0:.1f} s)")
        else:
            print(f"pack: {name}: {gz.name} is up to date")
        kit["models"][name] = {
            "file": gz.name, "source": str(src), "source_bytes": stat.st_size, "sha256": entry.get("sha256"),
            "manifest": f"manifest_{batch}.json", "precision": manifest.get("precision"),
            "cfg_batch": manifest.get("cfg_batch"), "inputs": entry["inputs"], "outputs": entry["outputs"],
            "num_ops": entry.get("num_ops"),
        }
    if not kit["models"]:
        raise SystemExit("pack: no model found to pack")
    if b2 is not None:
        kit["e2e"] = pack_e2e(b2, dest, min_bytes)
    write_json(dest / "kit.json", kit)
    return kit


def pack_e2e(folder: Path, dest: Path, min_bytes: int) -> dict | None:
    """The text encoder skeleton and the folder's small files, for the end-to-end rows; None (and a warning) when
    the conversion has no text encoder."""
    manifest = read_json(folder / "manifest.json") or {}
    entry = manifest.get("models", {}).get("text_encoder")
    src = folder / entry["file"] if entry else None
    missing = [m for m in ("text_encoder", "unet", "vae_decoder") if m not in manifest.get("models", {})]
    if src is None or not src.is_file() or missing:
        print(f"pack: no end-to-end folder: {folder} lacks {missing or ['text_encoder']} (convert it with "
              "--models text_encoder,unet,vae_decoder)", file=sys.stderr)
        return None
    gz = dest / "text_encoder.tflite.gz"
    stat = src.stat()
    holes = read_json(Path(str(gz) + ".json"), {})
    if not (gz.is_file() and (holes.get("source_bytes"), holes.get("source_mtime")) == (stat.st_size, stat.st_mtime)):
        holes = zero(src, gz, min_bytes)
        holes.update(source_bytes=stat.st_size, source_mtime=stat.st_mtime)
        write_json(Path(str(gz) + ".json"), holes)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(folder / "manifest.json", arcname="manifest.json")
        for sub in ("tokenizer", "scheduler"):
            if (folder / sub).is_dir():
                tar.add(folder / sub, arcname=sub)
    (dest / "e2e_assets.tar.gz").write_bytes(buf.getvalue())
    print(f"pack: e2e: text_encoder.tflite.gz ({gz.stat().st_size / 2**20:.2f} MiB), e2e_assets.tar.gz "
          f"({len(buf.getvalue()) / 2**20:.2f} MiB) from {folder}")
    return {"text_encoder": gz.name, "assets": "e2e_assets.tar.gz", "source": str(folder), "unet": "unet_b2",
            "vae_decoder": "vae_decoder", "height": manifest.get("height"), "width": manifest.get("width"),
            "cfg_batch": manifest.get("cfg_batch")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--b1", type=Path, required=True, help="batch-1 conversion (unet + vae_decoder)")
    ap.add_argument("--b2", type=Path, default=None, help="cfg-batch-2 conversion (unet)")
    ap.add_argument("--dest", type=Path, default=Path(".h200/models"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--min-bytes", type=int, default=16384)
    args = ap.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in names if m not in MODELS]
    if bad:
        raise SystemExit(f"pack: unknown model {bad[0]!r} ({', '.join(MODELS)})")
    pack(args.b1, args.b2, args.dest, names, args.min_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
