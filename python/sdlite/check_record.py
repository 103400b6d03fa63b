"""Models that passed :func:`sdlite.model_check.validate_model`, remembered by file identity.

Why: every ``sdlite generate`` validates its three models before LiteRT reads them (the guard against files that
crash the runtime); for SD1.5 that is a pure-Python walk over thousands of ops and tensors, ~0.17 s of a 1.8 s warm
start on the H200 host, repeated on every start for files that have not changed. A verdict is reused only for the
same file -- device, inode, size, modification and status-change times (any write moves the status-change time,
which no tool can set back) -- checked by the same validator code and the same delegate library (its fused-op
check is part of the verdict). Only passing verdicts are kept: a refused model is checked again, with its message.

One zlib-compressed JSON file per model (SD1.5's UNet: its ~5,000 tensor names are most of it) under the per-user
cache folder the checksum record uses (``$XDG_CACHE_HOME/sdlite`` or ``~/.cache/sdlite``), written atomically; an
unreadable, corrupt or foreign entry is ignored and replaced, a folder that cannot be written only costs the next start
its check. At most :data:`MAX_ENTRIES` files are kept, the least recently written go first.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

from sdlite.tflite_info import ModelInfo, OpInfo, TensorInfo

FOLDER = "model-checks"
SUFFIX = ".json.z"
MAX_ENTRIES = 32
FORMAT = 1


def default_folder() -> Path:
    from sdlite.checksums import default_record

    return default_record().parent / FOLDER


def _stamp(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _validator_stamp() -> list[Any]:
    """The validator's own code (a changed check must not trust old verdicts) and the delegate library that judged
    the fused ops (none: they were not judged)."""
    from sdlite import __version__, flatbuffer_verify, model_check, native, shape_rules, tflite_info

    code = [[m.__name__, os.stat(m.__file__).st_mtime_ns] for m in (flatbuffer_verify, model_check, shape_rules,
                                                                     tflite_info) if m.__file__]
    try:
        lib = native.delegate_path()
        library: Any = [str(lib), *_stamp(lib), native.version()]
    except (native.NativeDelegateError, OSError):
        library = None
    return [__version__, code, library]


def key_of(path: Path) -> str | None:
    """The entry name for ``path`` as it is now, or None where the file cannot be stat'ed."""
    try:
        parts = [FORMAT, str(path.resolve()), _stamp(path), _validator_stamp()]
    except OSError:
        return None
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _info_to_json(info: ModelInfo) -> dict[str, Any]:
    return {
        "file_bytes": info.file_bytes, "inputs": list(info.inputs), "outputs": list(info.outputs),
        "weight_bytes": info.weight_bytes, "num_subgraphs": info.num_subgraphs, "signatures": list(info.signatures),
        "ops": [[o.index, o.op_name, o.custom, list(o.inputs), list(o.outputs)] for o in info.ops],
        "tensors": [[t.index, t.name, list(t.shape), t.dtype, t.buffer, t.constant] for t in info.tensors],
    }


def _info_from_json(path: Path, d: dict[str, Any]) -> ModelInfo:
    return ModelInfo(
        path=path, file_bytes=int(d["file_bytes"]),
        ops=tuple(OpInfo(int(i), str(n), bool(c), tuple(map(int, a)), tuple(map(int, b)))
                  for i, n, c, a, b in d["ops"]),
        tensors=tuple(TensorInfo(int(i), str(n), tuple(map(int, s)), str(dt), int(b), bool(c))
                      for i, n, s, dt, b, c in d["tensors"]),
        inputs=tuple(map(int, d["inputs"])), outputs=tuple(map(int, d["outputs"])),
        weight_bytes=int(d["weight_bytes"]), num_subgraphs=int(d["num_subgraphs"]),
        signatures=tuple(map(str, d["signatures"])),
    )


def recall(folder: Path, key: str, path: Path) -> ModelInfo | None:
    """The remembered facts of a model that passed under ``key``, or None (no entry, or one that does not read)."""
    try:
        d = json.loads(zlib.decompress((folder / f"{key}{SUFFIX}").read_bytes()))
        if d.get("key") != key:
            return None
        return _info_from_json(path, d["info"])
    except (OSError, ValueError, KeyError, TypeError, zlib.error):
        return None


def remember(folder: Path, key: str, info: ModelInfo) -> None:
    """Keeps ``info`` under ``key`` (best effort: a failed write is silent, the next start checks again)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".entry", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(zlib.compress(json.dumps({"key": key, "info": _info_to_json(info)}).encode(), 1))
            os.replace(tmp, folder / f"{key}{SUFFIX}")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        entries = sorted(folder.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime_ns)
        for old in entries[:-MAX_ENTRIES]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
