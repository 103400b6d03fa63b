"""``--verify-backend``: one definition for ``sdconvert`` and ``sdconvert optimize``."""
from __future__ import annotations

import argparse

from sdconvert.errors import UserError

VERIFY_BACKENDS = ("cpu", "opencl", "gl")


def add_verify_backend_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--verify-backend", default="cpu", metavar="LIST",
                    help="with --verify: comma list of our delegate's backends to run the checks on: cpu (default; "
                         "XNNPACK + the delegate's CPU kernels), opencl, gl -- one column per backend in the per-op "
                         "table, one parity row per backend")


def parse_backends(text: str) -> tuple[str, ...]:
    """``cpu,opencl`` -> ("cpu", "opencl"); unknown names are a :class:`UserError`."""
    names = tuple(dict.fromkeys(b.strip() for b in text.split(",") if b.strip()))
    bad = [b for b in names if b not in VERIFY_BACKENDS]
    if bad or not names:
        raise UserError(f"--verify-backend takes a comma list of {', '.join(VERIFY_BACKENDS)}, got {text!r}")
    return names


__all__ = ["VERIFY_BACKENDS", "add_verify_backend_argument", "parse_backends"]
