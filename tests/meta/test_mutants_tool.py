"""The mutant catalog and ``tools/mutants.py`` (``make mutants``): the catalog's shape, the
verdicts, the tool's output, and (slow) the score of the whole catalog under the ci profile.

The score test is the guard the catalog exists for: every mutant must be killed by the
property suite as it is; a survivor is a gap in the suite to close with a property,
never a mutant to delete. A control proves the kills are due to the planted bugs: the
mutants' base, with no bug, survives the same run.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from resverify.cli.runner import SuiteRun
from resverify.impl import Backend
from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties.assertions import differences, mutation, private_copy
from resverify.properties.cases import Case, node
from resverify.properties.test_jvp import (
    POST_NORM_T,
    PRE_NORM_T,
    S06_T,
    S17_AT_ZERO_T,
    S17_T,
)
from resverify.spec.ir import Input, Program
from resverify.spec.request import Request, Value, check_form
from tests import mutants as catalog
from tools import mutants as tool
from tools.mutant_runs import MutantRun, outcome, run_mutants

Record = dict[str, Any]

# killed by the first tests of the suite, so a run of these few stays short
QUICK = ("AlphaSquared", "DroppedIdentityGrad")


def test_catalog_has_thirty_mutants_in_every_class() -> None:
    classes = {m.bug_class for m in catalog.CATALOG}
    assert len(catalog.CATALOG) >= 30, len(catalog.CATALOG)
    assert classes == set(catalog.CLASSES), sorted(set(catalog.CLASSES) ^ classes)
    names = [m.name for m in catalog.CATALOG]
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)


@pytest.mark.parametrize("mutant", catalog.CATALOG, ids=lambda m: m.__name__)
def test_every_mutant_is_a_backend_with_a_one_line_bug(mutant: type[catalog.Mutant]) -> None:
    assert isinstance(mutant(), Backend), mutant
    assert mutant.name.startswith("mutant-"), mutant.name
    text = catalog.bug(mutant)
    assert 20 <= len(text) <= 200, (mutant.__name__, text)
    assert "\n" not in text


def test_by_name_takes_class_names_and_backend_names_in_catalog_order() -> None:
    chosen = catalog.by_name(["mutant-alpha-squared", "BroadcastingMerge"])
    assert chosen == [catalog.BroadcastingMerge, catalog.AlphaSquared], chosen


def test_by_name_takes_a_foil_after_the_scored_mutants() -> None:
    chosen = catalog.by_name(["broken-strict-add", "AlphaSquared"])
    assert chosen == [catalog.AlphaSquared, catalog.StrictAdd], chosen


def test_the_catalog_is_one_set_of_entries_on_one_base() -> None:
    """Scored mutants and foils are disjoint, every entry is a Mutant, names are unique."""
    assert not set(catalog.CATALOG) & set(catalog.FOILS), set(catalog.CATALOG) & set(catalog.FOILS)
    assert all(issubclass(e, catalog.Mutant) for e in catalog.ENTRIES), catalog.ENTRIES
    assert all(not f.bug_class for f in catalog.FOILS), [f.bug_class for f in catalog.FOILS]
    names = [e.name for e in catalog.ENTRIES]
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)


# forward-mode requests on which each forward-mode bug shows: a non-symmetric square
# weight with its own tangent, relu on both sides of 0 and at 0, both norms, and tanh at
# values whose tangent products float32 cannot hold
_TANH = Case(Program((Input("x", (2,)),), (node("t", "tanh", "x"),
                                           node("s", "scale", "t", alpha=Fraction(1, 3)),
                                           node("y", "residual_add", "x", "s")), "y"),
             {"x": np.array([0.1, -0.7])}, np.array([1.0, 0.5]),
             {"x": np.array([0.3, 1.1])})
_RNG = np.random.default_rng(0)  # a 32-wide linear block: wide enough for a TF32 fast path
_WIDE = Case(Program((Input("x", (32,)), Input("w", (32, 32))),
                     (node("f", "linear", "x", "w"), node("y", "residual_add", "x", "f")), "y"),
             {"x": _RNG.uniform(-1, 1, 32), "w": _RNG.uniform(-0.125, 0.125, (32, 32))},
             _RNG.uniform(-1, 1, 32),
             {"x": _RNG.uniform(-1, 1, 32), "w": _RNG.uniform(-0.125, 0.125, (32, 32))})
FORWARD = [c.request("float64") for c in (S06_T, S17_T, S17_AT_ZERO_T, PRE_NORM_T,
                                           POST_NORM_T, _TANH, _WIDE)]
FORWARD_MUTANTS = [m for m in catalog.CATALOG if m.bug_class == "forward mode"]


def _value(backend: Backend, request: Request) -> Value:
    result = backend.run(request)
    assert isinstance(result, Value), result
    check_form(request, result)
    return result


@pytest.mark.parametrize("mutant", [catalog.Mutant, *FORWARD_MUTANTS], ids=lambda m: m.__name__)
def test_forward_mode_mutants_are_wrong_only_in_the_tangent(mutant: type[catalog.Mutant]) -> None:
    """Output and gradients bit for bit the reference's; on some request the tangent
    differs or the tangents given were written into (never, for the bug-free base)."""
    differs = []
    for request in FORWARD:
        copy = private_copy(request)
        got, want = _value(mutant(), copy), _value(NumpyBackend(), request)
        assert differences(dataclasses.replace(got, tangent=None),
                           dataclasses.replace(want, tangent=None)) == [], request.program
        assert got.tangent is not None and want.tangent is not None
        if got.tangent.tobytes() != want.tangent.tobytes() or mutation(request, copy):
            differs.append(request.program.describe())
    assert bool(differs) == (mutant is not catalog.Mutant), differs


def _result(outcome_: str, prop: str, examples: int, **more: Any) -> dict[str, Any]:
    props = {"property": prop, "examples": examples, "dtype": "float64", **more}
    return {"nodeid": f"t::{prop}", "outcome": outcome_, "properties": props,
            "message": "AssertionError: grads['x'][0]: backend m = 1, spec = 2"}


def test_outcome_names_the_first_failure_and_counts_examples_until_it() -> None:
    suite = SuiteRun(results=[_result("passed", "a", 25), _result("skipped", "b", 0),
                              _result("failed", "c", 7, failure_kind="law"),
                              _result("failed", "d", 1)], exitstatus=1, collected=9)
    got = outcome(suite)
    assert (got["status"], got["property"], got["kind"], got["examples"], got["tests_run"]) == (
        "killed", "c", "law", 32, 3), got


def test_outcome_is_survived_only_for_a_finished_passing_suite() -> None:
    passed = [_result("passed", "a", 25)]
    assert outcome(SuiteRun(results=passed, exitstatus=0, collected=1))["status"] == "survived"
    stopped = outcome(SuiteRun(results=passed, exitstatus=2, collected=3, returncode=2))
    assert stopped["status"] == "error" and "exit 2" in stopped["message"], stopped


def _check(call: str, got: object, want: object) -> None:
    assert got == want, f"{call} = {got!r}, but should be {want!r}"


@dataclasses.dataclass
class _Suite:
    """The data a mutant's verdict reads of a suite run."""

    results: Sequence[Record] = dataclasses.field(default_factory=list)
    exitstatus: int | None = 0
    returncode: int | None = 0
    finished: bool = True
    refused: bool = False


def _test(outcome: str, examples: int, kind: str | None = None, prop: str = "p",
            message: str = "") -> Record:
    return {"nodeid": f"t::test_{prop}", "outcome": outcome, "message": message,
            "properties": {"property": prop, "dtype": "float64", "examples": examples,
                           "failure_kind": kind}}


def test_a_mutant_is_killed_by_its_first_failure_with_the_examples_until_then() -> None:
    suite = _Suite([_test("passed", 5), _test("failed", 2, "law", "q", "wrong\n  value"),
                    _test("failed", 7, "crash", "r")], exitstatus=1)
    want = {"status": "killed", "property": "q", "dtype": "float64", "kind": "law",
            "message": "wrong value", "examples": 7, "tests_run": 2}
    _check("outcome(passed 5, failed q 2, failed r 7)", outcome(suite), want)


@pytest.mark.parametrize(("kind", "status", "shown"), [
    ("law", "killed", "law"), (None, "killed", "law"), ("crash", "killed", "crash"),
    ("internal", "error", "internal"),
])
def test_an_internal_failure_is_an_error_not_a_kill(kind: str | None, status: str,
                                                    shown: str) -> None:
    got = outcome(_Suite([_test("failed", 1, kind)], exitstatus=1))
    _check(f"outcome(failed, kind={kind!r}) status, kind", (got["status"], got["kind"]),
           (status, shown))


def test_a_mutant_message_is_one_line_of_at_most_300_characters() -> None:
    got = outcome(_Suite([_test("failed", 1, "law", message="x " * 400)]))
    _check("len(mutant_outcome(600-character message)['message'])", len(got["message"]), 300)


@pytest.mark.parametrize(("suite", "status", "message"), [
    pytest.param(_Suite([_test("passed", 3)]), "survived", None, id="finished, exit 0"),
    pytest.param(_Suite([_test("passed", 3)], finished=False, exitstatus=2, returncode=2),
                 "error", "the suite ended without a verdict (pytest exit 2, process exit 2, "
                 "1 tests finished)", id="stopped early"),
    pytest.param(_Suite([_test("passed", 3)], exitstatus=1, returncode=1), "error",
                 "the suite ended without a verdict (pytest exit 1, process exit 1, "
                 "1 tests finished)", id="exit 1 with no failure"),
    pytest.param(_Suite([_test("passed", 3)], finished=False), "error",
                 "the suite ended without a verdict (pytest exit 0, process exit 0, "
                 "1 tests finished)", id="exit 0, not finished"),
    pytest.param(_Suite([], finished=False, exitstatus=None, returncode=4, refused=True),
                 "error", "pytest refused its command line (see pytest.log)", id="refused"),
])
def test_a_mutant_survives_only_a_finished_passing_suite(suite: _Suite, status: str,
                                                         message: str | None) -> None:
    got = outcome(suite)
    _check(f"outcome({suite}) status, message", (got["status"], got["message"]),
           (status, message))
    _check(f"outcome({suite}) examples, tests_run", (got["examples"], got["tests_run"]),
           (3 * len(suite.results), len(suite.results)))


@pytest.mark.parametrize(("killed", "total", "want"), [
    (3, 3, "pass"), (0, 0, "pass"), (2, 3, "fail"), (0, 1, "fail"),
])
def test_a_mutant_score_passes_only_when_every_mutant_was_killed(killed: int, total: int,
                                                                 want: str) -> None:
    _check(f"score_status({killed}, {total})", tool.score_status(killed, total), want)


def _doc(status: str = "killed") -> dict[str, Any]:
    entry = {"mutant": "AlphaSquared", "name": "mutant-alpha-squared", "bug_class": "alpha",
             "bug": "scale multiplies by <α²>", "status": status, "property": "p<x>",
             "dtype": "float64", "kind": "law", "message": "m", "examples": 3, "tests_run": 1,
             "seconds": 1.5}
    return tool.score_document([entry], "ci", 0, 2.0)


def test_table_and_html_show_score_row_and_escape_text() -> None:
    doc = _doc()
    table = tool.render_table(doc)
    assert table.splitlines()[-1].startswith("1/1 mutants killed"), table
    page = tool.render_page(doc)
    assert "1/1 killed" in page and "&lt;α²&gt;" in page and "<α²>" not in page
    assert "p&lt;x&gt; [float64]" in tool.render_section(doc)
    assert 'class="badge fail"' in tool.render_section(_doc("survived"))


def test_the_score_page_shows_a_survivor_as_failed_and_escapes_text() -> None:
    doc = tool.score_document([
        {"mutant": "kept_alive", "bug_class": "alpha", "bug": "α <b>rounded</b>",
         "status": "survived", "property": None, "dtype": None, "kind": None, "examples": 25,
         "seconds": 1.0},
        {"mutant": "dropped_identity", "bug_class": "identity path", "bug": "x not added",
         "status": "killed", "property": "zero_branch", "dtype": "float64", "kind": "law",
         "examples": 1, "seconds": 0.5}], "ci", 0, 1.5)
    page = tool.render_page(doc)
    assert '<h2 id="mutants">' in page and "1/2 killed" in page, "mutant section missing"
    assert '<td class="fail nw">survived</td>' in page, "a survivor is not shown as failed"
    assert "<b>rounded</b>" not in page, "a mutant's text reached the page unescaped"


@pytest.mark.parametrize(("argv", "said"), [
    (["--only", "NoSuchMutant"], "unknown mutant(s) ['NoSuchMutant']"),
    (["--profile", "nightly"], "unknown profile 'nightly'"),
    (["-n", "0"], "-n needs at least 1 process"),
    (["--out", "/no/such/folder/m.json"], "its folder does not exist"),
])
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], said: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert tool.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err


def test_list_prints_every_mutant(capsys: pytest.CaptureFixture[str]) -> None:
    assert tool.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(m.__name__ in out for m in catalog.CATALOG)
    assert not any(f"\n{f.__name__} " in out for f in catalog.FOILS), out
    assert out.splitlines()[-1] == f"{len(catalog.CATALOG)} mutants"


def test_list_with_foils_prints_the_foils_after_the_mutants(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert tool.main(["--foils", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == [e.__name__ for e in catalog.ENTRIES]
    assert lines[-1] == f"{len(catalog.CATALOG)} mutants, {len(catalog.FOILS)} foils", lines[-1]


@pytest.mark.slow  # child pytest runs; the whole catalog's score runs beside it in -m slow
def test_a_few_mutants_are_killed_and_written(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out, page = tmp_path / "m.json", tmp_path / "m.html"
    argv = ["-n", "2", "--out", str(out), "--html", str(page)]
    argv += [a for name in QUICK for a in ("--only", name)]
    assert tool.main(argv) == 0, capsys.readouterr()
    doc = json.loads(out.read_text())
    assert (doc["killed"], doc["total"]) == (len(QUICK), len(QUICK)), doc
    assert all(e["examples"] >= 1 and e["property"] for e in doc["mutants"]), doc["mutants"]
    assert f"{len(QUICK)}/{len(QUICK)} mutants killed" in capsys.readouterr().out
    assert "resverify mutants" in page.read_text()


@pytest.mark.slow
def test_the_base_without_a_bug_survives_the_suite() -> None:
    result = run_mutants(["tests.mutants:Mutant"], MutantRun())
    got = result["tests.mutants:Mutant"]
    assert got["status"] == "survived", got


@pytest.mark.slow
@pytest.mark.campaign
def test_every_mutant_is_killed_under_the_ci_profile(tmp_path: Path) -> None:
    out = tmp_path / "mutants.json"
    code = tool.main(["-n", "2", "--out", str(out)])
    doc = json.loads(out.read_text())
    survivors = [(e["mutant"], e["status"], e["message"]) for e in doc["mutants"]
                 if e["status"] != "killed"]
    assert code == 0 and not survivors, f"{doc['killed']}/{doc['total']}: {survivors}"


def test_strength_doc_lists_every_mutant_of_the_catalog() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "strength.md").read_text()
    missing = [m.__name__ for m in catalog.CATALOG if f"| `{m.__name__}` |" not in doc]
    assert not missing, f"docs/strength.md has no row for {missing}"
