"""``resverify check --mutants FILE`` attaches the score of ``tools/mutants.py --out`` to
report.json (checked against the report schema) and report.html; a file that is not such a
document is a one-line usage error, exit 2, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resverify.reports.json_report import validate
from tests.reports.fakes import run_check
from tools.mutants import score_document

ENTRY = {"mutant": "AlphaSquared", "name": "mutant-alpha-squared", "bug_class": "alpha",
         "bug": "α is applied twice", "status": "killed", "property": "zero_branch",
         "dtype": "float64", "kind": "law", "examples": 3, "seconds": 1.5, "message": "wrong"}


@pytest.mark.slow  # a whole resverify check; mutants_section is rendered in test_mutants_tool
def test_check_attaches_the_mutant_score_to_json_and_html(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scores = tmp_path / "mutants.json"
    scores.write_text(json.dumps(score_document([ENTRY], "ci", 0, 1.5)), encoding="utf-8")
    code, out = run_check(monkeypatch, tmp_path, "--mutants", str(scores), mode="pass")
    assert code == 0, f"check with --mutants on a passing suite exited {code}"
    doc = json.loads((out / "report.json").read_text(encoding="utf-8"))
    validate(doc)
    assert (doc["mutants"]["killed"], doc["mutants"]["total"]) == (1, 1), doc["mutants"]
    assert doc["mutants"]["mutants"][0]["mutant"] == "AlphaSquared"
    assert "1/1 killed" in (out / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(("body", "said"), [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ('{"profile": "ci", "seed": 0, "killed": 1, "total": 1}', "'mutants' is a required"),
])
def test_check_refuses_a_mutants_file_that_is_not_a_score_document(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        body: str | None, said: str) -> None:
    scores = tmp_path / "scores.json"
    if body is not None:
        scores.write_text(body, encoding="utf-8")
    code, _ = run_check(monkeypatch, tmp_path, "--mutants", str(scores), mode="pass")
    err = capsys.readouterr().err
    assert code == 2, f"exit {code}, expected 2 (usage error); stderr: {err}"
    assert said in err and len(err.strip().splitlines()) == 1, err
