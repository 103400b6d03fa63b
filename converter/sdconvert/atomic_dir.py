"""Where outputs go, shared by ``sdconvert`` conversion and ``sdconvert optimize``: an output never overlaps its input,
appears only once complete (a temporary sibling renamed into place), and a failed run leaves nothing behind, not
even the parent folders it created."""
from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from sdconvert.errors import UserError


def _inside(child: Path, parent: Path) -> bool:
    return child != parent and parent in child.parents


def refuse_overlap(out: Path, inputs: Sequence[Path | None], *, same_ok: bool = False) -> None:
    """One-line :class:`UserError` when the output would be written inside an input, or would replace an input or a
    folder holding one (``--overwrite`` deletes what it replaces). ``same_ok``: the output may BE the input (an
    in-place ``optimize``, replaced only once the new one is complete). Paths are compared resolved (symlinks)."""
    o = out.resolve()
    for src in inputs:
        if src is None or not src.exists():
            continue
        i = src.resolve()
        if o == i and not same_ok:
            raise UserError(f"output {out} is the input {src}; give another output folder")
        if _inside(o, i):
            raise UserError(f"output {out} is inside the input {src}; give a folder outside it")
        if _inside(i, o):
            raise UserError(f"output {out} contains the input {src}; replacing it would delete the input")


def refuse_foreign_folder(out: Path) -> None:
    """``--overwrite`` replaces a previous sdconvert output (it has a manifest.json) or an empty folder, never any
    other folder: a typo in ``-o`` must not delete someone's files."""
    if out.is_dir() and not (out / "manifest.json").is_file() and any(out.iterdir()):
        raise UserError(f"output {out} is a folder with other files (no manifest.json), not an sdconvert output; "
                        "refusing to replace it")


def make_parents(path: Path) -> list[Path]:
    """Create the missing parent folders of ``path``; returns the ones created, outermost first."""
    created = []
    for p in reversed(path.absolute().parents):
        if p.exists():
            continue
        try:
            p.mkdir()
        except FileExistsError:  # made by someone else meanwhile: not ours to remove
            continue
        created.append(p)
    return created


def remove_created(created: Sequence[Path]) -> None:
    """Remove folders :func:`make_parents` created, innermost first, as long as they are empty."""
    for p in reversed(created):
        try:
            p.rmdir()
        except OSError:
            break


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
