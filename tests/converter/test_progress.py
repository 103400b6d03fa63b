"""Conversion messages never land inside the progress bar's line (the fusion table used to be printed into it)."""
from __future__ import annotations

import io
import re

from sdconvert.export.progress import Reporter


def _messages_start_lines(text: str) -> bool:
    """Every ``sdconvert:`` message starts a terminal line: after a newline or a carriage return, or first."""
    return all(m.start() == 0 or text[m.start() - 1] in "\r\n" for m in re.finditer("sdconvert: ", text))


def test_messages_go_around_the_bar() -> None:
    term = io.StringIO()
    reporter = Reporter(term)
    bar = reporter.bar(3, "export", "model")
    bar.set_description("export unet")
    reporter.say("unet: 1292 -> 355 ops\n  attention   14")
    bar.update(1)
    reporter.say("unet Winograd plan:\n| # | conv |")
    bar.close()
    text = term.getvalue()
    assert "export unet" in text and "sdconvert: unet: 1292 -> 355 ops\n  attention   14\n" in text
    assert _messages_start_lines(text)
    # what a plain print did: the message glued to the bar's line
    glued = io.StringIO()
    bar = Reporter(glued).bar(3, "export", "model")
    print("sdconvert: unet: 1292 -> 355 ops", file=glued)
    bar.close()
    assert not _messages_start_lines(glued.getvalue())


def test_quiet_prints_nothing() -> None:
    term = io.StringIO()
    reporter = Reporter(term, quiet=True)
    bar = reporter.bar(2, "export", "model")
    reporter.say("hello")
    bar.update(2)
    bar.close()
    assert term.getvalue() == ""


def test_a_fused_conversion_prints_its_tables_on_their_own_lines(tmp_path, capfd) -> None:
    """The real path: converting the tiny text encoder with --fuse prints the fusion table while the bar runs."""
    from sdconvert.export.convert import ConvertOptions, run
    from sdconvert.export.optimize import GraphOptions

    run(ConvertOptions(out=tmp_path / "te", random_weights="tiny", models=("text_encoder",),
                       graph=GraphOptions(fuse=True)))
    err = capfd.readouterr().err
    assert "export text_encoder" in err and "sdconvert: text_encoder: " in err
    assert _messages_start_lines(err)
