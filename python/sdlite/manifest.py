"""The converted model folder's ``manifest.json``: parsed, validated, with one-line errors.

Only what the runtime needs is validated (format, version, sizes, model files inside the folder, tokenizer and
scheduler files); unknown keys are kept in ``raw`` so newer converters stay readable. Checksums are verified on
request (:meth:`Manifest.verify_checksums`; ``sdlite generate`` does, remembering verified files so a 1.7 GB UNet is
hashed once, see :mod:`sdlite.checksums`).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdlite.errors import SdliteError

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "sdconvert-manifest"
SUPPORTED_VERSIONS = (1,)
MODEL_NAMES = ("text_encoder", "unet", "vae_decoder", "vae_encoder")
REQUIRED_MODELS = ("text_encoder", "unet", "vae_decoder")  # vae_encoder only for img2img


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TensorSpec":
        return cls(str(d["name"]), tuple(int(x) for x in d["shape"]), str(d.get("dtype", "float32")))


@dataclass(frozen=True)
class ModelSpec:
    name: str
    path: Path
    signature: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    sha256: str | None = None
    num_ops: int | None = None


@dataclass(frozen=True)
class Manifest:
    folder: Path
    config: str
    height: int
    width: int
    cfg_batch: int
    latent_channels: int
    vae_scale_factor: int
    vae_scaling_factor: float
    text_hidden_size: int
    max_length: int
    precision: str
    models: dict[str, ModelSpec]
    tokenizer_vocab: Path
    tokenizer_merges: Path
    scheduler_config: Path
    raw: dict[str, Any]

    @property
    def latent_height(self) -> int:
        return self.height // self.vae_scale_factor

    @property
    def latent_width(self) -> int:
        return self.width // self.vae_scale_factor

    def model(self, name: str) -> ModelSpec:
        try:
            return self.models[name]
        except KeyError:
            raise SdliteError(f"{self.folder / MANIFEST_NAME} lists no {name!r} model") from None

    def scheduler_dict(self) -> dict[str, Any]:
        try:
            return json.loads(self.scheduler_config.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SdliteError(f"cannot read scheduler config {self.scheduler_config}: {exc}") from None

    def verify_checksums(self, names: tuple[str, ...] | None = None, record: Path | None = None) -> list[Path]:
        """Check the model files (``names``, default all present) against their sha256 in the manifest; raises
        :class:`~sdlite.checksums.ChecksumMismatch` naming the first that differs. Files verified before and unchanged
        since (size, mtime) are not hashed again when ``record`` (a JSON file, e.g.
        :func:`sdlite.checksums.default_record`) remembers them. Returns the files hashed."""
        from sdlite.checksums import verify_files

        files = {spec.path: spec.sha256 for n, spec in self.models.items()
                 if spec.sha256 is not None and (names is None or n in names) and spec.path.is_file()}
        return verify_files(files, MANIFEST_NAME, record)


def _get(raw: dict[str, Any], key: str, kind: type, where: Path) -> Any:
    if key not in raw:
        raise SdliteError(f"{where}: missing key {key!r}")
    value = raw[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SdliteError(f"{where}: key {key!r} must be {kind.__name__}, got {value!r}")
    return value


def load_manifest(folder: Path, require: tuple[str, ...] = REQUIRED_MODELS) -> Manifest:
    """Parse ``folder/manifest.json``; every model in ``require`` must be listed and its file present."""
    folder = Path(folder)
    if folder.is_file():
        hint = f": {folder.parent}" if (folder.parent / MANIFEST_NAME).is_file() else " (with manifest.json)"
        raise SdliteError(f"{folder} is a file; give the converted model folder{hint}")
    if not folder.is_dir():
        raise SdliteError(f"model folder not found: {folder}")
    where = folder / MANIFEST_NAME
    if not where.is_file():
        raise SdliteError(f"{folder} is not a converted model folder (no {MANIFEST_NAME}; run `sdconvert` first)")
    try:
        raw = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SdliteError(f"cannot read {where}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
        raise SdliteError(f"{where} is not an sdconvert manifest (format != {MANIFEST_FORMAT!r})")
    if raw.get("version") not in SUPPORTED_VERSIONS:
        raise SdliteError(f"{where}: manifest version {raw.get('version')!r} not supported (need {SUPPORTED_VERSIONS})")

    models: dict[str, ModelSpec] = {}
    entries = raw.get("models") or {}
    if not isinstance(entries, dict):
        raise SdliteError(f"{where}: key 'models' must be an object")
    for name, entry in entries.items():
        try:
            file = Path(str(entry["file"]))
            if file.is_absolute() or ".." in file.parts:
                raise ValueError(f"file {str(file)!r} is not inside the folder")
            sha = entry.get("sha256")
            if sha is not None and not (isinstance(sha, str) and len(sha) == 64):
                raise ValueError(f"sha256 {sha!r} is not a sha256 hex digest")
            models[name] = ModelSpec(
                name=name,
                path=folder / file,
                signature=str(entry.get("signature", "serving_default")),
                inputs=tuple(TensorSpec.from_dict(d) for d in entry.get("inputs", [])),
                outputs=tuple(TensorSpec.from_dict(d) for d in entry.get("outputs", [])),
                sha256=entry.get("sha256"),
                num_ops=entry.get("num_ops"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SdliteError(f"{where}: bad entry for model {name!r}: {exc}") from None
    for name in require:
        if name not in models:
            raise SdliteError(f"{where} lists no {name!r} model")
        if not models[name].path.is_file():
            raise SdliteError(f"model file missing: {models[name].path} (listed in {MANIFEST_NAME})")

    tok = raw.get("tokenizer") or {}
    if not isinstance(tok, dict):
        raise SdliteError(f"{where}: key 'tokenizer' must be an object")
    vocab = folder / str(tok.get("vocab", "tokenizer/vocab.json"))
    merges = folder / str(tok.get("merges", "tokenizer/merges.txt"))
    scheduler = folder / str(raw.get("scheduler", "scheduler/scheduler_config.json"))
    for path in (vocab, merges, scheduler):
        if not path.is_file():
            raise SdliteError(f"file missing: {path} (listed in {MANIFEST_NAME})")

    manifest = Manifest(
        folder=folder,
        config=str(raw.get("config", "?")),
        height=_get(raw, "height", int, where),
        width=_get(raw, "width", int, where),
        cfg_batch=_get(raw, "cfg_batch", int, where),
        latent_channels=_get(raw, "latent_channels", int, where),
        vae_scale_factor=_get(raw, "vae_scale_factor", int, where),
        vae_scaling_factor=_get(raw, "vae_scaling_factor", float, where),
        text_hidden_size=_get(raw, "text_hidden_size", int, where),
        max_length=_get({"max_length": 77, **raw}, "max_length", int, where),
        precision=str(raw.get("precision", "fp32")),
        models=models,
        tokenizer_vocab=vocab,
        tokenizer_merges=merges,
        scheduler_config=scheduler,
        raw=raw,
    )
    if manifest.cfg_batch not in (1, 2):
        raise SdliteError(f"{where}: cfg_batch must be 1 or 2, got {manifest.cfg_batch}")
    for key in ("height", "width", "latent_channels", "vae_scale_factor", "text_hidden_size", "max_length"):
        if not 1 <= getattr(manifest, key) <= 1 << 16:
            raise SdliteError(f"{where}: {key} must be in 1..65536, got {getattr(manifest, key)}")
    if not (math.isfinite(manifest.vae_scaling_factor) and manifest.vae_scaling_factor > 0):
        raise SdliteError(f"{where}: vae_scaling_factor must be a finite number > 0, got {manifest.vae_scaling_factor}")
    return manifest
