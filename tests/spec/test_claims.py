"""The claim catalog: every checkable seed fact is present, cited, passing, and able to fail."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from collections.abc import Callable, Iterable
from fractions import Fraction

import numpy as np
import pytest

from resverify.cli import claims as cmd_claims
from resverify.cli.claim_source import run_claims
from resverify.cli.main import main
from resverify.impl import Capabilities, resolve_backend
from resverify.reports.html import render_html
from resverify.reports.json_report import build_report, validate
from resverify.reports.markdown import render_markdown
from resverify.spec import claims as catalog
from resverify.spec import fixtures
from resverify.spec.claims import CLAIMS, SEED_FILES, Claim, check_claim, outcome_dict
from resverify.spec.claims.model import Interpreter
from resverify.spec.claims.register import SeedClaims
from resverify.spec.errors import BackendTimeout
from resverify.spec.ir import DTYPES, OPS
from resverify.spec.request import Request, Result, ResultError, Value

# Every S-item of SEEDS.md that can be computed (all of S01–S30; only the "context" lines
# about He et al. and Vaswani et al. are left out). S07 and S17 each hold one settled and
# one open fact, so they are split.
EXPECTED_IDS = {f"S{i:02d}" for i in range(1, 31)} - {"S07", "S17"} | {
    "S07a", "S07b", "S17a", "S17b"}
OPEN_CLAIMS = {"S07b", "S17b", "S30"}
SEED_NAME = re.compile(r"^\d{3}_[0-9a-f]{16}\.txt$")
BY_ID = {claim.id: claim for claim in CLAIMS}


Answer = Callable[[Request], Result]
REFERENCE = resolve_backend("numpy")


class Engine:
    """A small test backend: the reference's answers, or ``answer``'s, under declared claims.

    It records every request sent to it, so a test can see what was (not) sent.
    """

    name = "engine"

    def __init__(self, answer: Answer | None = None, dtypes: Iterable[str] = DTYPES,
                 ops: Iterable[str] = OPS) -> None:
        self.capabilities = Capabilities(tuple(dtypes), tuple(sorted(ops)))
        self.answer = answer or REFERENCE.run
        self.sent: list[Request] = []

    def run(self, request: Request) -> Result:
        self.sent.append(request)
        return self.answer(request)


def _uses(request: Request, op: str) -> bool:
    return any(node.op == op for node in request.program.nodes)


def _refuse_relu(request: Request) -> Result:
    if _uses(request, "relu"):
        return ResultError("unsupported", "this engine has no relu")
    return REFERENCE.run(request)


def _refuse_float32(request: Request) -> Result:
    if request.dtype == "float32":
        return ResultError("unsupported", "this engine has no float32")
    return REFERENCE.run(request)


def _as_float64(result: Result, grads_only: bool = False) -> Result:
    assert isinstance(result, Value)
    output = result.output if grads_only else result.output.astype(np.float64)
    return Value(output, grads={k: v.astype(np.float64) for k, v in result.grads.items()})


def _upcast_float32(request: Request) -> Result:
    """Right values, but a float32 request answered in float64."""
    result = REFERENCE.run(request)
    if request.dtype == "float32" and isinstance(result, Value):
        return _as_float64(result)
    return result


def _upcast_float32_grads(request: Request) -> Result:
    result = REFERENCE.run(request)
    if request.dtype == "float32" and isinstance(result, Value):
        return _as_float64(result, grads_only=True)
    return result


def _doubled_grads(request: Request) -> Result:
    """A broken backend: right outputs, every gradient doubled."""
    result = REFERENCE.run(request)
    if isinstance(result, ResultError):
        return result
    return Value(result.output, grads={k: 2 * v for k, v in result.grads.items()})


class Float64WithoutRelu(Engine):
    """Claims float64 and every op but relu, and answers ``unsupported`` for relu."""

    name = "float64-without-relu"

    def __init__(self) -> None:
        super().__init__(_refuse_relu, ("float64",), set(OPS) - {"relu"})


class Float64Only(Engine):
    """Claims float64 only: the float32 claim S30 cannot be checked on it."""

    name = "float64-only"

    def __init__(self) -> None:
        super().__init__(_refuse_float32, ("float64",))


class DoubledGrads(Engine):
    name = "doubled-grads"

    def __init__(self) -> None:
        super().__init__(_doubled_grads)


class UpcastFloat32(Engine):
    """Claims float32 and answers float32 requests in float64."""

    name = "upcast-float32"

    def __init__(self) -> None:
        super().__init__(_upcast_float32)


@pytest.fixture(scope="module")
def numpy_backend() -> Engine:
    return Engine()


def test_catalog_holds_every_checkable_seed_item() -> None:
    ids = [claim.id for claim in CLAIMS]
    assert len(ids) == len(set(ids)), f"duplicate ids in {ids}"
    missing, extra = EXPECTED_IDS - set(ids), set(ids) - EXPECTED_IDS
    assert not missing and not extra, f"missing {missing}, extra {extra}"
    assert {i[:3] for i in ids} == {f"S{i:02d}" for i in range(1, 31)}


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claim_cites_a_seed_file_and_section(claim: Claim) -> None:
    source = claim.source
    assert SEED_NAME.match(source.file), f"{claim.id}: source {source.file!r} is not a seed name"
    assert source.file in SEED_FILES, f"{claim.id}: {source.file} not among {SEED_FILES}"
    assert source.heading.strip() and source.english.strip(), f"{claim.id}: empty section"
    assert source.language in ("ru", "zh"), f"{claim.id}: language {source.language!r}"
    number = int(claim.id[1:3])
    expected_file = SEED_FILES[0 if number <= 14 else 1 if number <= 20 else 2]
    assert source.file == expected_file, f"{claim.id} cites {source.file}, not {expected_file}"


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claim_statement_is_our_own_english_sentence(claim: Claim) -> None:
    text = claim.statement
    assert not re.search(r"[\u0400-\u04ff\u4e00-\u9fff]", text), f"{claim.id}: {text!r}"
    assert text.endswith("."), f"{claim.id}: a statement is one sentence ending in '.'"


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claim_passes_exactly_and_on_the_numpy_backend(claim: Claim,
                                                       numpy_backend: Engine) -> None:
    outcome = check_claim(claim, numpy_backend)
    assert outcome.status == "pass", (
        f"{claim.id}: observed {outcome.observed!r}, expected {claim.expected!r}; "
        f"backend sides {outcome.backends!r}")
    sides = [side.status for side in outcome.backends]
    assert sides == ([] if claim.backend is None else ["pass"]), f"{claim.id}: {sides}"


def test_implementation_claims_run_on_a_backend() -> None:
    on_backend = {claim.id for claim in CLAIMS if claim.backend is not None}
    assert {"S02", "S06", "S07a", "S07b", "S10", "S11", "S12", "S30"} <= on_backend


@pytest.mark.parametrize("claim_id", sorted(OPEN_CLAIMS))
def test_open_claims_record_the_project_decision(claim_id: str) -> None:
    note = BY_ID[claim_id].note
    assert "Decision" in note, f"{claim_id}: note {note!r} must say what the project decided"


@pytest.mark.parametrize("claim_id", ["S06", "S11", "S25", "S24", "S28"])
def test_wrong_expected_value_fails_the_claim(claim_id: str) -> None:
    claim = BY_ID[claim_id]
    wrong = dataclasses.replace(claim, expected=Fraction(13, 4), backend_expected=None)
    outcome = check_claim(wrong)
    assert outcome.status == "fail", f"{claim_id} passed with expected=13/4: {outcome.observed}"


def test_wrong_backend_expectation_fails_the_claim(numpy_backend: Engine) -> None:
    wrong = dataclasses.replace(BY_ID["S07b"], backend_expected={"equal as values": True,
                                                                  "equal bitwise": True})
    outcome = check_claim(wrong, numpy_backend)
    assert (outcome.status, outcome.exact_status) == ("fail", "pass"), outcome
    assert [(s.status, s.failure_kind) for s in outcome.backends] == [("fail", "law")], outcome


@pytest.mark.parametrize("claim_id", ["S06", "S10", "S11", "S25"])
def test_broken_backend_fails_gradient_claims(claim_id: str) -> None:
    outcome = check_claim(BY_ID[claim_id], DoubledGrads())
    side = outcome.backends[0]
    assert (side.status, side.failure_kind) == ("fail", "law"), f"{claim_id}: {side}"
    assert side.observed != side.expected, side
    assert outcome.status == "fail"


# --- one meaning of unsupported: a claimed request answered `unsupported` fails, an unclaimed
# --- one is not sent and skips the claim on that backend --------------------------------------

def test_s12_skips_on_a_backend_that_does_not_claim_relu() -> None:
    engine = Float64WithoutRelu()
    outcome = check_claim(BY_ID["S12"], engine)
    side = outcome.backends[0]
    assert side.status == "skipped", f"S12 on {engine.name}: {side}"
    assert "relu" in str(side.reason) and "not claimed" in str(side.reason), side.reason
    assert not any(_uses(r, "relu") for r in engine.sent), "an unclaimed request was sent"
    assert outcome.status == "skipped", outcome.status


def _statuses(engine: Engine) -> dict[str, tuple[str, str | None]]:
    outcomes = [check_claim(claim, engine) for claim in CLAIMS if claim.backend is not None]
    return {o.claim.id: (o.backends[0].status, o.backends[0].failure_kind) for o in outcomes}


RELU_CLAIMS = {"S12", "S17a", "S17b", "S18", "S20"}


def test_every_claim_skips_what_the_backend_does_not_claim() -> None:
    got = _statuses(Float64WithoutRelu())
    skipped = {k for k, (status, _) in got.items() if status == "skipped"}
    assert skipped == RELU_CLAIMS | {"S30"}, got
    assert all(status in ("pass", "skipped") for status, _ in got.values()), got


def test_every_claim_fails_an_unsupported_answer_to_a_claimed_request() -> None:
    got = _statuses(Engine(_refuse_relu))
    refused = {k for k, (status, kind) in got.items() if (status, kind) == ("fail", "refused")}
    assert refused == RELU_CLAIMS, got
    assert all(status != "skipped" for status, _ in got.values()), got


def test_unsupported_float32_answer_fails_s30_when_float32_is_claimed() -> None:
    outcome = check_claim(BY_ID["S30"], Engine(_refuse_float32))
    side = outcome.backends[0]
    assert (side.status, side.failure_kind) == ("fail", "refused"), side
    assert "unsupported" in str(side.reason) and "no float32" in str(side.reason), side.reason
    assert outcome.status == "fail"


def test_backend_without_float32_skips_the_float32_claim_without_sending_it() -> None:
    engine = Float64Only()
    outcome = check_claim(BY_ID["S30"], engine)
    side = outcome.backends[0]
    assert side.status == "skipped" and "dtype float32 not claimed" in str(side.reason), side
    assert engine.sent == [], [r.dtype for r in engine.sent]
    assert (outcome.exact_status, outcome.status) == ("pass", "skipped")


# --- what the backend answers is checked for the request's storage dtype -----------------------

@pytest.mark.parametrize("answer", [_upcast_float32, _upcast_float32_grads],
                         ids=["output and grads", "grads only"])
def test_float32_answered_in_float64_fails_s30(answer: Answer) -> None:
    outcome = check_claim(BY_ID["S30"], Engine(answer))
    side = outcome.backends[0]
    assert (side.status, side.failure_kind) == ("fail", "bad_result"), side
    assert "float32" in str(side.reason) and "float64" in str(side.reason), side.reason
    assert outcome.status == "fail"


def test_every_backend_claim_checks_the_answer_dtype() -> None:
    """A float64 backend check answered in float32 fails too: no claim reads values blind."""
    def downcast(request: Request) -> Result:
        result = REFERENCE.run(request)
        if isinstance(result, ResultError):
            return result
        assert isinstance(result, Value)
        return Value(result.output.astype(np.float32),
                      grads={k: v.astype(np.float32) for k, v in result.grads.items()})

    got = _statuses(Engine(downcast, ("float64",)))
    wrong = {k for k, v in got.items() if v == ("fail", "bad_result")}
    assert wrong == set(got) - {"S30"}, got


def test_output_of_the_wrong_shape_is_a_bad_result() -> None:
    def flattened(request: Request) -> Result:
        result = REFERENCE.run(request)
        if isinstance(result, ResultError):
            return result
        return Value(result.output.reshape(1, -1), grads=result.grads)

    side = check_claim(BY_ID["S06"], Engine(flattened)).backends[0]
    assert (side.status, side.failure_kind) == ("fail", "bad_result"), side
    assert "output: gives shape [1, 2], spec declares [2]" in str(side.reason), side.reason


def test_backend_that_raises_fails_the_claim_with_the_reason() -> None:
    def crash(request: Request) -> Result:
        raise RuntimeError("engine fell over")

    side = check_claim(BY_ID["S06"], Engine(crash)).backends[0]
    assert (side.status, side.failure_kind) == ("fail", "raised"), side
    assert "RuntimeError: engine fell over" in str(side.reason), side.reason


def test_backend_fault_keeps_its_kind() -> None:
    def hang(request: Request) -> Result:
        raise BackendTimeout("no answer in 2 s")

    side = check_claim(BY_ID["S06"], Engine(hang)).backends[0]
    assert (side.status, side.failure_kind) == ("fail", "timeout"), side


def test_run_returning_none_is_a_bad_result() -> None:
    side = check_claim(BY_ID["S06"], Engine(lambda request: None)).backends[0]  # type: ignore
    assert (side.status, side.failure_kind) == ("fail", "bad_result"), side
    assert "run() must return a Result, got None" in str(side.reason), side.reason


def test_error_answer_where_a_value_is_due_is_named() -> None:
    def internal(request: Request) -> Result:
        return ResultError("backend_error", "out of memory")

    side = check_claim(BY_ID["S06"], Engine(internal)).backends[0]
    assert (side.status, side.failure_kind) == ("fail", "refused"), side
    assert "backend_error" in str(side.reason) and "out of memory" in str(side.reason), side.reason


def test_float32_result_beyond_its_budget_fails_s30() -> None:
    def off_by_eight_ulps(request: Request) -> Result:
        result = REFERENCE.run(request)
        if request.dtype != "float32" or isinstance(result, ResultError):
            return result

        def bump(v: np.ndarray) -> np.ndarray:
            return np.asarray(v + 8 * np.spacing(v), dtype=v.dtype)

        return Value(bump(result.output),
                     grads={k: bump(v) for k, v in result.grads.items()})

    side = check_claim(BY_ID["S30"], Engine(off_by_eight_ulps)).backends[0]
    assert side.status == "fail", side
    assert isinstance(side.observed, dict)
    assert side.observed["float32 within budget"] is False, side.observed


def test_crashing_check_is_a_failed_claim_with_the_reason() -> None:
    def boom() -> object:
        raise ZeroDivisionError("broken check")

    outcome = check_claim(dataclasses.replace(BY_ID["S01"], check=boom))
    assert outcome.status == "fail"
    assert "ZeroDivisionError" in str(outcome.observed)


def test_outcome_dict_is_plain_json_with_exact_fractions(numpy_backend: Engine) -> None:
    entry = outcome_dict(check_claim(BY_ID["S06"], numpy_backend))
    for key in ("id", "source", "section", "statement", "expected", "observed", "exact_status",
                "status", "backends", "note"):
        assert key in entry, f"missing {key} in {sorted(entry)}"
    assert entry["source"] == "000_0ed21ebc8dc36f9a.txt"
    assert json.loads(json.dumps(entry)) == entry
    assert entry["observed"]["grad x"] == ["1/2", "13/4"], entry["observed"]  # type: ignore[index]
    side = entry["backends"][0]  # type: ignore[index]
    assert (side["backend"], side["status"]) == ("engine", "pass"), side
    assert side["observed"]["grad x"] == ["1/2", "13/4"], side


def test_jsonable_converts_numpy_scalars_and_nested_data() -> None:
    data = {"a": (Fraction(1, 3), np.bool_(True), np.float64(0.5)), 2: [Fraction(4)]}
    assert catalog.jsonable(data) == {"a": ["1/3", True, 0.5], "2": ["4"]}


# --- the command ------------------------------------------------------------------------------

def test_cli_claims_prints_the_table_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["claims"])
    out = capsys.readouterr().out
    assert code == 0, out
    for claim in CLAIMS:
        on_numpy = "-" if claim.backend is None else "pass"
        assert re.search(rf"^{claim.id}\s+pass\s+pass\s+{re.escape(on_numpy)}\s", out, re.M), (
            f"no row '{claim.id} pass pass {on_numpy}' in\n{out}")
    assert "passed=32 failed=0 skipped=0" in out, out


def test_cli_claims_shows_the_backends_own_status(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["claims", "--backend", "tests.spec.test_claims:Float64Only"])
    out = capsys.readouterr().out
    assert code == 0, out
    row = next(line for line in out.splitlines() if line.startswith("S30 "))
    assert re.match(r"S30\s+skipped\s+pass\s+skipped\s", row), row
    assert "dtype float32 not claimed" in out, out
    assert "skipped=1" in out, out


def test_cli_claims_checks_each_backend_given(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["claims", "--backend", "numpy", "--backend",
                 "tests.spec.test_claims:Float64WithoutRelu"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"^id\s+status\s+exact\s+numpy\s+float64-without-relu\s+source$", out,
                     re.M), out
    assert re.search(r"^S12\s+skipped\s+pass\s+pass\s+skipped\s", out, re.M), out
    assert re.search(r"^S12 on float64-without-relu: skipped: op\(s\) \['relu'\] not claimed",
                     out, re.M), out
    assert "passed=26 failed=0 skipped=6" in out, out


def test_cli_claims_json_has_each_backends_observation(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    code = main(["claims", "--json", "--backend", "tests.spec.test_claims:DoubledGrads"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    assert {c["id"] for c in doc["claims"]} == EXPECTED_IDS
    s10 = next(c for c in doc["claims"] if c["id"] == "S10")
    assert (s10["exact_status"], s10["status"]) == ("pass", "fail"), s10
    assert s10["backends"] == [{
        "backend": "doubled-grads", "status": "fail", "failure_kind": "law", "reason": None,
        "expected": {"output": ["4", "-2"], "grad x": ["3", "-4"]},
        "observed": {"output": ["4", "-2"], "grad x": ["6", "-8"]}}], s10["backends"]


def test_cli_claims_json_on_numpy(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["claims", "--json", "--backend", "numpy"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    for entry in doc["claims"]:
        assert {"id", "source", "section", "statement", "expected", "observed",
                "status", "backends"} <= set(entry), entry
        assert entry["status"] == "pass", entry
    s25 = next(c for c in doc["claims"] if c["id"] == "S25")
    assert s25["expected"] == {"a=-1/2": "1/8", "a=1": "8"}, s25["expected"]


def test_cli_claims_exits_one_when_a_claim_fails(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    wrong = dataclasses.replace(BY_ID["S01"], expected={"output": (), "shape": (2,)})
    monkeypatch.setattr(cmd_claims, "CLAIMS", (wrong, BY_ID["S10"]))
    assert main(["claims"]) == 1
    assert re.search(r"^S01\s+fail", capsys.readouterr().out, re.M)


def test_cli_claims_unknown_backend_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["claims", "--backend", "no-such-backend"]) == 2
    assert "unknown backend" in capsys.readouterr().err


def test_collect_claims_for_the_report_writer() -> None:
    entries = cmd_claims.collect_claims("numpy")
    assert [e["id"] for e in entries] == [c.id for c in CLAIMS]
    assert all(e["status"] == "pass" for e in entries), [e["id"] for e in entries
                                                         if e["status"] != "pass"]


@pytest.mark.parametrize(("claim_id", "key", "wrong"), [
    ("S25", "a=-1/2", Fraction(1, 4)),
    ("S06", "grad w", (Fraction(2), Fraction(2), Fraction(1), Fraction(-1))),
    ("S30", "float32 equals exact", True),
    ("S24", "expansion L=3", "a**3 + a**2 + a + 1"),
])
def test_near_miss_expected_value_fails(claim_id: str, key: str, wrong: object) -> None:
    claim = BY_ID[claim_id]
    assert isinstance(claim.expected, dict)
    wrong_claim = dataclasses.replace(claim, expected={**claim.expected, key: wrong})
    outcome = check_claim(wrong_claim)
    assert outcome.status == "fail", f"{claim_id} passed with {key}={wrong!r}"


# --- the report: one entry per claim, the exact side and every backend's side -----------------

_SUBSET = (BY_ID["S10"], BY_ID["S24"], BY_ID["S30"])


ReportClaims = Callable[[dict[str, str]], list[dict]]


@pytest.fixture
def report_claims(monkeypatch: pytest.MonkeyPatch) -> ReportClaims:
    """The report's claim entries for backends given as ``{name: shown}``, on three claims."""
    monkeypatch.setattr(cmd_claims, "CLAIMS", _SUBSET)

    def claims(backends: dict[str, str]) -> list[dict]:
        done = run_claims(backends)
        assert not done.broken and not done.warnings, done.warnings
        return done.claims

    return claims


def _report(claims: list[dict]) -> dict:
    doc = build_report(run={"seed": 1, "profile": "ci", "backends": ["numpy"], "pytest_args": [],
                            "pytest_exit_code": 0},
                       backends=[REFERENCE], claims=claims, properties=[], complete=True,
                       warnings=[], timings={})
    validate(doc)
    return doc


def test_report_entry_of_a_failing_backend_claim_shows_the_backends_side(
        report_claims: ReportClaims) -> None:
    entries = report_claims({"tests.spec.test_claims:DoubledGrads": "doubled"})
    s10 = next(e for e in entries if e["id"] == "S10")
    assert (s10["status"], s10["exact_status"]) == ("fail", "pass"), s10
    assert s10["backends"] == [{
        "backend": "doubled", "status": "fail", "failure_kind": "law", "reason": None,
        "expected": '{"grad x": ["3", "-4"], "output": ["4", "-2"]}',
        "observed": '{"grad x": ["6", "-8"], "output": ["4", "-2"]}'}], s10["backends"]
    assert [e["id"] for e in entries if e["status"] == "fail"] == ["S10", "S30"], entries
    doc = _report(entries)
    assert doc["summary"]["claims"] == {"total": 3, "pass": 1, "fail": 2, "skipped": 0,
                                        "expected": 0}
    markdown = render_markdown(doc).split("## Failures")[1]
    assert '"grad x": ["6", "-8"]' in markdown and '"grad x": ["3", "-4"]' in markdown, markdown
    page = render_html(doc, {})
    assert "[&quot;6&quot;, &quot;-8&quot;]" in page, page


def test_claim_skipped_on_a_backend_is_not_reported_as_passed(
        report_claims: ReportClaims) -> None:
    entries = report_claims({"numpy": "numpy", "tests.spec.test_claims:Float64Only": "f64"})
    assert [e["id"] for e in entries] == ["S10", "S24", "S30"], "one entry per claim"
    s30 = next(e for e in entries if e["id"] == "S30")
    assert (s30["status"], s30["exact_status"]) == ("skipped", "pass"), s30
    sides = [(s["backend"], s["status"]) for s in s30["backends"]]
    assert sides == [("numpy", "pass"), ("f64", "skipped")], sides
    assert s30["backends"][0]["reason"] is None, s30["backends"][0]
    assert "dtype float32 not claimed" in s30["backends"][1]["reason"], s30["backends"][1]
    doc = _report(entries)
    assert doc["summary"]["claims"] == {"total": 3, "pass": 2, "fail": 0, "skipped": 1,
                                        "expected": 0}
    table = render_markdown(doc).split("## Claims")[1]
    row = next(line for line in table.splitlines() if line.startswith("| S30 "))
    assert "skipped" in row and "dtype float32 not claimed" in row, row
    page = render_html(doc, {})
    assert "dtype float32 not claimed" in page


def _terse_mismatch(request: Request) -> Result:
    """The reference's answers, but shape errors spell shapes without spaces ("[2,2]")."""
    result = REFERENCE.run(request)
    if isinstance(result, Value) or result.shapes is None:
        return result
    left, right = result.shapes
    text = f"cannot merge {','.join(map(str, left))} with {','.join(map(str, right))}"
    return ResultError("shape_mismatch", text.replace(" ", ""), result.shapes)


def test_s02_judges_the_typed_shapes_not_the_message_text() -> None:
    outcome = check_claim(BY_ID["S02"], Engine(_terse_mismatch))
    side = outcome.backends[0]
    assert side.status == "pass", f"S02 on an engine writing '[2,2]'-style messages: {side}"



# --- each claim is one block: its declaration on the functions that observe it ----------------

ONE_SCREEN = 50
"""Lines a claim's declaration and every function it names may span (S30, the longest, 45)."""


def _declaration(claim: Claim) -> tuple[set[str], int, str]:
    """The files a claim's observers are in, the lines they span, and the first one's text
    (which starts with the declaration: the decorator sits on it)."""
    files, lines, texts = set(), [], []
    for function in claim.observers:
        source, start = inspect.getsourcelines(function)
        files.add(str(inspect.getsourcefile(function)))
        lines += [start, start + len(source) - 1]
        texts.append("".join(source))
    return files, max(lines) - min(lines) + 1, texts[0]


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_claim_statement_and_observers_are_declared_together(claim: Claim) -> None:
    files, span, declaration = _declaration(claim)
    assert declaration.startswith("@SEED.") and f'"{claim.id}"' in declaration, (
        f"{claim.id} is not declared on its observer:\n{declaration}")
    assert len(files) == 1, f"{claim.id} is observed from several files: {sorted(files)}"
    assert span <= ONE_SCREEN, f"{claim.id} spans {span} lines, more than {ONE_SCREEN}"


def test_observers_far_from_their_declaration_are_seen() -> None:
    s01, s14, s30 = BY_ID["S01"], BY_ID["S14"], BY_ID["S30"]
    far = dataclasses.replace(s01, observers=(*s01.observers, *s14.observers))
    elsewhere = dataclasses.replace(s01, observers=(*s01.observers, *s30.observers))
    assert _declaration(far)[1] > ONE_SCREEN
    assert len(_declaration(elsewhere)[0]) == 2


def _made_up_claim(exact_says: bool, backend_says: str) -> Claim:
    """One observation on both sides, plus a key each side observes alone."""
    seed = SeedClaims(SEED_FILES[0])

    @seed.claim("S99", seed.section("Раздел", "Section", "ru"), "A made-up claim.",
                expected={"law": True, "shape": (2,), "bits": "same"},
                exact_also={"law": lambda: exact_says},
                backend_also={"bits": lambda run: backend_says})
    def _observe(interp: Interpreter) -> dict[str, object]:
        return {"shape": interp(fixtures.linear_block_request()).shape}

    return seed.claims[0]


def test_a_key_one_side_observes_is_expected_of_that_side_only(numpy_backend: Engine) -> None:
    claim = _made_up_claim(True, "same")
    assert (claim.expected, claim.expected_from_backend) == (
        {"law": True, "shape": (2,)}, {"shape": (2,), "bits": "same"})
    outcome = check_claim(claim, numpy_backend)
    assert outcome.observed == {"law": True, "shape": (2,)}, outcome
    assert outcome.backends[0].observed == {"shape": (2,), "bits": "same"}, outcome
    assert outcome.status == "pass", outcome


@pytest.mark.parametrize(("exact_says", "backend_says", "sides"), [
    (False, "same", ("fail", "pass")), (True, "flipped", ("pass", "fail"))])
def test_a_key_one_side_observes_fails_that_side_alone(
        exact_says: bool, backend_says: str, sides: tuple[str, str],
        numpy_backend: Engine) -> None:
    outcome = check_claim(_made_up_claim(exact_says, backend_says), numpy_backend)
    assert (outcome.exact_status, outcome.backends[0].status) == sides, outcome
    assert outcome.status == "fail"


def test_cli_claims_cites_the_original_heading_with_its_english_title(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["claims"]) == 0
    out = capsys.readouterr().out
    for claim in CLAIMS:
        section = claim.source
        cited = f"{section.file} § {section.heading}"
        if section.english != section.heading:
            cited += f" ({section.english})"
        row = next(line for line in out.splitlines() if line.startswith(f"{claim.id} "))
        assert row.endswith(cited), f"{claim.id}: row {row!r} does not end with {cited!r}"


def test_report_claims_cite_the_english_section_title() -> None:
    """report.json keeps each claim's English section title, so report.md cites it."""
    entries = run_claims({"numpy": "numpy"}).claims
    by_id = {e["id"]: e for e in entries}
    for claim in CLAIMS:
        assert by_id[claim.id]["section_en"] == claim.source.english, by_id[claim.id]
    doc = _report(entries)
    validate(doc)
    first = CLAIMS[0].source
    assert f"§ {first.heading} ({first.english})" in render_markdown(doc)
