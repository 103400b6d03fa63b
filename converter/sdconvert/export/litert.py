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
    # Write from Python, not with edge_model.export(): its native writer calls exit(1) on an I/O error ("LLVM ERROR:
    # IO failure on output stream"), which would kill the process before we can clean up a full disk.
    content = edge_model.model_content()
    del edge_model
    with open(path, "wb") as f:
        f.write(content)


def check_free_space(folder: Path, module: torch.nn.Module) -> None:
    """Fail before a long conversion if the folder cannot hold the fp32 model (parameters + 10%)."""
    import shutil

    from sdconvert.errors import UserError

    need = int(1.1 * sum(p.numel() * p.element_size() for p in module.parameters()))
    free = shutil.disk_usage(folder).free
    if free < need:
        raise UserError(f"not enough disk space in {folder}: the model needs ~{need / 2**20:.0f} MiB, "
                        f"{free / 2**20:.0f} MiB free")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
