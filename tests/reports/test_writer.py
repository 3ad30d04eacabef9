"""The one writer of a report's files (:mod:`resverify.reports.writer`): a blocks run's
report and a ``resverify check`` report go through the same function."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from resverify.impl.numpy_backend import NumpyBackend
from resverify.reports import blocks as report
from resverify.reports.json_report import build_report
from resverify.reports.markdown import render_markdown
from resverify.reports.writer import write_files
from tests.reports.test_blocks_report import a_run, document, full


def paths(folder: Path) -> dict[str, Any]:
    """The writer's file arguments for a report in ``folder``."""
    return {"json_path": folder / "report.json", "md_path": folder / "report.md",
            "html_path": folder / "report.html", "plots_dir": folder / "plots"}


def test_write_puts_every_file_in_place_and_leaves_no_temporary(tmp_path: Path) -> None:
    doc = full(document())
    written = write_files(doc, **paths(tmp_path / "out"))
    names = sorted(str(p.relative_to(tmp_path / "out")) for p in written)
    assert names == ["plots/block0-swamped.png", "plots/block0-zero.png",
                     "plots/block1-swamped.png", "report.html", "report.json", "report.md"]
    assert not [p for p in (tmp_path / "out").rglob("*") if p.name.startswith(".")]
    assert json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8")) == doc
    assert (tmp_path / "out" / "report.md").read_text(encoding="utf-8") == render_markdown(doc)
    where = paths(tmp_path / "bare")
    bare = write_files(doc, json_path=where["json_path"], md_path=where["md_path"],
                        html_path=where["html_path"], plots_dir=None)
    assert not [p for p in bare if p.suffix == ".png"]


def test_a_later_run_of_fewer_blocks_leaves_no_plot_of_the_earlier(tmp_path: Path) -> None:
    write_files(full(document()), **paths(tmp_path))
    (tmp_path / "plots" / "mine.png").write_bytes(b"kept")
    one = report.section([a_run()], profile="dev", seed=3, examples=5)
    write_files(full(one), **paths(tmp_path))
    assert sorted(p.name for p in (tmp_path / "plots").glob("*.png")) == [
        "block0-swamped.png", "block0-zero.png", "mine.png"]


def test_write_refuses_a_document_the_schema_refuses(tmp_path: Path) -> None:
    doc = full(document())
    doc["blocks"]["verdict"] = "great"
    with pytest.raises(jsonschema.ValidationError):
        write_files(doc, **paths(tmp_path))
    assert not list(tmp_path.iterdir())


def test_a_check_report_gets_its_plots_markdown_and_page_but_not_its_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``resverify check`` writes report.json as the run goes: the writer leaves it alone,
    writes each drawn plot as NAME.png, and appends report.md to the CI job summary."""
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run = {"seed": 0, "profile": "ci", "backends": ["numpy"], "pytest_args": [],
           "pytest_exit_code": 0}
    doc = build_report(run=run, backends=[NumpyBackend()], claims=[], properties=[],
                       complete=True, warnings=[], timings={})
    where = paths(tmp_path / "out")
    written = write_files(doc, **{**where, "json_path": None}, plots={"depth": b"png"},
                          step_summary=True)
    names = sorted(str(p.relative_to(tmp_path / "out")) for p in written)
    assert names == ["plots/depth.png", "report.html", "report.md"], names
    assert not where["json_path"].exists()
    assert (where["plots_dir"] / "depth.png").read_bytes() == b"png"
    markdown = render_markdown(doc)
    assert summary.read_text(encoding="utf-8") == markdown + ("" if markdown.endswith("\n")
                                                              else "\n")
