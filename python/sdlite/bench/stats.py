"""Run-time statistics in benchmark_model's format."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class TimingStats:
    """Microsecond statistics of a series of runs (``first`` is the first measured run)."""

    count: int
    first: float
    curr: float
    min: float
    max: float
    avg: float
    std: float
    median: float = 0.0  # not in benchmark_model's line; robust to a stray slow run (used by comparisons)

    @classmethod
    def from_seconds(cls, samples: list[float]) -> "TimingStats":
        if not samples:
            raise ValueError("no samples")
        us = np.asarray(samples, dtype=np.float64) * 1e6
        return cls(len(us), float(us[0]), float(us[-1]), float(us.min()), float(us.max()), float(us.mean()),
                   float(us.std()), float(np.median(us)))

    def stream_text(self) -> str:
        """``count=50 first=4070 curr=3856 min=3721 max=4690 avg=3893.4 std=157`` (benchmark_model's ``Stat``)."""
        return (f"count={self.count} first={self.first:.0f} curr={self.curr:.0f} "
                f"min={self.min:.0f} max={self.max:.0f} avg={self.avg:.1f} std={self.std:.0f}")

    def line(self) -> str:
        """``Timings (microseconds): count=50 first=4070 curr=3856 min=3721 max=4690 avg=3893.4 std=157``."""
        return f"Timings (microseconds): {self.stream_text()}"

    def to_dict(self) -> dict[str, float]:
        return asdict(self)
