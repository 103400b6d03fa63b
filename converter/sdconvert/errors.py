"""User-facing errors: the CLI prints ``sdconvert: error: <message>`` and exits 2, never a traceback."""
from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input or environment (bad path, unsupported model, disk full...)."""


class ParityError(UserError):
    """--verify found an exported model outside its precision's tolerance (exit code 1)."""
