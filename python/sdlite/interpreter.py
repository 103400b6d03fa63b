"""``sdlite.Interpreter``: a converted model folder opened on one execution backend.

Reads ``manifest.json``, loads each model lazily on first use (so txt2img never loads the VAE encoder),
and reports what ran where. ``load_all()`` loads everything up front to fail fast (the CLI does this
before the first step so a missing backend is reported before any work). ``warm_up()`` runs every model's first
inference at once, each on a thread of its own, so the GPU delegates' one-time set-ups (kernel builds, weights, tile
tuning) overlap instead of running one after another as the pipeline reaches each model.
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import numpy as np

from sdlite._native_stderr import capture_native_stderr
from sdlite.backends import BackendOptions
from sdlite.errors import SdliteError
from sdlite.manifest import REQUIRED_MODELS, Manifest, load_manifest
from sdlite.runner import ModelRunner, open_runner


def _join_all(threads: list[threading.Thread]) -> None:
    """Waits for every thread, through Ctrl-C too (raised once they are done): an interpreter closed under a running
    inference would crash the process."""
    interrupted: KeyboardInterrupt | None = None
    for t in threads:
        while t.is_alive():
            try:
                t.join()
            except KeyboardInterrupt as exc:
                interrupted = exc
    if interrupted is not None:
        raise interrupted


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
        self._released: dict[str, ModelRunner] = {}  # closed by release(), kept for their timings and stats
        self.peak_gpu_bytes = 0  # the most GPU memory our delegates held at once (see note_gpu_peak)

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
            self._released.pop(name, None)
        return self._runners[name]

    def gpu_resident_bytes(self) -> int:
        """GPU memory the loaded models' delegates hold now (device weights + arenas; 0 off our GPU backends)."""
        return sum(r.gpu_bytes() or 0 for r in self._runners.values())

    def note_gpu_peak(self) -> int:
        """Records what the loaded models hold now into :attr:`peak_gpu_bytes` (weights are uploaded at a model's
        first run: note after running, before releasing) and returns the peak."""
        self.peak_gpu_bytes = max(self.peak_gpu_bytes, self.gpu_resident_bytes())
        return self.peak_gpu_bytes

    def release(self, name: str) -> None:
        """Unload model ``name`` (its GPU weights and arena go; the next :meth:`runner` call loads it again, the
        delegate's persistent cache making that cheap). Its timings and stats stay in :meth:`used_runners`."""
        runner = self._runners.get(name)
        if runner is None:
            return
        self.note_gpu_peak()  # while it is still loaded
        del self._runners[name]
        runner.release()
        self._released[name] = runner

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

    def warm_up(self, names: tuple[str, ...], loaded: Callable[[], None] | None = None) -> None:
        """Loads the models ``names`` in this order and runs the first inference of each at the same time, one thread
        per model (:meth:`ModelRunner.warm_up`: zero inputs; nothing to do off our GPU delegates), each started as
        soon as its model is loaded; returns when all are done (``loaded`` is called once every model is loaded).
        The set-ups then overlap -- on a first start the kernel builds of every model share the host's cores, on later
        starts the text encoder's and VAE's loading and set-up hide behind the UNet's (name it first) -- for one extra
        inference per model at steady speed, with the set-ups' transient host memory held together (a low-memory run
        loads one model at a time and does not call this). What native code prints meanwhile is held back as during
        any inference (one capture around all threads: fd 2 is the process's) and a failure is one line naming the
        model; a model that cannot be loaded fails as :meth:`runner` does, once the started warm-ups are over."""
        if all(n in self._runners and not self._runners[n].needs_warm_up for n in names):
            return  # loaded and set up (or nothing to set up): the pipeline asks on every image
        errors: dict[str, BaseException] = {}

        def work(name: str, runner: ModelRunner, progress_fd: int | None) -> None:
            try:
                runner.warm_up(progress_fd=progress_fd)
            except BaseException as exc:  # noqa: BLE001 - reported below, on the calling thread
                errors[name] = exc

        # the progress bars write to the terminal, not into the capture
        progress_fd = os.dup(2) if self.options.progress else None
        threads: list[threading.Thread] = []
        try:
            with capture_native_stderr(self.options.verbose) as log:
                try:
                    for name in names:
                        runner = self.runner(name)  # loads it (its own capture nests in this one)
                        if runner.needs_warm_up:
                            t = threading.Thread(target=work, args=(name, runner, progress_fd),
                                                 name=f"sdlite-warm-up-{name}")
                            t.start()
                            threads.append(t)
                    if loaded is not None:
                        loaded()
                finally:  # never leave a model inferring on another thread (closing it then would crash)
                    _join_all(threads)
        finally:
            if progress_fd is not None:
                os.close(progress_fd)
        for name, exc in errors.items():
            if isinstance(exc, SdliteError):
                raise SdliteError(f"{name}: first inference failed: {log.summary(str(exc))}") from exc
            raise exc
        if log.text and not self.options.verbose:
            sys.stderr.write(log.text)

    def run(self, name: str, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        return self.runner(name).run(**inputs)

    def loaded_runners(self) -> dict[str, ModelRunner]:
        """The models loaded now, by name."""
        return dict(self._runners)

    def used_runners(self) -> dict[str, ModelRunner]:
        """Every model loaded since the start, released ones included (their last load), by name, in the manifest's
        order (the pipeline's: text encoder, UNet, VAE), whatever the order they were loaded in."""
        used = {**self._released, **self._runners}
        order = {name: i for i, name in enumerate(self.manifest.models)}
        return dict(sorted(used.items(), key=lambda item: order.get(item[0], len(order))))

    def placement(self) -> dict[str, str]:
        """``{model: one-line summary of which executor ran which ops}`` for the loaded models."""
        return {name: r.placement_summary() for name, r in self.used_runners().items()}

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
