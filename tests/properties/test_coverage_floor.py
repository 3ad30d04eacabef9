"""Every law reaches its floor under the ``ci`` profile on the reference backend, and the
floor notices a strategy change that starves a law.

The floors are declared on the laws (``@pytest.mark.reaches``, :mod:`resverify.properties.
floors`); the coverage table of report.json holds each law to its floor per backend and
dtype (:mod:`resverify.reports.coverage`). Both runs are ``resverify check`` as a user runs
it (seed 0, profile ``ci``), on the laws that declare a floor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from resverify.cli.main import main
from resverify.reports.coverage import short_cells
from tests.meta.runner import property_tests

ROOT = Path(__file__).resolve().parents[2]


def _floored() -> list[str]:
    return sorted(law for law, test in property_tests().items()
                  if any(m.name == "reaches" for m in getattr(test, "pytestmark", [])))


def _coverage(folder: Path, monkeypatch: pytest.MonkeyPatch, *pytest_args: str
              ) -> dict[str, Any]:
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # tests.properties.starve_tanh in the child
    main(["check", "--no-claims", "--no-plots", "-n", "2", "--report-dir", "out", "--",
          *pytest_args])
    doc: dict[str, Any] = json.loads((folder / "out" / "report.json").read_text())
    return doc


@pytest.mark.slow  # seconds of end-to-end runs: make test-slow, in CI
def test_every_law_reaches_its_floor_under_ci(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    laws = _floored()
    assert len(laws) >= 10, f"only {laws} declare a floor"
    doc = _coverage(tmp_path, monkeypatch, "-k", " or ".join(laws))
    assert doc["status"] == "pass", [p["message"] for p in doc["properties"] if p["message"]]
    covered = {row["property"] for row in doc["coverage"]
               if any(cell["floor"] for cell in row["cells"])}
    assert covered == set(laws), f"laws with no floor in the coverage table: {set(laws) - covered}"
    assert short_cells(doc["coverage"]) == [], short_cells(doc["coverage"])


@pytest.mark.slow  # seconds of end-to-end runs: make test-slow, in CI
def test_floor_fails_when_a_strategy_change_starves_tanh(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    law = "forward_and_gradients_match_spec_within_budget"
    doc = _coverage(tmp_path, monkeypatch, "-p", "tests.properties.starve_tanh", "-k", law)
    short = short_cells(doc["coverage"])
    assert doc["status"] == "pass", "starving the strategies broke a verdict, not its floor"
    for dtype in ("float64", "float32", "float16"):
        assert any(line.startswith(f"{law} [numpy, {dtype}]: ") and "op:tanh" in line
                   for line in short), (dtype, short)
