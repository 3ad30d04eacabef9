"""Each verdict of :mod:`resverify.reports.verdicts`, tested alone on plain records.

Every rule is a table: the rows that satisfy it next to the rows that change one input the
way that must flip the verdict, so a rule that stopped looking at that input fails here.
No test runs a backend or a suite; the records are built as report.json holds them.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from resverify.properties.judge import Judged
from resverify.reports import verdicts as v

Record = dict[str, Any]


def _prop(status: str = "pass", examples: int | None = 3, **more: Any) -> Record:
    """A property record as report.json holds it (backend ``b``, dtype float64, VJP)."""
    return {"id": "t::test_p[b-float64]", "property": "p", "backend": "b", "mode": "vjp",
            "dtype": "float64", "status": status, "examples": examples,
            "examples_wanted": 25, "failure_kind": None, "failures": [], **more}


def _failed(*kinds: str, backend: str = "b", **more: Any) -> Record:
    """A failed property record with one failure of each kind."""
    failures = [{"message": "wrong", "kind": k, "vector": None, "replay": None} for k in kinds]
    return _prop("fail", 3, backend=backend, failure_kind=kinds[0] if kinds else None,
                 failures=failures, **more)


def _claim(exact: str, *sides: tuple[str, str]) -> Record:
    """A claim record: its exact side and each (backend, status) side."""
    return {"id": "c1", "exact_status": exact, "status": "fail",
            "backends": [{"backend": b, "status": s, "failure_kind": None, "reason": None}
                         for b, s in sides]}


def _check(call: str, got: object, want: object) -> None:
    assert got == want, f"{call} = {got!r}, but should be {want!r}"


# --- 1. a property record ---------------------------------------------------------------

@pytest.mark.parametrize(("outcome", "want"), [
    ("passed", "pass"), ("failed", "fail"), ("skipped", "skipped"), ("xfailed", "xfailed"),
    ("error", "fail"), ("rerun", "fail"), (None, "fail"),
])
def test_an_outcome_other_than_pytests_four_is_a_failure(outcome: object, want: str) -> None:
    _check(f"property_status({outcome!r})", v.property_status(outcome), want)


@pytest.mark.parametrize(("status", "examples", "want"), [
    ("pass", 3, True), ("fail", 1, True), ("expected", 1, True), ("pass", None, True),
    ("pass", 0, False), ("fail", 0, False), ("skipped", 3, False), ("xfailed", 3, False),
])
def test_a_test_ran_when_it_checked_at_least_one_example(status: str, examples: int | None,
                                                         want: bool) -> None:
    _check(f"ran(status={status!r}, examples={examples!r})", v.ran(_prop(status, examples)), want)


@pytest.mark.parametrize(("status", "examples", "want"), [
    ("skipped", 0, True), ("skipped", None, True), ("pass", 0, True),
    ("pass", 1, False), ("pass", None, False), ("fail", 0, False), ("xfailed", 0, False),
])
def test_a_test_could_not_run_when_skipped_or_passed_on_no_example(
        status: str, examples: int | None, want: bool) -> None:
    _check(f"could_not_run(status={status!r}, examples={examples!r})",
           v.could_not_run(_prop(status, examples)), want)


@pytest.mark.parametrize(("status", "examples", "wanted", "want"), [
    ("pass", 3, 25, True), ("pass", 24, 25, True),
    ("pass", 25, 25, False), ("pass", 30, 25, False), ("fail", 3, 25, False),
    ("pass", None, 25, False), ("pass", 3, None, False), ("pass", 3, 0, False),
])
def test_a_passed_test_is_short_when_it_ran_fewer_examples_than_asked(
        status: str, examples: int | None, wanted: int | None, want: bool) -> None:
    prop = _prop(status, examples, examples_wanted=wanted)
    _check(f"short_of_examples(status={status!r}, examples={examples!r}, wanted={wanted!r})",
           v.short_of_examples(prop), want)


@pytest.mark.parametrize(("kinds", "kind", "want"), [
    (["law"], "law", True), (["internal", "law"], "internal", True), ([], "raised", True),
    ([], None, True), (["internal"], "internal", False), (["internal", "internal"], "law", False),
    ([], "internal", False),
])
def test_a_failure_is_charged_to_the_backend_unless_every_failure_is_internal(
        kinds: list[str], kind: str | None, want: bool) -> None:
    prop = {**_failed(*kinds), "failure_kind": kind}
    _check(f"charged(failures={kinds}, failure_kind={kind!r})", v.charged(prop), want)


# --- 2. a claim -------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "want"), [
    ("pass", "pass"), ("skipped", "skipped"),
    ("fail", "fail"), ("expected", "fail"), ("passed", "fail"), (None, "fail"),
])
def test_a_claim_side_that_neither_passed_nor_skipped_failed(raw: object, want: str) -> None:
    _check(f"claim_side_status({raw!r})", v.claim_side_status(raw), want)


@pytest.mark.parametrize(("status", "kind", "want"), [
    ("fail", "raised", "raised"), ("fail", "internal", "internal"), ("fail", "law", "law"),
    ("fail", "bogus", "law"), ("fail", None, "law"),
    ("pass", "raised", None), ("skipped", "law", None),
])
def test_only_a_failed_side_has_a_kind_and_an_unknown_kind_is_a_law(
        status: str, kind: object, want: str | None) -> None:
    _check(f"claim_side_failure_kind({status!r}, {kind!r})",
           v.claim_side_failure_kind(status, kind), want)


@pytest.mark.parametrize(("raw", "want"), [
    ("pass", "pass"), ("fail", "fail"), ("skipped", "fail"), (None, "fail"), ("PASS", "fail"),
])
def test_the_exact_side_passes_only_when_it_says_pass(raw: object, want: str) -> None:
    _check(f"exact_status({raw!r})", v.exact_status(raw), want)


@pytest.mark.parametrize(("exact", "sides", "want"), [
    ("pass", [], "pass"), ("pass", ["pass", "pass"], "pass"),
    ("fail", ["pass"], "fail"), ("pass", ["pass", "fail"], "fail"),
    ("pass", ["skipped", "pass"], "skipped"), ("skipped", ["pass"], "skipped"),
    ("pass", ["skipped", "fail"], "fail"),
])
def test_a_claim_fails_when_a_side_fails_and_is_skipped_when_one_could_not_run(
        exact: str, sides: list[str], want: str) -> None:
    _check(f"claim_status({exact!r}, {sides})", v.claim_status(exact, sides), want)


@pytest.mark.parametrize(("exact", "sides", "want"), [
    ("pass", ["expected"], True), ("pass", ["expected", "pass"], True),
    ("pass", ["expected", "skipped"], True),
    ("pass", ["expected", "fail"], False), ("fail", ["expected"], False),
    ("pass", ["pass", "pass"], False), ("pass", [], False),
])
def test_a_claim_is_expected_when_every_failure_of_it_is_expected(
        exact: str, sides: list[str], want: bool) -> None:
    claim = _claim(exact, *((f"b{i}", s) for i, s in enumerate(sides)))
    _check(f"claim_expected(exact={exact!r}, sides={sides})", v.claim_expected(claim), want)


# --- 3. a backend -----------------------------------------------------------------------

def _known(backend: str, status: str) -> Record:
    return {"entry": 1, "backend": backend, "property": "p", "claim": None, "dtype": "float64",
            "kind": "law", "status": status}


@pytest.mark.parametrize(("properties", "claims", "known", "want"), [
    pytest.param([_prop()], [], [], "pass", id="a test ran"),
    pytest.param([_prop("pass", 0)], [], [], "unjudged", id="no example ran"),
    pytest.param([_prop("skipped", 0)], [], [], "unjudged", id="every test skipped"),
    pytest.param([], [], [], "unjudged", id="no test at all"),
    pytest.param([_prop(), _failed("law")], [], [], "fail", id="a charged failure"),
    pytest.param([_failed("internal")], [], [], "pass", id="an internal failure"),
    pytest.param([_prop("expected")], [], [], "pass", id="an expected failure"),
    pytest.param([_failed("law", backend="other")], [], [], "unjudged",
                 id="another backend's failure"),
    pytest.param([_prop()], [_claim("pass", ("b", "fail"))], [], "fail",
                 id="a claim fails on it"),
    pytest.param([_prop()], [_claim("pass", ("other", "fail"), ("b", "pass"))], [], "pass",
                 id="a claim fails on another"),
    pytest.param([_prop()], [_claim("fail", ("b", "pass"))], [], "pass",
                 id="a claim whose exact side fails"),
    pytest.param([_prop()], [_claim("pass", ("b", "expected"))], [], "pass",
                 id="a claim side expected"),
    pytest.param([_prop()], [], [_known("b", "fixed")], "fail", id="a known failure fixed"),
    pytest.param([_prop()], [], [_known("other", "fixed")], "pass",
                 id="another backend's known failure fixed"),
    pytest.param([_prop()], [], [_known("b", "expected")], "pass",
                 id="a known failure expected"),
    pytest.param([_prop("skipped", 0)], [], [_known("b", "fixed")], "fail",
                 id="fixed with nothing checked"),
])
def test_a_backend_fails_on_a_charged_failure_a_failed_claim_side_or_a_fixed_entry(
        properties: list[Record], claims: list[Record], known: list[Record], want: str) -> None:
    _check("backend_status('b', ...)", v.backend_status("b", properties, claims, known), want)


# --- 4. the run -------------------------------------------------------------------------

@pytest.mark.parametrize(("complete", "properties", "claims", "known", "backends", "want"), [
    pytest.param(True, ["pass"], ["pass"], [], ["pass"], "pass", id="all passed"),
    pytest.param(False, ["pass"], ["pass"], [], ["pass"], "incomplete", id="unfinished"),
    pytest.param(False, ["fail"], [], ["fixed"], ["fail"], "incomplete",
                 id="unfinished with failures"),
    pytest.param(True, ["pass", "fail"], [], [], ["pass"], "fail",
                 id="a property failed"),
    pytest.param(True, ["expected"], [], ["expected"], ["pass"], "pass",
                 id="a property failed as expected"),
    pytest.param(True, ["pass"], ["fail"], [], ["pass"], "fail", id="a claim failed"),
    pytest.param(True, ["pass"], ["expected", "skipped"], [], ["pass"], "pass",
                 id="a claim expected or skipped"),
    pytest.param(True, ["pass"], [], ["fixed"], ["pass"], "fail",
                 id="a known failure fixed"),
    pytest.param(True, ["pass"], [], ["unjudged"], ["pass"], "pass",
                 id="a known failure not checked"),
    pytest.param(True, ["pass"], [], [], ["pass", "unjudged"], "unjudged",
                 id="a backend had nothing checked"),
    pytest.param(True, ["fail"], [], [], ["unjudged"], "fail",
                 id="a failure outweighs nothing checked"),
    pytest.param(True, ["skipped", "xfailed"], [], [], ["pass"], "pass",
                 id="skipped and xfailed tests"),
])
def test_the_run_is_incomplete_then_fail_then_unjudged_then_pass(
        complete: bool, properties: list[str], claims: list[str], known: list[str],
        backends: list[str], want: str) -> None:
    got = v.run_status(complete=complete, properties=properties, claims=claims, known=known,
                       backends=backends)
    _check(f"run_status(complete={complete}, properties={properties}, claims={claims}, "
           f"known={known}, backends={backends})", got, want)


# --- 5. the conformance matrix ----------------------------------------------------------

_BACKEND = {"name": "b", "dtypes": ["float64", "float32"], "modes": ["vjp"]}


@pytest.mark.parametrize(("backend", "dtype", "mode", "want"), [
    (_BACKEND, "float64", "vjp", True), (_BACKEND, "any", "vjp", True),
    (None, "bfloat16", "jvp", True),
    (_BACKEND, "float16", "vjp", False), (_BACKEND, "float64", "jvp", False),
    (_BACKEND, "any", "jvp", False),
])
def test_a_backend_claims_a_column_when_it_claims_its_dtype_and_mode(
        backend: Record | None, dtype: str, mode: str, want: bool) -> None:
    _check(f"claims_column({backend and backend['name']}, {dtype!r}, {mode!r})",
           v.claims_column(backend, dtype, mode), want)


@pytest.mark.parametrize(("status", "mode", "dtype", "want"), [
    ("skipped", "vjp", "float16", "not claimed"), ("skipped", "jvp", "float64", "not claimed"),
    ("skipped", None, "float16", "not claimed"),
    ("skipped", "vjp", "float64", "skipped"), ("skipped", None, "any", "skipped"),
    ("fail", "vjp", "float16", "fail"), ("pass", "jvp", "float64", "pass"),
    ("xfailed", "vjp", "float16", "xfailed"),
])
def test_a_skip_the_backend_does_not_claim_is_not_claimed_and_any_other_status_stays(
        status: str, mode: str | None, dtype: str, want: str) -> None:
    prop = _prop(status, 0, mode=mode, dtype=dtype)
    _check(f"cell_status(status={status!r}, mode={mode!r}, dtype={dtype!r})",
           v.cell_status(prop, _BACKEND, dtype), want)


@pytest.mark.parametrize(("current", "new"), list(itertools.product(v.CELL_STATUSES, repeat=2)))
def test_a_cell_takes_the_status_that_comes_first_in_cell_statuses(current: str,
                                                                   new: str) -> None:
    want = min(current, new, key=v.CELL_STATUSES.index)
    _check(f"worse_cell_status({current!r}, {new!r})", v.worse_cell_status(current, new), want)


@pytest.mark.parametrize(("current", "new", "want"), [
    ("pass", "error", "error"), ("none", "error", "error"),
    ("fail", "error", "fail"), ("error", "fail", "error"), ("error", "pass", "error"),
])
def test_an_unknown_cell_status_counts_as_a_failure(current: str, new: str, want: str) -> None:
    _check(f"worse_cell_status({current!r}, {new!r})", v.worse_cell_status(current, new), want)


@pytest.mark.parametrize(("status", "want"), [
    ("fail", True), ("expected", True), ("pass", True), ("xfailed", True),
    ("skipped", True), ("error", True), ("not claimed", False), ("none", False),
])
def test_a_cell_counts_as_checked_unless_not_claimed_or_without_a_test(status: str,
                                                                       want: bool) -> None:
    _check(f"cell_checked({status!r})", v.cell_checked(status), want)


@pytest.mark.parametrize(("statuses", "claimed", "want"), [
    (["pass", "fail"], True, "fail"), (["fail"], False, "fail"),
    (["pass"], False, "not claimed"), (["skipped"], False, "not claimed"),
    (["pass", "skipped"], True, "pass"), (["expected"], True, "pass"),
    (["skipped"], True, "unjudged"), ([], True, "unjudged"),
])
def test_a_mode_fails_on_any_failure_then_is_not_claimed_pass_or_unjudged(
        statuses: list[str], claimed: bool, want: str) -> None:
    props = [_prop(s, 0 if s == "skipped" else 2) for s in statuses]
    _check(f"mode_status({statuses}, claimed={claimed})", v.mode_status(props, claimed), want)


def test_a_mode_with_only_empty_passes_is_unjudged() -> None:
    props = [_prop("pass", 0), _prop("pass", 0)]
    _check("mode_status([passed(0), passed(0)], claimed=True)",
           v.mode_status(props, True), "unjudged")
    _check("mode_status([passed(0), passed(1)], claimed=True)",
           v.mode_status([*props, _prop("pass", 1)], True), "pass")


# --- 6. known failures ------------------------------------------------------------------

@pytest.mark.parametrize(("verdict", "want"), [
    ("fail", "expected"), ("pass", "fixed"),
    ("skipped", "unjudged"), ("error", "unjudged"), ("", "unjudged"),
])
def test_a_vector_still_failing_is_expected_and_one_passing_now_is_fixed(verdict: str,
                                                                        want: str) -> None:
    _check(f"vector_entry_state({verdict!r})", v.vector_entry_state(verdict), want)


@pytest.mark.parametrize(("prop", "want"), [
    (_failed("law", "raised"), {"law", "raised"}),
    ({**_failed(), "failure_kind": "crash"}, {"crash"}),
    ({**_failed(), "failure_kind": None}, {"law"}),
    ({**_failed("timeout"), "failure_kind": "crash"}, {"timeout"}),
])
def test_a_failed_tests_kinds_are_its_failures_else_its_failure_kind_else_law(
        prop: Record, want: set[str]) -> None:
    _check(f"failure_kinds(failures={prop['failures']}, failure_kind={prop['failure_kind']!r})",
           v.failure_kinds(prop), want)


def _entry(**more: Any) -> Record:
    return {**_known("b", "expected"), **more}


@pytest.mark.parametrize(("entry", "prop", "want"), [
    pytest.param(_entry(), _failed("law"), True, id="all match"),
    pytest.param(_entry(kind="raised"), _failed("raised", "raised"), True, id="its kind"),
    pytest.param(_entry(status="fixed"), _failed("law"), False, id="entry fixed"),
    pytest.param(_entry(status="unjudged"), _failed("law"), False, id="entry not checked"),
    pytest.param(_entry(property="q"), _failed("law"), False, id="another property"),
    pytest.param(_entry(backend="other"), _failed("law"), False, id="another backend"),
    pytest.param(_entry(dtype="float32"), _failed("law"), False, id="another dtype"),
    pytest.param(_entry(), _failed("crash"), False, id="another kind"),
    pytest.param(_entry(), _failed("law", "crash"), False, id="a crash beside the law"),
])
def test_an_entry_expects_a_failure_of_its_backend_property_dtype_and_only_its_kind(
        entry: Record, prop: Record, want: bool) -> None:
    _check(f"expects({entry}, {prop['failures']})", v.expects(entry, prop), want)


def test_the_first_entry_that_expects_a_failure_is_the_one_that_matches() -> None:
    entries = [_entry(entry=1, dtype="float32"), _entry(entry=2), _entry(entry=3)]
    found = v.expecting(entries, _failed("law"))
    _check("expecting(entries 1-3, failed float64)['entry']", found and found["entry"], 2)
    _check("expecting(entries 1, failed float64)", v.expecting(entries[:1], _failed("law")), None)


def _side(status: str, kind: str | None = None, reason: str | None = None) -> Record:
    return {"backend": "b", "status": status, "failure_kind": kind, "reason": reason}


@pytest.mark.parametrize(("side", "want"), [
    pytest.param(_side("fail", "law", "off by one"),
                 v.ClaimSettlement("expected", "off by one", True), id="fails as listed"),
    pytest.param(_side("fail", "law"), v.ClaimSettlement("expected", "the claim fails", True),
                 id="fails as listed, no reason"),
    pytest.param(_side("pass"), v.ClaimSettlement("fixed", "the claim passes now"),
                 id="passes now"),
    pytest.param(_side("fail", "raised", "boom"),
                 v.ClaimSettlement(None, "claim c1 is fail on b"), id="fails otherwise"),
    pytest.param(_side("skipped", None, "no float16"),
                 v.ClaimSettlement(None, "claim c1 is skipped on b"), id="skipped"),
])
def test_a_claim_entry_is_expected_when_its_side_fails_of_its_kind_and_fixed_when_it_passes(
        side: Record, want: v.ClaimSettlement) -> None:
    entry = _entry(claim="c1", property=None, dtype=None)
    _check(f"settle_claim_side(kind='law', side={side})", v.settle_claim_side(entry, side), want)


# --- 7. a vector, a group, and a property over its vectors ----------------------------

@pytest.mark.parametrize(("judged", "want"), [
    pytest.param(Judged(unclaimed="dtype not claimed", kind="law", message="x"),
                 {"status": "skipped", "kind": None, "message": "dtype not claimed"},
                 id="unclaimed before failed"),
    pytest.param(Judged(kind="law", message="output[0]\n  misses"),
                 {"status": "fail", "kind": "law", "message": "output[0] misses"}, id="failed"),
    pytest.param(Judged(), {"status": "pass", "kind": None, "message": ""}, id="held"),
])
def test_vector_status_is_skipped_before_failed_before_passed(judged: Judged,
                                                              want: Record) -> None:
    _check(f"vector_verdict({judged})", v.vector_verdict(judged), want)
    _check(f"vector_status({judged})", v.vector_status(judged), want["status"])


def test_property_verdict_is_the_first_failure_else_the_first_pass_else_a_skip() -> None:
    def row(ident: str, status: str, dtype: str = "float64") -> dict[str, Any]:
        return {"id": ident, "property": "law", "dtype": dtype, "status": status}

    rows = [row("1", "skipped"), row("2", "pass"), row("3", "fail"), row("4", "fail"),
            row("5", "pass"), row("6", "skipped", "float16")]
    chosen = v.property_verdicts(rows)
    assert chosen[("law", "float64")]["id"] == "3", chosen
    assert chosen[("law", "float16")]["id"] == "6", chosen
    assert v.property_verdicts(rows[:2])[("law", "float64")]["id"] == "2", rows[:2]
    assert v.property_verdicts(rows[:1])[("law", "float64")]["id"] == "1", rows[:1]


# --- 8. residual blocks -----------------------------------------------------------------

@pytest.mark.parametrize(("outcome", "kind", "finding", "want"), [
    pytest.param("pass", None, None, "pass", id="a pass"),
    pytest.param("fail", "law", None, "fail", id="a failure"),
    pytest.param("unjudged", None, None, "unjudged", id="nothing judged"),
    pytest.param("passed", None, None, "fail", id="a word the laws do not give"),
    pytest.param("fail", "law", "law", "expected", id="a documented failure"),
    pytest.param("fail", None, "law", "expected", id="a failure of no kind is a law's"),
    pytest.param("pass", None, "law", "fixed", id="a documented failure that passes now"),
    pytest.param("fail", "raised", "law", "fail", id="a crash a documented value hides not"),
    pytest.param("unjudged", None, "law", "unjudged", id="a documented law judged nothing"),
])
def test_a_documented_finding_turns_its_failure_expected_and_its_pass_fixed(
        outcome: str, kind: str | None, finding: str | None, want: str) -> None:
    _check(f"block_law_verdict({outcome!r}, {kind!r}, {finding!r})",
           v.block_law_verdict(outcome, kind, finding), want)


@pytest.mark.parametrize(("laws", "want"), [
    (["pass", "pass"], "pass"),
    (["pass", "expected"], "expected"),
    (["expected", "unjudged"], "partly judged"),
    (["pass", "unjudged"], "partly judged"),
    (["unjudged", "unjudged"], "unjudged"),
    ([], "unjudged"),
    (["unjudged", "fail", "expected"], "fail"),
    (["pass", "fixed"], "fail"),
    (["expected", "fixed"], "fail"),
    (["pass", "great"], "fail"),
])
def test_a_block_fails_on_a_failure_or_a_fixed_finding_then_is_unjudged_expected_or_passes(
        laws: list[str], want: str) -> None:
    _check(f"block_verdict({laws})", v.block_verdict(laws), want)


@pytest.mark.parametrize(("blocks", "interrupted", "want"), [
    (["pass", "pass"], False, "pass"),
    (["pass", "expected"], False, "expected"),
    (["pass", "expected"], True, "partly judged"),
    (["pass"], True, "partly judged"),
    ([], True, "unjudged"),
    ([], False, "unjudged"),
    (["fail", "pass"], True, "fail"),
    (["unjudged", "pass"], False, "partly judged"),
    (["partly judged", "pass"], False, "partly judged"),
    (["unjudged", "unjudged"], False, "unjudged"),
])
def test_the_blocks_section_folds_its_blocks_and_is_not_a_pass_when_interrupted(
        blocks: list[str], interrupted: bool, want: str) -> None:
    _check(f"blocks_verdict({blocks}, interrupted={interrupted})",
           v.blocks_verdict(blocks, interrupted), want)


@pytest.mark.parametrize(("complete", "blocks", "want"), [
    (True, "pass", "pass"), (True, "expected", "pass"), (True, "fail", "fail"),
    (True, "unjudged", "unjudged"), (True, "partly judged", "partly judged"),
    (False, "pass", "incomplete"),
    (True, None, "pass"),
])
def test_a_blocks_only_run_takes_its_status_from_the_blocks_section(
        complete: bool, blocks: str | None, want: str) -> None:
    got = v.run_status(complete=complete, properties=[], claims=[], known=[], backends=[],
                       blocks=blocks)
    _check(f"run_status(complete={complete}, blocks={blocks!r}) with no other record", got, want)


def test_a_failed_blocks_section_fails_a_run_whose_backends_passed() -> None:
    got = v.run_status(complete=True, properties=["pass"], claims=["pass"], known=[],
                       backends=["pass"], blocks="fail")
    _check("run_status(properties passed, blocks='fail')", got, "fail")


@pytest.mark.parametrize(("complete", "exact", "blocks", "want"), [
    (True, "pass", None, "pass"), (True, "fail", None, "fail"),
    (True, "unjudged", None, "unjudged"), (True, "partly judged", None, "partly judged"),
    (False, "pass", None, "incomplete"), (True, "pass", "fail", "fail"),
    (True, "fail", "pass", "fail"), (True, "partly judged", "unjudged", "unjudged"),
])
def test_an_exact_run_takes_its_status_from_the_exact_section_as_from_the_blocks_one(
        complete: bool, exact: str, blocks: str | None, want: str) -> None:
    got = v.run_status(complete=complete, properties=[], claims=[], known=[], backends=[],
                       blocks=blocks, exact=exact)
    _check(f"run_status(complete={complete}, blocks={blocks!r}, exact={exact!r})", got, want)


# --- 9. a joined report ----------------------------------------------------------------

@pytest.mark.parametrize(("runs", "want"), [
    (["pass", "pass"], "pass"),
    (["pass", "unjudged"], "unjudged"),
    (["unjudged", "fail"], "fail"),
    (["fail", "incomplete", "pass"], "incomplete"),
    ([], "unjudged"),
])
def test_a_joined_report_is_incomplete_then_fail_then_unjudged_then_pass(
        runs: list[str], want: str) -> None:
    _check(f"joined_status({runs})", v.joined_status(runs), want)


@pytest.mark.parametrize(("machines", "want"), [
    (["pass", "pass"], "pass"), (["pass", "skipped"], "skipped"),
    (["skipped", "expected"], "expected"), (["expected", "fail", "pass"], "fail"),
    ([], "skipped"),
])
def test_a_joined_claim_fails_on_one_machine_then_is_expected_then_skipped_then_passes(
        machines: list[str], want: str) -> None:
    _check(f"joined_claim_status({machines})", v.joined_claim_status(machines), want)


# --- the one vocabulary -----------------------------------------------------------------

def _status_fields(node: Any, path: str = "") -> dict[str, Any]:
    """Every field of a JSON Schema named ``status``, ``exact_status`` or ``verdict``, by
    its path, and every ``$defs`` entry that is one (``block_verdict``...)."""
    found: dict[str, Any] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}/{key}"
            named = key in ("status", "exact_status", "verdict") and isinstance(value, dict) \
                and "$ref" in value and not path.endswith("/$defs")
            if named or (key.endswith("verdict") and path.endswith("/$defs")):
                found[here] = value
            found.update(_status_fields(value, here))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.update(_status_fields(value, f"{path}/{i}"))
    return found


SCHEMA_RECORDS = {
    "/properties/status": "run",
    "/properties/backends/items/properties/status": "backend",
    "/properties/claims/items/properties/exact_status": "exact side",
    "/properties/claims/items/properties/backends/items/properties/status": "claim side",
    "/properties/claims/items/properties/status": "claim",
    "/properties/properties/items/properties/status": "property",
    "/properties/matrix/properties/rows/items/properties/cells/items/properties/status":
        "matrix cell",
    "/properties/matrix/properties/modes/items/properties/status": "mode",
    "/properties/known_failures/properties/entries/items/properties/status": "known failure",
    "/$defs/block_verdict": "block",
    "/$defs/block_law_verdict": "block law",
    "/$defs/exact_verdict": "exact",
    "/$defs/exact_judgement_verdict": "exact judgement",
    "/$defs/exact_path/properties/verdict": "exact path",
    "/$defs/exact_judgement/properties/layer_laws/properties/verdict": "model layer laws",
}
"""Each status field of report.schema.json and the record whose statuses it holds."""


def test_one_vocabulary_holds_every_record_s_statuses() -> None:
    assert len(set(v.STATUSES)) == len(v.STATUSES), v.STATUSES
    parts = {s for statuses in v.RECORD_STATUSES.values() for s in statuses}
    _check("union of RECORD_STATUSES", sorted(parts), sorted(v.STATUSES))


def test_every_status_field_of_the_schema_refers_to_the_one_vocabulary() -> None:
    from resverify.reports.json_report import load_schema

    schema = load_schema()
    _check("$defs/status enum", schema["$defs"]["status"]["enum"], list(v.STATUSES))
    fields = _status_fields(schema)
    named = {f"#/$defs/{name}" for name in ("block_verdict", "block_law_verdict",
                                            "exact_verdict", "exact_judgement_verdict")}
    fields = {path: field for path, field in fields.items() if field.get("$ref") not in named}
    _check("the schema's status fields", sorted(fields), sorted(SCHEMA_RECORDS))
    for path, field in fields.items():
        record = SCHEMA_RECORDS[path]
        _check(f"{path} $ref", field.get("$ref"), "#/$defs/status")
        _check(f"{path} enum", sorted(field["enum"]), sorted(v.RECORD_STATUSES[record]))


def test_every_status_a_writer_renders_comes_from_the_vocabulary() -> None:
    """report.md shows each status by its icon, report.html by its CSS class: each writer
    knows exactly the vocabulary's words, no other (a word it knew and the schema does not
    would be a second vocabulary)."""
    from resverify.reports import html, markdown

    _check("markdown.ICONS", sorted(markdown.ICONS), sorted(v.STATUSES))
    classes = set(re.findall(r"\.([a-z][a-z-]*)", html.STYLE))
    shown = {s.replace(" ", "-") for s in v.STATUSES}
    _check("statuses report.html has no colour for", sorted(shown - classes), [])
