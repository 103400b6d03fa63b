"""The OpenCL device made on a thread while ``sdlite generate`` imports and checks its models.

Why: the first OpenCL delegate of a process makes the device's context (and, on NVIDIA, starts the driver): 0.3 s of
a warm 3 s start on an H200, on the critical path before the UNet's set-up could begin. The delegates of one process
share that context (custom_ops/backends/opencl/shared_programs.h), so a delegate made at process start, on its own
thread, does the work while Python imports the pipeline and reads the manifest; the models' delegates then join it.
Held for the whole command, it also keeps the context alive between models a low-memory run loads one at a time.

Only the options that choose the shared state (the backend and the activation storage, which changes the program)
are passed; the hold never runs a model, logs nothing, and a failure is silent: the first model's own delegate then
fails with the full message, as without it. With half activation storage a second delegate holds the float-storage
state too: the UNet's and the VAE decoder's coarsest levels keep float32 storage (float storage islands) and take
their kernels from it, and making it (the kernel library parsed for those options) cost each warm start ~0.2 s of
the models' loading on an H200 when it was left to them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The delegate options that select the process's shared OpenCL state (OpenClDevice::Create's build options).
_STATE_OPTIONS = ("activations_fp16",)


@dataclass
class EarlyDevice:
    backend: str
    options: dict[str, str]
    _thread: threading.Thread | None = field(default=None, repr=False)
    _delegates: list[int] = field(default_factory=list, repr=False)
    _lib: Any = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _abandoned: bool = field(default=False, repr=False)
    made_s: float | None = None  # seconds the device took to make (None: not made)

    @classmethod
    def start(cls, backend: str, options: Mapping[str, Any]) -> EarlyDevice | None:
        """Starts making ``backend``'s device with the state-selecting entries of ``options`` (delegate options as
        :func:`sdlite.native.extra_options` holds them); None where there is nothing to make early (not OpenCL)."""
        if backend != "opencl":
            return None
        strings = {"backend": backend, "log_level": "silent"}
        for name in _STATE_OPTIONS:
            if options.get(name) not in (None, False, 0, "0", "false"):
                strings[name] = "1"
        early = cls(backend=backend, options=strings)
        early._thread = threading.Thread(target=early._make, name="sdlite-early-device", daemon=False)
        early._thread.start()
        return early

    def _make(self) -> None:
        import time

        from sdlite import native

        t0 = time.perf_counter()
        try:
            lib = native._lib()  # noqa: SLF001 - the typed library handle
        except Exception:  # noqa: BLE001 - any failure: the models' delegates report it
            return
        states = [self.options]
        if "activations_fp16" in self.options:  # the islands' float-storage programs (module docstring)
            states.append({k: v for k, v in self.options.items() if k != "activations_fp16"})
        for options in states:
            handle = native.create_plugin_delegate(lib, options)
            if not handle:
                return
            with self._lock:
                if not self._abandoned:
                    self._lib = lib
                    self._delegates.append(handle)
                    if len(self._delegates) == 1:
                        self.made_s = time.perf_counter() - t0
                    continue
            lib.tflite_plugin_destroy_delegate(handle)  # the command ended meanwhile (abandon)
            return

    def close(self) -> None:
        """Waits for the making to end and releases the hold (idempotent); the delegates made meanwhile keep the
        device."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._release()

    def abandon(self) -> None:
        """Releases the hold without waiting (a command that failed: its error is not held back while the device is
        still being made); a making still running releases what it makes when it ends. The thread is not a daemon, so
        the process still waits for it before exiting."""
        with self._lock:
            self._abandoned = True
        self._release()

    def _release(self) -> None:
        with self._lock:
            delegates, self._delegates = self._delegates, []
        for delegate in delegates:
            self._lib.tflite_plugin_destroy_delegate(delegate)
