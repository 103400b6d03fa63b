"""User-facing errors of the runtime.

The CLI prints ``sdlite: error: <message>`` and exits 2 for a :class:`SdliteError`, never a traceback.
Library callers get the exception and can inspect the one-line message.
"""
from __future__ import annotations


class SdliteError(Exception):
    """A problem with the user's input or environment (bad path, bad size, backend unavailable...)."""


class BackendUnavailableError(SdliteError):
    """The requested execution backend cannot run on this machine or for this model."""
