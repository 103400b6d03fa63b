"""Where a ``sdlite generate`` process spends its time before the first image: a timeline relative to the process's
own start (Python start-up and imports included), for ``--json`` and the H100/H200 kit's end-to-end rows."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any


def process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``, 10 ms resolution); None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": field 3 (state) is index 0
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime in clock ticks
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class Timeline:
    """Named moments, in seconds since the process started (or since this object was made, where /proc is missing:
    then ``process_start_known`` is False)."""

    marks: dict[str, float] = field(default_factory=dict)
    _origin: float = field(default_factory=time.perf_counter)
    _offset: float = 0.0
    process_start_known: bool = True

    def __post_init__(self) -> None:
        age = process_age_s()
        self.process_start_known = age is not None
        self._offset = age if age is not None else 0.0

    def now(self) -> float:
        return self._offset + time.perf_counter() - self._origin

    def mark(self, name: str) -> float:
        self.marks[name] = t = self.now()
        return t

    def to_dict(self) -> dict[str, Any]:
        return {"process_start_known": self.process_start_known, **{k: round(v, 4) for k, v in self.marks.items()}}
