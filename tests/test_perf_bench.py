"""``resverify bench`` runs, prints its table and writes its JSON (timings not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resverify.reports.cli import main


def test_bench_quick_writes_every_row_of_the_chosen_sections(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench.json"
    code = main(["bench", "--quick", "--only", "encoding", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and doc["sections"] == ["encoding"]
    cases = [row["case"] for row in doc["rows"]]
    assert cases == ["write, 4096 float64", "read, 4096 float64", "round trip, 4096 float64"]
    for row in doc["rows"]:
        assert row["ratio"] == pytest.approx(row["baseline_s"] / row["candidate_s"]), row
        assert row["case"] in text
    assert "measured interleaved in this run" in text


def test_bench_refuses_an_unknown_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--only", "encoding,warp"]) == 2
    assert "unknown section(s) ['warp']" in capsys.readouterr().err
