"""No verdict without evidence, every failure reported whole.

A small suite that uses the property plugin (``prop``, ``backend``) is checked with
``resverify check``: the report counts the examples each backend ran, names every test
that could not run with its reason, calls a backend with nothing checked ``nothing
checked`` (never ``passed``), says when a test ran fewer examples than its profile asks,
and shows each distinct failure Hypothesis found with its own message, kind and vector.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from reports.cli import main
from reports.json_report import validate
from spec.codec import loads_request
from tests import hostile_backends as hb

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import pytest
from hypothesis import given, strategies as st

from properties.assertions import Context, PropertyFailure
from spec.fixtures import linear_block_request


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_full_count(backend, prop, n):
    prop.tick()


@pytest.mark.needs("residual_add", "linear")
@given(n=st.sampled_from([0, 1, 2]))
def test_three_possible_examples(backend, prop, n):
    prop.tick()


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_two_distinct_failures(backend, prop, n):
    prop.tick()
    if backend.name == "numpy":
        return
    request = linear_block_request()
    if n % 2:
        Context(prop.label, request).fail(f"odd law broken at {n % 2}")
    raise PropertyFailure(f"even law broken at {n % 2}", linear_block_request(dtype="float32"))


CALLS = []


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_fails_once_then_passes(backend, prop, n):
    prop.tick()
    CALLS.append(n)
    if backend.name != "numpy" and len(CALLS) == 3:
        Context(prop.label, linear_block_request()).fail("wrong on one call only")
'''


def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str,
        select: str = "full_count or three_possible") -> tuple[int, dict[str, Any], Path]:
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_small_suite.py").write_text(textwrap.dedent(SUITE))
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "conftest.py").write_text('pytest_plugins = ["properties.plugin"]\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the child imports tests.hostile_backends
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code = main(["check", "--suite", "suite", "--no-claims", "--report-dir", "out", *args,
                 "--", "-k", select])
    out = tmp_path / "out"
    doc = json.loads((out / "report.json").read_text())
    validate(doc)
    return code, doc, out


def _backend(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(b for b in doc["backends"] if b["name"] == name)


def test_examples_are_counted_per_backend_and_short_runs_are_named(tmp_path, monkeypatch):
    code, doc, out = run(tmp_path, monkeypatch)
    assert (code, doc["status"]) == (0, "passed"), doc["warnings"]
    numpy = _backend(doc, "numpy")
    assert numpy["status"] == "passed", numpy
    by_name = {p["property"]: p for p in doc["properties"]}
    assert (by_name["full_count"]["examples"], by_name["full_count"]["examples_wanted"]) == (
        25, 25), by_name["full_count"]
    short = by_name["three_possible_examples"]
    assert (short["examples"], short["examples_wanted"]) == (3, 25), short
    assert numpy["examples"] == 28 and numpy["not_run"] == [], numpy
    assert "ran 3 of 25 examples" in (out / "report.md").read_text()
    assert "ran 3 of 25 examples" in (out / "report.html").read_text()


def test_backend_with_nothing_checked_is_not_passed(tmp_path, monkeypatch, capsys):
    code, doc, out = run(tmp_path, monkeypatch, "--backend", "tests.hostile_backends:ClaimsOnlySum")
    assert code == 1, "a backend on which nothing ran was let through with exit 0"
    assert doc["status"] == "nothing checked", doc["status"]
    backend = _backend(doc, hb.ClaimsOnlySum.name)
    assert (backend["status"], backend["examples"]) == ("nothing checked", 0), backend
    assert sorted(n["property"] for n in backend["not_run"]) == [
        "full_count", "three_possible_examples"], backend["not_run"]
    assert all("op(s) ['linear', 'residual_add'] not claimed" in n["reason"]
               for n in backend["not_run"]), backend["not_run"]
    assert "NOTHING CHECKED" in (out / "report.md").read_text()
    assert "nothing checked" in (out / "report.html").read_text()
    assert "nothing checked" in capsys.readouterr().out
    allowed, doc, _ = run(tmp_path, monkeypatch, "--backend",
                          "tests.hostile_backends:ClaimsOnlySum", "--allow-nothing-checked")
    assert (allowed, doc["status"]) == (0, "nothing checked")


def test_one_backend_with_nothing_checked_fails_a_run_with_another_that_passed(
        tmp_path, monkeypatch):
    code, doc, _ = run(tmp_path, monkeypatch, "--backend", "numpy", "--backend",
                       "tests.hostile_backends:ClaimsOnlySum")
    assert (code, doc["status"]) == (1, "nothing checked"), doc["status"]
    assert [(b["name"], b["status"]) for b in doc["backends"]] == [
        ("numpy", "passed"), (hb.ClaimsOnlySum.name, "nothing checked")]


def test_each_distinct_failure_is_reported_with_its_message_kind_and_vector(
        tmp_path, monkeypatch):
    code, doc, out = run(tmp_path, monkeypatch, "--backend", "tests.hostile_backends:Raises",
                         select="two_distinct_failures")
    assert code == 1
    (prop,) = doc["properties"]
    assert prop["status"] == "failed" and prop["failure_kind"] == "law", prop
    failures = sorted(prop["failures"], key=lambda f: f["message"])
    assert [f["message"].split(" [")[0] for f in failures] == [
        "even law broken at 0", "odd law broken at 1"], failures
    assert "sub-exceptions" not in prop["message"], prop["message"]
    for failure in failures:
        assert failure["kind"] == "law", failure
        saved = json.loads((tmp_path / failure["vector"]).read_text())
        assert saved["vector"] == {"property": "two_distinct_failures",
                                   "backend": "tests.hostile_backends:Raises",
                                   "message": failure["message"], "kind": "law"}, saved
        assert loads_request(json.dumps(saved)).dtype in ("float32", "float64")
        assert failure["replay"].endswith("--backend tests.hostile_backends:Raises")
    markdown, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    for failure in failures:
        assert failure["message"].split(" [")[0] in markdown, markdown
        assert failure["vector"] in markdown and failure["vector"] in page


def test_failure_seen_once_is_reported_with_its_own_message(tmp_path, monkeypatch):
    code, doc, _ = run(tmp_path, monkeypatch, "--backend", "tests.hostile_backends:Raises",
                       select="fails_once_then_passes")
    assert code == 1
    (prop,) = doc["properties"]
    assert "single exception in" not in prop["message"], prop["message"]
    assert prop["message"].startswith("wrong on one call only"), prop["message"]
    assert [f["kind"] for f in prop["failures"]] == ["law"], prop["failures"]
