"""Execution backends and where their pieces come from.

=============  ==================================================================================
``cpu``        TFLite interpreter + XNNPACK; our native delegate's CPU kernels claim ``Sd*`` fused ops
               (only loaded when the model has them).
``opencl``     our native delegate, OpenCL backend (needs the delegate built and an OpenCL device).
``gl``         our native delegate, OpenGL ES compute backend.
``litert-gpu`` stock LiteRT GPU accelerator through ``CompiledModel`` (CPU fallback for unsupported
               ops); cannot run ``Sd*`` ops.
``litert-cpu`` stock LiteRT CPU accelerator through ``CompiledModel`` (a reference point for bench).
=============  ==================================================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sdlite.errors import BackendUnavailableError, SdliteError

BACKENDS = ("cpu", "opencl", "gl", "litert-gpu", "litert-cpu")
NATIVE_BACKENDS = ("cpu", "opencl", "gl")  # what our delegate's "backend" option accepts
DELEGATE_NAME = "sdgpu"
MAX_THREADS = 256  # as the delegate's num_threads option (delegate/options.cc)


@dataclass(frozen=True)
class BackendOptions:
    """How to run models.

    ``num_threads=None`` means every core this process may use (TFLite's own default is 1 thread).
    ``allow_fp16`` lets the stock LiteRT GPU accelerator compute in fp16 (faster, ~1e-3 relative error);
    off by default so every backend is comparable with fp32 references.
    ``use_xnnpack=False`` runs the ops no delegate claims on TFLite's builtin CPU kernels instead of XNNPACK
    (benchmark_model's ``--use_xnnpack=false``; interpreter backends only).
    """

    name: str = "cpu"
    num_threads: int | None = None
    log_level: str = "warning"
    allow_fp16: bool = False
    verbose: bool = False  # replay native runtime logs (LiteRT INFO lines) instead of swallowing them
    use_xnnpack: bool = True

    def __post_init__(self) -> None:
        if self.name not in BACKENDS:
            raise SdliteError(f"unknown backend {self.name!r}; choose one of {', '.join(BACKENDS)}")
        if self.num_threads is not None and not 1 <= self.num_threads <= MAX_THREADS:
            raise SdliteError(f"num_threads must be in 1..{MAX_THREADS}, got {self.num_threads}")
        if not self.use_xnnpack and self.name.startswith("litert-"):
            raise SdliteError(f"use_xnnpack=false needs an interpreter backend (cpu, opencl, gl), not {self.name}")

    @property
    def threads(self) -> int:
        import os

        return self.num_threads or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def find_native_delegate() -> tuple[Path | None, str]:
    """``(path, "")`` of the built native delegate, or ``(None, reason)`` when it is not available."""
    try:
        from sdlite import native
    except ImportError as exc:
        return None, f"sdlite.native is not available ({exc})"
    try:
        path = native.delegate_path()
    except Exception as exc:  # any failure to locate it means "not built" for the caller
        return None, str(exc) or type(exc).__name__
    if path is None or not Path(path).is_file():
        return None, f"library not found{f' at {path}' if path else ''}"
    return Path(path), ""


def load_native_delegate(options: BackendOptions, backend: str, context: str):
    """Load our delegate for ``backend`` (cpu/opencl/gl); :class:`BackendUnavailableError` if impossible.

    ``context`` starts the error message, separator included (e.g. ``"backend opencl unavailable: "``). Goes through
    ``sdlite.native.load`` (owned by the delegate side: validates options, finds the library).
    """
    from sdlite._native_stderr import capture_native_stderr

    path, why = find_native_delegate()
    if path is None:
        raise BackendUnavailableError(f"{context}native delegate not built ({why})")
    from sdlite import native

    failure: Exception | None = None
    # (the delegate's creation-time warnings were shown when the options were parsed: native.parse_options_text)
    with capture_native_stderr(options.verbose) as log:
        try:
            delegate = native.load(backend, log_level=options.log_level, num_threads=options.threads)
        except (BackendUnavailableError, ValueError, OSError) as exc:
            failure = exc
    if failure is None:
        return delegate
    msg = str(failure).strip().splitlines()[-1] if str(failure).strip() else log.summary("delegate creation failed")
    raise BackendUnavailableError(f"{context}native delegate failed to load: {msg}")
