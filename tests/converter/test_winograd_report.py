"""Paper-comparison table: ratios from real buffer sizes, formulas on whole tiles, SD1.5 padding effects."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdconvert.configs import SD15
from sdconvert.winograd.convspec import ConvSpec
from sdconvert.winograd.report import (PAPER_TABLE, paper_table_markdown, suitable_convs, tile_ratios)
from sdconvert.winograd.sd_shapes import unet_convs
from sdconvert.winograd.table import main as table_main



@pytest.mark.parametrize("m", [2, 4, 6, 8])
def test_whole_tiles_give_the_formulas(m: int) -> None:
    r = tile_ratios([ConvSpec("c", 1, 48, 48, 64, 96)], m)     # 48 is a multiple of 2, 4, 6 and 8
    a = m + 2
    assert r.flops_saving == pytest.approx(9 * m * m / a ** 2, rel=1e-12)
    assert r.intermediate_ratio == pytest.approx(a * a / (m * m), rel=1e-12)
    assert r.weight_ratio == pytest.approx(a * a / 9, rel=1e-12)
    assert r.flops_saving_with_transforms < r.flops_saving
    pf, pi, pw = PAPER_TABLE[m]                                # the paper's numbers are these formulas, rounded
    assert abs(pf - r.flops_saving) < 0.01 and abs(pi - r.intermediate_ratio) < 0.03
    assert abs(pw - r.weight_ratio) < 0.02


def test_sd15_unet_ratios() -> None:
    convs = suitable_convs(unet_convs(SD15))
    assert len(convs) == 49
    r2, r4, r6 = (tile_ratios(convs, m) for m in (2, 4, 6))
    # every SD1.5 latent map (64/32/16/8) is a multiple of 2 and 4: no padding
    assert r2.flops_saving == pytest.approx(2.25) and r2.intermediate_ratio == pytest.approx(4.0)
    assert r4.flops_saving == pytest.approx(4.0) and r4.intermediate_ratio == pytest.approx(2.25)
    # F(6): padding everywhere (66/64, 36/32, 18/16, 12/8)
    assert r6.flops_saving < 5.06 - 1 and r6.intermediate_ratio > 64 / 36 + 0.3
    assert r6.weight_ratio == pytest.approx(64 / 9)
    at8 = tile_ratios([c for c in convs if c.out_h == 8], 6)
    assert at8.flops_saving == pytest.approx(9 * 36 / 64 / 2.25) and at8.intermediate_ratio == pytest.approx(4.0)


def test_markdown_table_rows() -> None:
    text = paper_table_markdown(unet_convs(SD15))
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "x" in ln.split("|")[1]]
    assert [r.split("|")[1].strip() for r in rows] == ["2x2", "4x4", "6x6", "8x8"]
    assert "| 6x6 | CPU | 3.97 / 3.86 / 5.06 / 5.06 | 2.11 / 1.78 / 1.80 | 7.11 / 7.11 / 7.12 |" in text
    assert "reference only" in rows[3]


def test_script_prints_tables_and_writes_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert table_main([]) == 0
    out = capsys.readouterr().out
    assert "| 4x4 | CPU | 4.00 / 3.92 / 4.00 / 4.00 | 2.25 / 2.25 / 2.25 | 4.00 / 4.00 / 4.00 |" in out
    assert "| 8x8 | 14 |" in out
    plan_path = tmp_path / "plan.json"
    assert table_main(["--plan", "--profile", "adreno740", "--plan-json", str(plan_path)]) == 0
    out = capsys.readouterr().out
    assert "winograd=auto profile=adreno740 convs=98 suitable=49" in out
    data = json.loads(plan_path.read_text())
    assert data["memory_budget_bytes"] == 768 * 1024 ** 2 and data["summary"]["within_budget"] is True
    assert table_main(["--plan", "--memory-budget", "much"]) == 2
    assert capsys.readouterr().err.strip() == (
        "winograd_table: error: --memory-budget: cannot parse 'much'; use e.g. 512MiB, 1.5GiB or a byte count")
