"""Model files checked against the sha256 sums in ``manifest.json``, hashed once per file version.

Hashing a 1.7 GB UNet takes seconds, so a file whose sum matched is remembered by (path, size, mtime, expected sum)
in a small JSON file in the per-user cache folder (the one the delegate's program cache uses); until the file changes
the check costs a ``stat``. The record is a convenience: when it cannot be read or written, files are simply hashed
again, and a file that changes (new size or mtime) is always hashed.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from sdlite.errors import SdliteError

RECORD_NAME = "verified-models.json"
_MAX_ENTRIES = 256


def default_record() -> Path:
    """``$XDG_CACHE_HOME/sdlite`` or ``~/.cache/sdlite`` (the delegate's cache uses the same base)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sdlite" / RECORD_NAME


def sha256_of(path: Path, chunk: int = 16 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


class ChecksumMismatch(SdliteError):
    """A model file's sha256 differs from the one in manifest.json."""


class VerifiedRecord:
    """The remembered verdicts: ``{absolute path: [size, mtime_ns, sha256]}``."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, list[Any]] = {}
        if path is not None:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(data, dict):
                    self.entries = {k: v for k, v in data.items() if isinstance(v, list) and len(v) == 3}
            except (OSError, ValueError):
                pass

    @staticmethod
    def _key(file: Path) -> tuple[str, list[Any]]:
        st = file.stat()
        return str(file.resolve()), [st.st_size, st.st_mtime_ns]

    def known_good(self, file: Path, sha256: str) -> bool:
        key, stamp = self._key(file)
        return self.entries.get(key) == [*stamp, sha256]

    def remember(self, file: Path, sha256: str) -> None:
        key, stamp = self._key(file)
        self.entries.pop(key, None)
        self.entries[key] = [*stamp, sha256]
        while len(self.entries) > _MAX_ENTRIES:
            self.entries.pop(next(iter(self.entries)))

    def save(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name, suffix=".tmp", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.entries, fh)
            os.replace(tmp, self.path)
        except OSError:
            pass  # remembering is an optimisation; the next run hashes again


def verify_files(files: dict[Path, str], manifest_name: str, record: Path | None = None) -> list[Path]:
    """Check each ``{file: expected sha256}``; raises :class:`ChecksumMismatch` naming the first file that differs.

    Returns the files actually hashed (the others were remembered as verified in ``record``, default
    :func:`default_record`; ``record=None`` keeps no record).
    """
    memo = VerifiedRecord(record)
    hashed = []
    for file, expected in files.items():
        if memo.known_good(file, expected):
            continue
        got = sha256_of(file)
        hashed.append(file)
        if got != expected:
            raise ChecksumMismatch(
                f"{file.name} does not match the sha256 in {manifest_name} (changed or corrupt since it was written); "
                "re-export it, or pass --no-verify to run it anyway"
            )
        memo.remember(file, expected)
    if hashed:
        memo.save()
    return hashed


__all__ = ["ChecksumMismatch", "default_record", "sha256_of", "verify_files"]
