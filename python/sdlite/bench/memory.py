"""Process memory as benchmark_model reports it.

* :func:`footprint_kb` is benchmark_model's "memory footprint": the peak resident set size so far (KiB).
  benchmark_model reads ``getrusage(RUSAGE_SELF).ru_maxrss``; on Linux this reads ``VmHWM`` of
  ``/proc/self/status``, the same peak for this process image, because ``ru_maxrss`` also carries the peak of
  the parent a process was forked from (run from a large Python process, every delta would read 0). The
  "delta from the start of the tool" at init and overall is the growth of that peak, so it is 0 when an
  earlier peak in the same process (a previous model of a folder or ``--compare``) was higher.
* :class:`PeakMonitor` (``--report_peak_memory_footprint``) samples the *current* resident set size
  (``/proc/self/statm``) in a background thread, so its peak covers the benchmark only.
* :func:`rss_status` splits the current resident set into anonymous and file/shared pages, as benchmark_model's
  "Memory status at the end of execution" lines do.
GPU memory of the delegate (device weights, arena) is not in these figures; the report prints it separately.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

MB = float(1 << 20)


def footprint_kb() -> int:
    """Peak resident set size of this process so far in KiB (0 where neither source is available)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # not POSIX
        return 0
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


@dataclass(frozen=True)
class RssStatus:
    """Current resident set in bytes: total, of which file-backed or shared pages (``/proc/self/statm``)."""

    rss: int
    shared: int

    @property
    def anon(self) -> int:
        return self.rss - self.shared


def rss_status() -> RssStatus | None:
    """The current resident set, or None where ``/proc/self/statm`` does not exist."""
    try:
        with open("/proc/self/statm") as fh:
            fields = fh.read().split()
    except OSError:
        return None
    page = os.sysconf("SC_PAGE_SIZE")
    return RssStatus(rss=int(fields[1]) * page, shared=int(fields[2]) * page)


class PeakMonitor:
    """Peak of the current resident set, sampled every ``interval_ms`` from :meth:`start` to :meth:`stop`."""

    def __init__(self, interval_ms: int = 50) -> None:
        if interval_ms <= 0:
            raise ValueError(f"memory check interval must be > 0 ms, got {interval_ms}")
        self.interval_s = interval_ms / 1e3
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def supported(self) -> bool:
        return rss_status() is not None

    def _sample(self) -> None:
        status = rss_status()
        if status is not None:
            self.peak_bytes = max(self.peak_bytes, status.rss)

    def _loop(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="sdlite-memory-monitor", daemon=True)
            self._thread.start()

    def stop(self) -> float:
        """Stop sampling; the peak in MB (one last sample is taken)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._sample()
        return self.peak_bytes / MB
