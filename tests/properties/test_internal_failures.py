"""A failure on resverify's own side is never charged to the backend.

Everything a backend does reaches a law through ``send`` and comes back, when wrong, as a
PropertyFailure with the request to save. A spec-side ``assert`` (or an error in
resverify's code) has no such request: it is kind ``internal``, its message says it is
resverify's, it fails the run (so it is seen) but leaves the backend's status alone, and a
mutant it stops is not counted as killed.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from resverify.cli.main import main
from resverify.cli.runner import SuiteRun
from resverify.properties.assertions import PropertyFailure
from resverify.properties.plugin import INTERNAL_PREFIX, ExampleTimeout, failure_kind
from resverify.reports.json_report import validate
from resverify.reports.verdicts import charged
from resverify.spec.errors import BackendCrash
from resverify.spec.fixtures import linear_block_request
from tools.mutant_runs import outcome

ROOT = Path(__file__).resolve().parents[2]

SUITE = '''
import pytest
from hypothesis import given, strategies as st

from resverify.properties.assertions import Context
from resverify.spec.fixtures import linear_block_request


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_spec_side_assertion(backend, prop, n):
    assert n < 0, f"spec: the two requests differ by {n}"


@pytest.mark.needs("residual_add", "linear")
@given(n=st.integers(0, 1000))
def test_backend_side_law(backend, prop, n):
    Context(prop.label, linear_block_request()).fail(f"law broken at {n}")
'''


@pytest.mark.parametrize(("exc", "kind"), [
    (AssertionError("spec: x scaled by 1/2 changes the output by 4e-323"), "internal"),
    (RuntimeWarning("overflow encountered in multiply"), "internal"),
    (TypeError("an error in resverify's own code"), "internal"),
    (PropertyFailure("wrong", linear_block_request()), "law"),
    (PropertyFailure("raised", linear_block_request(), "raised"), "raised"),
    (BackendCrash("the engine died"), "crash"),
    (ExampleTimeout("too slow"), "timeout"),
])
def test_only_what_the_backend_did_is_charged_to_it(exc: BaseException, kind: str) -> None:
    assert failure_kind(exc) == kind, (type(exc).__name__, failure_kind(exc), kind)


@pytest.mark.parametrize(("failures", "expected"), [
    ([{"kind": "internal"}], False),
    ([{"kind": "internal"}, {"kind": "law"}], True),
    ([{"kind": "law"}], True),
    ([], True),  # no failures listed: its failure_kind (law) decides
])
def test_a_property_is_charged_unless_every_failure_is_internal(
        failures: list[dict[str, str]], expected: bool) -> None:
    entry = {"status": "fail", "failure_kind": "law", "failures": failures}
    assert charged(entry) is expected, (failures, charged(entry), expected)


def test_a_mutant_stopped_by_an_internal_failure_is_not_killed() -> None:
    suite = SuiteRun(began=True, collected=1, exitstatus=1,
                     results=[{"nodeid": "t::test_a", "outcome": "failed",
                               "message": "resverify's own check failed",
                               "properties": {"property": "a", "failure_kind": "internal",
                                              "examples": 3}}])
    verdict = outcome(suite)
    assert (verdict["status"], verdict["kind"]) == ("error", "internal"), verdict


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any]]:
    root = tmp_path_factory.mktemp("internal")
    suite = root / "suite"
    suite.mkdir()
    (suite / "test_small_suite.py").write_text(textwrap.dedent(SUITE))
    (suite / "pytest.ini").write_text("[pytest]\n")
    (suite / "conftest.py").write_text('pytest_plugins = ["resverify.properties.plugin"]\n')
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("PYTHONPATH", str(ROOT))
        mp.delenv("GITHUB_STEP_SUMMARY", raising=False)
        code = main(["check", "--suite", "suite", "--no-claims", "--no-plots", "--report-dir",
                     "out", "--", "-k", "spec_side_assertion"])
        doc = json.loads((root / "out" / "report.json").read_text())
    validate(doc)
    return code, doc


def test_a_spec_side_assertion_fails_the_run_but_not_the_backend(
        report: tuple[int, dict[str, Any]]) -> None:
    code, doc = report
    prop = next(p for p in doc["properties"] if p["property"] == "spec_side_assertion")
    backend = next(b for b in doc["backends"] if b["name"] == "numpy")
    assert (code, doc["status"]) == (1, "fail"), (code, doc["status"])
    assert (prop["status"], prop["failure_kind"], prop["vector"]) == (
        "fail", "internal", None), prop
    assert prop["message"].startswith(INTERNAL_PREFIX + "AssertionError: spec:"), prop["message"]
    assert backend["status"] == "pass", backend
