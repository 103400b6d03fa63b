"""``sdlite.Interpreter``: a converted model folder opened on one execution backend.

Reads ``manifest.json``, loads each model lazily on first use (so txt2img never loads the VAE encoder),
and reports what ran where. ``load_all()`` loads everything up front to fail fast (the CLI does this
before the first step so a missing backend is reported before any work).
"""
from __future__ import annotations

from pathlib import Path
from types import TracebackType

import numpy as np

from sdlite.backends import BackendOptions
from sdlite.errors import SdliteError
from sdlite.manifest import REQUIRED_MODELS, Manifest, load_manifest
from sdlite.runner import ModelRunner, open_runner


class Interpreter:
    """Run the models of a converted folder: ``Interpreter(folder, "cpu").run("unet", sample=..., ...)``."""

    def __init__(
        self,
        folder: Path | str,
        backend: str | BackendOptions = "cpu",
        require: tuple[str, ...] = REQUIRED_MODELS,
    ) -> None:
        self.options = backend if isinstance(backend, BackendOptions) else BackendOptions(name=backend)
        self.manifest: Manifest = load_manifest(Path(folder), require=require)
        self._runners: dict[str, ModelRunner] = {}

    @property
    def backend(self) -> str:
        return self.options.name

    def has_model(self, name: str) -> bool:
        spec = self.manifest.models.get(name)
        return spec is not None and spec.path.is_file()

    def runner(self, name: str) -> ModelRunner:
        """The loaded model ``name`` (loads it on first call)."""
        if name not in self._runners:
            spec = self.manifest.model(name)
            if not spec.path.is_file():
                raise SdliteError(f"model file missing: {spec.path} (listed in manifest.json)")
            runner = open_runner(spec.path, self.options, spec.signature)
            self._check_against_manifest(name, runner)
            self._runners[name] = runner
        return self._runners[name]

    def _check_against_manifest(self, name: str, runner: ModelRunner) -> None:
        spec = self.manifest.model(name)
        listed = {t.name: t.shape for t in spec.inputs}
        actual = {n: s.shape for n, s in runner.inputs.items()}
        if listed and listed != actual:
            raise SdliteError(
                f"{spec.path.name}: signature inputs {actual} differ from manifest.json {listed} (stale manifest?)"
            )

    def load_all(self, names: tuple[str, ...] | None = None) -> None:
        for name in names or tuple(n for n in self.manifest.models if self.has_model(n)):
            self.runner(name)

    def run(self, name: str, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        return self.runner(name).run(**inputs)

    def loaded_runners(self) -> dict[str, ModelRunner]:
        """The models loaded so far, by name."""
        return dict(self._runners)

    def placement(self) -> dict[str, str]:
        """``{model: one-line summary of which executor ran which ops}`` for the loaded models."""
        return {name: r.placement.summary(r.info) for name, r in self._runners.items()}

    def close(self) -> None:
        for r in self._runners.values():
            r.close()
        self._runners.clear()

    def __enter__(self) -> "Interpreter":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
