"""Atomic replacement of an output folder, shared by ``sdconvert`` conversion and ``sdconvert optimize``."""
from __future__ import annotations

import os
import shutil
from pathlib import Path


def publish_dir(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; an existing ``out`` (possibly the input folder) is moved aside first, then removed."""
    out = out.absolute()
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)
