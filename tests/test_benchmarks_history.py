"""BENCHMARKS.md is one short page of current results; the chronological log lives in docs/benchmarks-history/. Nothing
of the log was lost in the split: every figure of BENCHMARKS.md as it stood before it (read from git, the parent of the
commit that added the history's README) is still in the page or in a history file."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "BENCHMARKS.md"
HISTORY = ROOT / "docs" / "benchmarks-history"
MAX_PAGE_BYTES = 25 * 1024
# a figure: digits with thousands separators / decimals and an optional exponent (3,278.0  2.1e-5  0.0924  19.8)
FIGURE = re.compile(r"\d+(?:[.,]\d+)*(?:e[-+]?\d+)?")


def figures(text: str) -> set[str]:
    return set(FIGURE.findall(text))


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def pre_split_page() -> str:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git history (the pre-split BENCHMARKS.md is read from it)")
    added = _git("log", "--diff-filter=A", "--format=%H", "--", "docs/benchmarks-history/README.md").split()
    assert added, "docs/benchmarks-history/README.md has no commit that added it"
    return _git("show", f"{added[-1]}^:BENCHMARKS.md")


def test_every_figure_of_the_log_is_kept() -> None:
    before = pre_split_page()
    assert len(before) > 150_000  # the 2,530-line log, not an already-split page
    kept = figures(PAGE.read_text())
    for path in HISTORY.glob("*.md"):
        kept |= figures(path.read_text())
    missing = sorted(figures(before) - kept)
    assert missing == [], f"{len(missing)} figures of the pre-split BENCHMARKS.md are in no file: {missing[:40]}"


def test_the_check_notices_a_lost_figure() -> None:
    assert figures("UNet 19.8 ms, 3,278.0 MB, rel 2.1e-5") == {"19.8", "3,278.0", "2.1e-5"}
    assert figures("UNet 42.2 / 29.4") - figures("UNet 42.2") == {"29.4"}


def test_page_is_short_and_every_table_names_its_run() -> None:
    text = PAGE.read_text()
    assert len(text.encode()) < MAX_PAGE_BYTES
    devices = re.findall(r"^## (.+)$", text, re.M)
    assert any("H200" in d for d in devices) and any("H100" in d for d in devices)
    # each results table sits under a heading that names its run: a commit, a date or a session
    for block in re.split(r"^#{2,3} ", text, flags=re.M)[1:]:
        heading = block.splitlines()[0]
        if re.search(r"^\|.*\|$", block, re.M):
            assert re.search(r"\b[0-9a-f]{7}\b|\d{4}-\d\d-\d\d|session \d+", heading), heading


def test_history_index_lists_every_file() -> None:
    index = (HISTORY / "README.md").read_text()
    listed = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    files = {p.name for p in HISTORY.glob("*.md")} - {"README.md"}
    assert listed == files and len(files) > 20
