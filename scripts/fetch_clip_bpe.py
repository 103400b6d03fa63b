"""Fetch the CLIP BPE merges file (bpe_simple_vocab_16e6.txt.gz) from the open-clip-torch wheel.

The wheel is downloaded with ``pip download --no-deps`` (never installed); only the one data file is
extracted, to ``~/.cache/sdconvert/`` (or the folder given). Idempotent: does nothing if present.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MEMBER = "open_clip/bpe_simple_vocab_16e6.txt.gz"
WHEEL = "open-clip-torch==3.3.0"


def default_dir() -> Path:
    return Path.home() / ".cache" / "sdconvert"


def fetch(dest_dir: Path) -> Path:
    dest = dest_dir / Path(MEMBER).name
    if dest.exists() and dest.stat().st_size > 0:
        return dest
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, WHEEL], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(MEMBER)
    part = dest.with_suffix(".part")
    part.write_bytes(data)
    part.rename(dest)
    return dest


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dest", type=Path, default=default_dir())
    print(fetch(ap.parse_args().dest))
