"""``--json`` output that is always valid JSON (RFC 8259 has no NaN or Infinity).

Python's ``json.dumps`` writes ``NaN`` / ``Infinity`` for non-finite floats, which other parsers reject; every CLI of
this project prints through :func:`dumps`, which writes them as ``null``. Non-JSON values (paths, numpy scalars) become
their ``str`` / Python number.
"""
from __future__ import annotations

import json
import math
from typing import Any


def _clean(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    item = getattr(value, "item", None)  # numpy scalars and 0-d arrays
    if callable(item):
        try:
            return _clean(item())
        except (TypeError, ValueError):
            pass
    tolist = getattr(value, "tolist", None)  # numpy arrays
    if callable(tolist):
        return _clean(tolist())
    return str(value)


def dumps(obj: Any, indent: int | None = 2) -> str:
    """``json.dumps`` with non-finite floats as ``null`` (strictly valid JSON)."""
    return json.dumps(_clean(obj), indent=indent, allow_nan=False)


__all__ = ["dumps"]
