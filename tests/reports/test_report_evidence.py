"""No verdict without evidence, every failure reported whole.

A small suite that uses the property plugin (``prop``, ``backend``) is checked with
``resverify check``: the report counts the examples each backend ran, names every test
that could not run with its reason, calls a backend with nothing checked ``nothing
checked`` (never ``passed``), says when a test ran fewer examples than its profile asks,
and shows each distinct failure Hypothesis found with its own message, kind and vector.
"""

from __future__ import annotations

import io
import json
import textwrap
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from resverify.cli.main import main
from resverify.reports.json_report import validate
from resverify.spec.codec import loads_request
from tests import hostile_backends as hb

ROOT = Path(__file__).resolve().parents[2]

SUITE = '''
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from resverify.properties.assertions import Context, PropertyFailure
from resverify.spec.fixtures import linear_block_request


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_full_count(backend, prop, n):
    pass


@pytest.mark.needs("residual_add", "linear")
@given(n=st.sampled_from([0, 1, 2]))
def test_three_possible_examples(backend, prop, n):
    pass


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_two_distinct_failures(backend, prop, n):
    if backend.name == "numpy":
        return
    request = linear_block_request()
    if n % 2:
        Context(prop.label, request).fail(f"odd law broken at {n % 2}")
    raise PropertyFailure(f"even law broken at {n % 2}", linear_block_request(dtype="float32"))


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_one_element_off(backend, prop, n):
    if backend.name == "numpy":
        return
    Context(prop.label, linear_block_request()).within(
        "grads['x']", np.array([1.0, 3.5]), np.array([Fraction(1), Fraction(1, 2)], dtype=object),
        np.array([2.0**-50, 2.0**-50]))


CALLS = []


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_fails_once_then_passes(backend, prop, n):
    CALLS.append(n)
    if backend.name != "numpy" and len(CALLS) == 3:
        Context(prop.label, linear_block_request()).fail("wrong on one call only")
'''


def run(root: Path, mp: pytest.MonkeyPatch, *args: str,
        select: str = "full_count or three_possible") -> tuple[int, dict[str, Any], Path]:
    """``resverify check`` on the small suite in ``root``; (exit code, report, folder)."""
    suite = root / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_small_suite.py").write_text(textwrap.dedent(SUITE))
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "conftest.py").write_text('pytest_plugins = ["resverify.properties.plugin"]\n')
    mp.chdir(root)
    mp.setenv("PYTHONPATH", str(ROOT))  # the child imports tests.hostile_backends
    mp.delenv("GITHUB_STEP_SUMMARY", raising=False)
    out = root / f"out{len(list(root.glob('out*')))}"
    code = main(["check", "--suite", "suite", "--no-claims", "--no-plots",  # (none read here)
                 "--report-dir", out.name, *args,
                 "--", "-k", select])
    doc = json.loads((out / "report.json").read_text())
    validate(doc)
    return code, doc, out


NOTHING = "tests.hostile_backends:ClaimsOnlySum"


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path, str]:
    """numpy, on which everything runs, beside a backend on which nothing can."""
    with pytest.MonkeyPatch.context() as mp:
        said = io.StringIO()
        with redirect_stdout(said):
            code, doc, out = run(tmp_path_factory.mktemp("evidence"), mp, "--backend", "numpy",
                                 "--backend", NOTHING)
    return code, doc, out, said.getvalue()


@pytest.fixture(scope="module")
def failing(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    """Two tests that fail on a backend other than numpy: one in two distinct ways, one
    only once (Hypothesis calls that flaky)."""
    root = tmp_path_factory.mktemp("failures")
    with pytest.MonkeyPatch.context() as mp:
        code, doc, out = run(root, mp, "--backend", "tests.hostile_backends:Raises",
                             select="two_distinct_failures or fails_once_then_passes"
                                    " or one_element_off")
    assert code == 1, doc["warnings"]
    return doc, out, root


def _backend(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(b for b in doc["backends"] if b["name"] == name)


def _prop(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in doc["properties"] if p["property"] == name)


def test_examples_are_counted_per_backend_and_short_runs_are_named(
        counted: tuple[int, dict[str, Any], Path, str]) -> None:
    _, doc, out, _ = counted
    numpy = _backend(doc, "numpy")
    assert numpy["status"] == "pass", numpy
    full = next(p for p in doc["properties"] if p["backend"] == "numpy"
                and p["property"] == "full_count")
    short = next(p for p in doc["properties"] if p["backend"] == "numpy"
                 and p["property"] == "three_possible_examples")
    assert (full["examples"], full["examples_wanted"]) == (25, 25), full
    assert (short["examples"], short["examples_wanted"]) == (3, 25), short
    assert (numpy["examples"], numpy["tests_run"], numpy["not_run"]) == (28, 2, []), numpy
    assert "ran 3 of 25 examples" in (out / "report.md").read_text()
    assert "ran 3 of 25 examples" in (out / "report.html").read_text()


def test_backend_with_nothing_checked_is_not_passed(
        counted: tuple[int, dict[str, Any], Path, str]) -> None:
    code, doc, out, said = counted
    assert code == 1, "a backend on which nothing ran was let through with exit 0"
    assert doc["status"] == "unjudged", doc["status"]
    assert [(b["name"], b["status"]) for b in doc["backends"]] == [
        ("numpy", "pass"), (hb.ClaimsOnlySum.name, "unjudged")]
    backend = _backend(doc, hb.ClaimsOnlySum.name)
    assert (backend["examples"], backend["tests_run"]) == (0, 0), backend
    assert sorted(n["property"] for n in backend["not_run"]) == [
        "full_count", "three_possible_examples"], backend["not_run"]
    assert all("op(s) ['linear', 'residual_add'] not claimed" in n["reason"]
               for n in backend["not_run"]), backend["not_run"]
    assert "UNJUDGED" in (out / "report.md").read_text()
    assert "unjudged" in (out / "report.html").read_text()
    assert f"{hb.ClaimsOnlySum.name}: nothing checked" in said, said


def test_allow_nothing_checked_exits_0_and_keeps_the_status(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, doc, _ = run(tmp_path, monkeypatch, "--backend", NOTHING, "--allow-nothing-checked",
                       select="three_possible")
    assert (code, doc["status"]) == (0, "unjudged")


def test_each_distinct_failure_is_reported_with_its_message_kind_and_vector(
        failing: tuple[dict[str, Any], Path, Path]) -> None:
    doc, out, root = failing
    prop = _prop(doc, "two_distinct_failures")
    assert prop["status"] == "fail" and prop["failure_kind"] == "law", prop
    failures = sorted(prop["failures"], key=lambda f: f["message"])
    assert [f["message"].split(" [")[0] for f in failures] == [
        "even law broken at 0", "odd law broken at 1"], failures
    assert "sub-exceptions" not in prop["message"], prop["message"]
    for failure in failures:
        assert failure["kind"] == "law", failure
        saved = json.loads((root / failure["vector"]).read_text())
        assert saved["vector"] == {"property": "two_distinct_failures",
                                   "backend": "tests.hostile_backends:Raises",
                                   "message": failure["message"], "kind": "law"}, saved
        assert loads_request(json.dumps(saved)).dtype in ("float32", "float64")
        assert failure["replay"].endswith("--backend tests.hostile_backends:Raises")
    markdown, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    for failure in failures:
        assert failure["message"].split(" [")[0] in markdown, markdown
        assert failure["vector"] in markdown and failure["vector"] in page


def test_failure_seen_once_is_reported_with_its_own_message(
        failing: tuple[dict[str, Any], Path, Path]) -> None:
    doc, _, _ = failing
    prop = _prop(doc, "fails_once_then_passes")
    assert "single exception in" not in prop["message"], prop["message"]
    assert prop["message"].startswith("wrong on one call only"), prop["message"]
    assert [f["kind"] for f in prop["failures"]] == ["law"], prop["failures"]


def test_a_value_failure_carries_its_first_failing_element_to_the_report(
        failing: tuple[dict[str, Any], Path, Path]) -> None:
    doc, out, _ = failing
    elements = [f["element"] for f in _prop(doc, "one_element_off")["failures"]]
    assert elements == [{"element": "grads['x'][1]", "backend": "3.5", "expected": "1/2",
                         "diff": "3", "budget": "8.881784197001252e-16"}], elements
    others = [f["element"] for f in _prop(doc, "two_distinct_failures")["failures"]]
    assert others == [None, None], f"elements {others} for failures that name none"
    page = (out / "report.html").read_text()
    assert "<td>grads[&#x27;x&#x27;][1]</td>" in page, "the element row is not on the card"
