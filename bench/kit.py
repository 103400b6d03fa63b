"""Shared pieces of the H200 benchmark kit: the kit layout, variants, rows, logging, JSON files.

Kit (made HERE by prepare.sh / pack.py, carried to the device)::

    .h200/lib/libsdgpu_delegate.so
    .h200/models/kit.json                     config, git commit, per-model inputs/outputs, file names
    .h200/models/{unet_b1,unet_b2,vae_decoder}.tflite.gz(.json)   weight-less skeletons (weights.py)
    .h200/models/manifest_{b1,b2}.json        the conversions' manifests (provenance)

Work dir (on the device, survives between calls while the machine stays warm)::

    WORK/models/NAME/VARIANT.tflite (+ .json: how it was made)   refilled + optimized variants
    WORK/outputs/NAME/ROW.npz                                    outputs of the last timed run (parity)
    WORK/profiles/NAME/ROW.json, WORK/reports/NAME/ROW.txt       device profile, sdlite bench report
    WORK/results.json                                            every row so far (merged across calls)
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIT_FORMAT = "sdconvert-h200-kit"
MODELS = ("unet_b1", "unet_b2", "vae_decoder")
SOURCE_MODEL = {"unet_b1": "unet", "unet_b2": "unet", "vae_decoder": "vae_decoder"}  # model name in the manifest
TITLES = {"unet_b1": "UNet step b1", "unet_b2": "UNet step b2 (cfg)", "vae_decoder": "VAE decode"}
def start_time() -> float:
    """Start of the whole run (epoch seconds): ``H200_T0`` (run.sh exports it; bench.py sets it for its
    workers), so every progress line of every process counts from the same moment."""
    return float(os.environ.setdefault("H200_T0", f"{time.time():.3f}"))


def log(msg: str) -> None:
    """Progress line with wall-clock time and seconds since the run started (flushed at once)."""
    print(f"[{time.strftime('%H:%M:%S')} +{elapsed():6.1f}s] {msg}", flush=True)


def elapsed() -> float:
    return time.time() - start_time()


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return default


def write_json(path: Path, data: Any) -> None:
    """Atomic write (a kill mid-write leaves the previous file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


#: runtime-option suffixes of a variant: the same model file run with these delegate options
#: (the delegate's default, tensor_cores=auto, is FP64 tensor cores on sm_90 GPUs such as the H200: "+fp32" is the
#: strict fp32-FMA row there)
RUNTIME_SUFFIXES = {"+tc": ("tensor_cores:3xtf32", "3xTF32 tensor cores"),
                    "+fp64": ("tensor_cores:fp64", "FP64 tensor cores"),
                    "+fp32": ("tensor_cores:off", "fp32 FMAs only"),
                    "+a16": ("activations_fp16:1", "half activation storage"),
                    "+w16": ("weights_fp16:1", "fp16 weights"),
                    # `sdlite generate --phone`'s delegate options (sdlite.cli)
                    "+phone": ("weights_fp16:1;activations_fp16:1", "fp16 weights and half activations")}


@dataclass(frozen=True)
class Variant:
    """``plain`` (as converted), ``fused`` (Sd* ops), ``fused+winoN`` (fused, then Winograd F(N) / auto),
    ``litert`` (``--fuse --target litert``: the forms the stock LiteRT GPU accelerator runs, no custom ops); ``plain``
    or a fused variant + ``+tc`` / ``+fp64`` / ``+fp32`` / ``+a16`` / ``+w16`` / ``+phone`` runs that variant's model
    file with the delegate option ``tensor_cores=3xtf32`` / ``fp64`` / ``off`` / ``activations_fp16=1`` /
    ``weights_fp16=1`` / both fp16 options."""

    name: str

    def __post_init__(self) -> None:
        base, suffix = self._split()
        if base not in ("plain", "fused", "litert") and not (
                base.startswith("fused+wino") and base.removeprefix("fused+wino") in ("2", "4", "6", "auto")):
            raise SystemExit(f"unknown variant {self.name!r} (plain, fused, fused+wino2/4/6/auto, litert; "
                             f"plain or a fused one may end in {', '.join(RUNTIME_SUFFIXES)})")
        if suffix and base == "litert":
            raise SystemExit(f"variant {self.name!r}: {suffix} applies to our delegate's models only")

    def _split(self) -> tuple[str, str]:
        for suffix in RUNTIME_SUFFIXES:
            if self.name.endswith(suffix):
                return self.name[: -len(suffix)], suffix
        return self.name, ""

    @property
    def model_name(self) -> str:
        """The model file's variant (``fused+winoauto`` for ``fused+winoauto+tc``)."""
        return self._split()[0]

    @property
    def delegate_options(self) -> str:
        """``key:value;...`` for ``sdlite --delegate_options`` ("" for none)."""
        suffix = self._split()[1]
        return RUNTIME_SUFFIXES[suffix][0] if suffix else ""

    @property
    def suffix(self) -> str:
        """The runtime suffix (``+tc``) or ""."""
        return self._split()[1]

    @property
    def fused(self) -> bool:
        return self.model_name != "plain"

    @property
    def winograd(self) -> str:
        base = self.model_name
        return base.removeprefix("fused+wino") if base.startswith("fused+wino") else "off"

    @property
    def title(self) -> str:
        base, suffix = self._split()
        extra = f" + {RUNTIME_SUFFIXES[suffix][1]}" if suffix else ""
        if base == "plain":
            return "unfused" + extra
        if base == "litert":
            return "--fuse --target litert"
        if self.winograd == "off":
            return "fused" + extra
        return f"fused + Winograd {'auto' if self.winograd == 'auto' else 'F' + self.winograd}" + extra


def parse_list(text: str, allowed: tuple[str, ...] | None = None, what: str = "item") -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if allowed is not None:
        bad = [x for x in items if x not in allowed]
        if bad:
            raise SystemExit(f"unknown {what} {bad[0]!r}; choose from {', '.join(allowed)}")
    return items


@dataclass(frozen=True)
class Kit:
    root: Path  # .h200/models
    doc: dict[str, Any]

    @classmethod
    def load(cls, models_dir: Path) -> Kit:
        doc = read_json(models_dir / "kit.json")
        if doc is None or doc.get("format") != KIT_FORMAT:
            raise SystemExit(f"{models_dir}/kit.json missing or not a {KIT_FORMAT} file (run bench/prepare.sh)")
        return cls(models_dir, doc)

    @property
    def config(self) -> str:
        return self.doc["config"]

    def has(self, name: str) -> bool:
        return name in self.doc["models"]

    def skeleton(self, name: str) -> Path:
        return self.root / self.doc["models"][name]["file"]

    def inputs(self, name: str) -> list[dict[str, Any]]:
        return self.doc["models"][name]["inputs"]


@dataclass(frozen=True)
class Work:
    root: Path

    def model(self, name: str, variant: Variant) -> Path:
        return self.root / "models" / name / f"{variant.model_name}.tflite"

    def outputs(self, name: str, row: str) -> Path:
        return self.root / "outputs" / name / f"{row}.npz"

    def profile(self, name: str, row: str) -> Path:
        return self.root / "profiles" / name / f"{row}.json"

    def report(self, name: str, row: str) -> Path:
        return self.root / "reports" / name / f"{row}.txt"

    @property
    def results(self) -> Path:
        return self.root / "results.json"


def here() -> Path:
    return Path(__file__).resolve().parent


def python() -> str:
    return sys.executable or "python3"


def child_env() -> dict[str, str]:
    """The environment of a row's process: ours, with the repository root first on PYTHONPATH so that
    ``python -m bench.worker`` finds this package from any working directory."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(here().parent), *([path] if path else [])])}
