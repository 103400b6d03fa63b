"""Drive litert-torch: trace one wrapper module and write its .tflite, keeping its chatter out of the user's terminal.

litert-torch prints progress through a rich console and its MLIR/TFLite C++ code logs straight to fd 2; during a
conversion both are redirected into a log file (kept in the output folder as ``conversion.log``) so our own progress bar
stays readable. On failure the caller shows the tail of that log.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import IO, Iterator

import torch


@contextlib.contextmanager
def redirect_native_output(log_path: Path) -> Iterator[IO[str]]:
    """Send fds 1 and 2 into ``log_path``; yield a text stream on the real stderr for progress bars."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    real_err = os.fdopen(os.dup(saved_err), "w", buffering=1)
    with open(log_path, "a", buffering=1) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield real_err
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            real_err.close()


def convert_to_tflite(module: torch.nn.Module, sample_kwargs: dict[str, torch.Tensor], path: Path) -> None:
    """Convert ``module`` (traced with ``sample_kwargs``) to ``path``. Inputs are named after the kwargs."""
    import litert_torch

    with torch.no_grad():
        edge_model = litert_torch.convert(module, sample_kwargs=sample_kwargs)
    edge_model.export(str(path))
    del edge_model


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
