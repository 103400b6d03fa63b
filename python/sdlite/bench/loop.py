"""benchmark_model's run loop: how many times a phase (warm-up or timed runs) invokes the model.

A phase runs while ``(runs < min_runs or elapsed < min_secs) and elapsed <= max_secs`` (checked before each run,
so a run in progress is always finished), optionally sleeping ``run_delay`` seconds between runs or pacing them
at ``run_frequency`` runs per second (which overrides the delay). These are the rules of ``BenchmarkModel::Run``
in ``tensorflow/lite/tools/benchmark/benchmark_model.cc``; its defaults (``min_secs`` 1, ``warmup_min_secs``
0.5, ``max_secs`` 150) are the CLI's. The Python defaults here run exactly ``min_runs`` times.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from sdlite.errors import SdliteError


@dataclass(frozen=True)
class TimingRules:
    """Duration rules of both phases (``min_secs``/``max_secs`` for the timed runs, ``warmup_min_secs`` for the
    warm-up; ``max_secs`` bounds each phase)."""

    min_secs: float = 0.0
    max_secs: float = math.inf
    warmup_min_secs: float = 0.0
    run_delay: float = -1.0
    run_frequency: float = -1.0

    def __post_init__(self) -> None:
        if not self.max_secs >= 0:
            raise SdliteError(f"--max_secs must be >= 0, got {self.max_secs:g}")
        for name in ("min_secs", "warmup_min_secs", "run_delay", "run_frequency"):
            if math.isnan(getattr(self, name)):
                raise SdliteError(f"--{name} must be a number")


@dataclass(frozen=True)
class RunLoop:
    """One phase: at least ``min_runs`` runs and at least ``min_secs`` seconds, never starting a run after
    ``max_secs``."""

    min_runs: int
    min_secs: float = 0.0
    max_secs: float = math.inf
    run_delay: float = -1.0
    run_frequency: float = -1.0

    @classmethod
    def warmup(cls, runs: int, rules: TimingRules) -> "RunLoop":
        return cls(runs, rules.warmup_min_secs, rules.max_secs, rules.run_delay, rules.run_frequency)

    @classmethod
    def timed(cls, runs: int, rules: TimingRules) -> "RunLoop":
        return cls(runs, rules.min_secs, rules.max_secs, rules.run_delay, rules.run_frequency)

    def announce(self) -> str:
        """benchmark_model's line before a phase."""
        return (f"Running benchmark for at least {self.min_runs} iterations and at least {self.min_secs:g} seconds "
                f"but terminate if exceeding {self.max_secs:g} seconds.")

    def run(self, invoke: Callable[[], None], samples: list[float] | None = None,
            started: float | None = None) -> list[float]:
        """Invoke until the phase is over; returns the wall seconds of every run.

        ``samples``/``started``: runs already made in this phase (the first inference opens the warm-up) and when
        the phase began, so they count towards ``min_runs`` and the clock.
        """
        samples = list(samples or [])
        start = time.perf_counter() if started is None else started
        min_finish, max_finish = start + self.min_secs, start + self.max_secs
        gap = 1.0 / self.run_frequency if self.run_frequency > 0 else 0.0
        next_finish = start + gap * (len(samples) + 1)
        now = start if started is None else time.perf_counter()
        while (len(samples) < self.min_runs or now < min_finish) and now <= max_finish:
            t0 = time.perf_counter()
            invoke()
            samples.append(time.perf_counter() - t0)
            pause = self.run_delay
            if self.run_frequency > 0:
                pause = next_finish - time.perf_counter()
                next_finish += gap
            if pause > 0:
                time.sleep(pause)
            now = time.perf_counter()
        return samples
