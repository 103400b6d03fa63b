"""Capture what native libraries (LiteRT, delegates) print on file descriptor 2.

LiteRT logs INFO lines ("Created TensorFlow Lite XNNPACK delegate for CPU.") and multi-line error traces
straight to fd 2, bypassing Python. Model creation runs inside :func:`capture_native_stderr` so a failure
can be turned into one readable line and the noise is not shown on success (``verbose=True`` replays it).
Trade-off: while captured, *any* fd-2 output of the process (other threads too) is held back.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO


_LOG_PREFIX = re.compile(r"^(?:(?:ERROR|WARNING): \[[^\]]*\]\s*|[EWF]\d{4} [^\]]*\]\s*)+")
_NOISE = ("INFO", "===", "third_party", "at ", "I0000", "W0000", "WARNING", "Warning")
_CAUSE_WORDS = ("no adapters", "not found", "cannot", "unsupported", "unresolved", "failed", "error")


@dataclass
class CapturedLog:
    text: str = ""
    lines: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        """Error reports in order, log prefixes (``ERROR: [file.cc:12]``, glog headers) removed.

        Continuation lines (``└ ...``, indented frames) belong to the entry above them, so a WARNING's
        continuation (e.g. an optional vendor plugin failing to load) is dropped with it.
        """
        entries: list[list[str]] = []
        for line in self.lines:
            if not line.strip():
                continue
            if line.startswith(("└", " ", "\t")) and entries:
                entries[-1].append(line.strip().lstrip("└").strip())
            else:
                entries.append([line.strip()])
        keep = []
        for entry in entries:
            if entry[0].startswith(_NOISE):
                continue
            text = _LOG_PREFIX.sub("", entry[0]).strip()
            if text:
                keep.append(text)
        return keep

    def summary(self, default: str) -> str:
        """One line: the first logged error naming a cause (LiteRT prints the root cause first), else the
        first meaningful line of ``default`` (e.g. the exception text), else a hint to use ``--verbose``."""
        errs = self.errors()
        for s in errs:
            if any(k in s.lower() for k in _CAUSE_WORDS):
                return s
        if errs:
            return errs[0]
        fallback = CapturedLog(default, default.splitlines()).errors()
        return fallback[0] if fallback else "no details (rerun with --verbose to see the native log)"


_OUR_PREFIX = "sdgpu:"  # every line our delegate prints (common/log.cc)
_open_captures = 0  # captures of fd 2 open now: one opened inside another sees only the inner block's writes


@contextlib.contextmanager
def _fd2_into(file: BinaryIO, verbose: bool = False) -> Iterator[CapturedLog]:
    """fd 2 into ``file`` (empty on entry) for the block; afterwards the log holds what was written, and ``file`` is
    emptied again. Native code writes to fd 2 whatever ``sys.stderr`` is (pytest, IDEs replace the Python object).

    Inside another capture (a model loaded while other models' first inferences run on their threads:
    Interpreter.warm_up), fd 2 is the process's, so the block also catches what those threads print meanwhile. The
    lines of our delegate (its warnings, its set-up progress) go on to the enclosing capture, which reports them;
    the rest (LiteRT's INFO lines) stays held back as in any capture."""
    global _open_captures
    log = CapturedLog()
    fd = 2
    try:
        saved = os.dup(fd)
    except OSError:  # no fd 2 (daemonized / embedded): nothing to capture
        yield log
        return
    sys.stderr.flush()
    os.dup2(file.fileno(), fd)
    _open_captures += 1
    nested = _open_captures > 1
    try:
        yield log
    finally:
        _open_captures -= 1
        sys.stderr.flush()
        os.dup2(saved, fd)
        os.close(saved)
        if os.fstat(file.fileno()).st_size:
            file.seek(0)
            log.text = file.read().decode("utf-8", "replace")
            log.lines = log.text.splitlines()
            file.seek(0)
            file.truncate()
            if verbose:
                sys.stderr.write(log.text)
            elif nested:
                ours = "".join(line + "\n" for line in log.lines if line.startswith(_OUR_PREFIX))
                if ours:
                    os.write(fd, ours.encode("utf-8"))


@contextlib.contextmanager
def capture_native_stderr(verbose: bool = False) -> Iterator[CapturedLog]:
    """Redirect fd 2 to a temp file for the block; the log is available after the block exits."""
    with tempfile.TemporaryFile(mode="w+b") as tmp, _fd2_into(tmp, verbose) as log:
        yield log


class StderrTrap:
    """A reusable :func:`capture_native_stderr` for calls made often (every inference): one temp file kept open, so
    a call costs a few ``dup2``/``fstat`` system calls (microseconds) instead of a new file. ``with trap as log``
    gives the :class:`CapturedLog` of that call."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(mode="w+b")

    @contextlib.contextmanager
    def __call__(self) -> Iterator[CapturedLog]:
        with _fd2_into(self._file) as log:
            yield log

    def close(self) -> None:
        self._file.close()
