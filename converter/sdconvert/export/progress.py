"""What a conversion prints on the user's terminal: one progress bar and ``sdconvert: ...`` messages.

Messages go through ``tqdm.write``, which clears the bar, prints the message on lines of its own and redraws the
bar below it; a plain ``print`` would land in the middle of the bar's line (the fusion and Winograd tables did).
"""
from __future__ import annotations

from typing import TextIO

from tqdm import tqdm


class Reporter:
    """``say`` and ``bar`` on ``term`` (the user's stderr); nothing at all when ``quiet``."""

    def __init__(self, term: TextIO, quiet: bool = False) -> None:
        self.term = term
        self.quiet = quiet

    def say(self, msg: str) -> None:
        if not self.quiet:
            tqdm.write(f"sdconvert: {msg}", file=self.term)

    def bar(self, total: int, desc: str, unit: str) -> tqdm:
        return tqdm(total=total, desc=desc, unit=unit, file=self.term, disable=self.quiet)
