"""A progress bar over a GPU delegate's one-time set-up while a model's first inference runs.

The delegate publishes what its set-up is doing -- compiling kernels, preparing weights, the first inference node by
node (GL programs and GEMM tile tuning happen there) -- in its stats (``setup_phase``, ``setup_detail``,
``setup_done``, ``setup_total``; ``custom_ops/gpu/setup_progress.h``). LiteRT releases the GIL while it invokes, so
a thread can poll those counters and move a tqdm bar. The bar appears only once the set-up has run for
``show_after_s`` (a start served from the cache shows nothing) and goes away when the call returns.

The bar writes to its own copy of fd 2, taken when the monitor starts (or the one given): the inference it watches
holds fd 2 itself to keep native log lines back (sdlite._native_stderr), which would otherwise swallow the bar too.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any


@dataclass
class SetupMonitor:
    """``with SetupMonitor(delegate, "unet"): interpreter.invoke()``."""

    delegate: Any
    label: str
    interval_s: float = 0.2
    show_after_s: float = 1.0
    fd: int | None = None  # where the bar goes (duplicated here); None: fd 2 as it is on entry
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _stream: Any = field(default=None, init=False)
    phases_seen: list[str] = field(default_factory=list, init=False)

    def __enter__(self) -> SetupMonitor:
        try:
            self._stream = os.fdopen(os.dup(2 if self.fd is None else self.fd), "w", encoding="utf-8",
                                     errors="replace")
        except OSError:  # no fd 2 (a daemon): no bar
            self._stream = None
        self._thread = threading.Thread(target=self._run, name=f"sdlite-setup-{self.label}", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._stream is not None:
            self._stream.close()

    def _read(self) -> dict[str, Any] | None:
        from sdlite import native

        try:
            return native.stats(self.delegate)
        except Exception:  # noqa: BLE001 - a progress bar must never fail the inference it watches
            return None

    def _run(self) -> None:
        from tqdm.auto import tqdm

        start = time.perf_counter()
        bar = None
        phase = ""
        try:
            while not self._stop.wait(self.interval_s):
                stats = self._read()
                if stats is None or "setup_phase" not in stats:
                    return
                now_phase = str(stats.get("setup_phase") or "")
                if now_phase and now_phase not in self.phases_seen:
                    self.phases_seen.append(now_phase)
                if bar is None:
                    if not now_phase or time.perf_counter() - start < self.show_after_s:
                        continue
                    if self._stream is None:
                        return
                    bar = tqdm(desc=f"{self.label}: set-up", unit="step", leave=False, dynamic_ncols=True,
                               file=self._stream)
                if now_phase != phase:
                    phase = now_phase
                    bar.reset(total=int(stats.get("setup_total") or 0) or None)
                    bar.set_description(f"{self.label}: {phase or 'set-up'}")
                bar.n = int(stats.get("setup_done") or 0)
                detail = str(stats.get("setup_detail") or "")
                bar.set_postfix_str(detail, refresh=False)
                bar.refresh()
        finally:
            if bar is not None:
                bar.close()
