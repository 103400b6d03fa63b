"""``sdconvert --help`` describes the tool and its subcommands in full (it used to stop mid-sentence)."""
from __future__ import annotations

import re

import pytest

from sdconvert.cli import DESCRIPTION, main


def test_help_describes_the_tool_in_full(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    description = " ".join(DESCRIPTION.split())
    assert description in out
    sentences = re.split(r"(?<=[.)])\s+(?=[A-Z])", description)
    assert all(s.endswith((".", ").")) for s in sentences), sentences
    assert "sdconvert inspect FILE|FOLDER" in out and "sdconvert optimize IN -o OUT" in out
