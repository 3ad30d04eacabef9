"""The claim catalog: every checkable seed fact is present, cited, passing, and able to fail."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

from impl import resolve_backend
from reports import cmd_claims
from reports.cli import main
from spec import claims as catalog
from spec.claims import CLAIMS, SEED_FILES, Claim, check_claim, outcome_dict
from spec.request import Request, Result

# Every S-item of SEEDS.md that can be computed (all of S01–S30; only the "context" lines
# about He et al. and Vaswani et al. are left out). S07 and S17 each hold one settled and
# one open fact, so they are split.
EXPECTED_IDS = {f"S{i:02d}" for i in range(1, 31)} - {"S07", "S17"} | {
    "S07a", "S07b", "S17a", "S17b"}
OPEN_CLAIMS = {"S07b", "S17b", "S30"}
SEED_NAME = re.compile(r"^\d{3}_[0-9a-f]{16}\.txt$")
BY_ID = {claim.id: claim for claim in CLAIMS}


Runner = Callable[[Request], Result]


@pytest.fixture(scope="module")
def numpy_run() -> Runner:
    return resolve_backend("numpy").run


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
def test_claim_passes_exactly_and_on_the_numpy_backend(claim: Claim, numpy_run: Runner) -> None:
    outcome = check_claim(claim, numpy_run)
    assert outcome.status == "pass", (
        f"{claim.id}: observed {outcome.observed!r}, expected {claim.expected!r}; backend "
        f"observed {outcome.backend_observed!r}, expected {claim.expected_from_backend!r}")
    assert outcome.backend_status in (None, "pass"), f"{claim.id}: {outcome.backend_status}"


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


def test_wrong_backend_expectation_fails_the_claim(numpy_run: Runner) -> None:
    wrong = dataclasses.replace(BY_ID["S07b"], backend_expected={"equal as values": True,
                                                                  "equal bitwise": True})
    outcome = check_claim(wrong, numpy_run)
    assert (outcome.status, outcome.backend_status) == ("fail", "fail"), outcome


def _doubling_run(request: Request) -> Result:
    """A broken backend: right outputs, every gradient doubled."""
    result = resolve_backend("numpy").run(request)
    if result.grads is None:
        return result
    return Result(output=result.output, grads={k: 2 * v for k, v in result.grads.items()})


@pytest.mark.parametrize("claim_id", ["S06", "S10", "S11", "S25"])
def test_broken_backend_fails_gradient_claims(claim_id: str) -> None:
    outcome = check_claim(BY_ID[claim_id], _doubling_run)
    assert outcome.backend_status == "fail", f"{claim_id}: {outcome.backend_observed}"
    assert outcome.status == "fail"


def _float64_only(request: Request) -> Result:
    if request.dtype != "float64":
        return Result.failure("unsupported", f"no {request.dtype}")
    return resolve_backend("numpy").run(request)


def test_backend_without_float32_skips_the_float32_claim() -> None:
    outcome = check_claim(BY_ID["S30"], _float64_only)
    assert outcome.backend_status == "skipped", outcome.backend_observed
    assert outcome.status == "pass"


def test_crashing_check_is_a_failed_claim_with_the_reason() -> None:
    def boom() -> object:
        raise ZeroDivisionError("broken check")

    outcome = check_claim(dataclasses.replace(BY_ID["S01"], check=boom))
    assert outcome.status == "fail"
    assert "ZeroDivisionError" in str(outcome.observed)


def test_outcome_dict_is_plain_json_with_exact_fractions(numpy_run: Runner) -> None:
    entry = outcome_dict(check_claim(BY_ID["S06"], numpy_run))
    for key in ("id", "source", "section", "statement", "expected", "observed", "status", "note"):
        assert key in entry, f"missing {key} in {sorted(entry)}"
    assert entry["source"] == "000_0ed21ebc8dc36f9a.txt"
    assert json.loads(json.dumps(entry)) == entry
    assert entry["observed"]["grad x"] == ["1/2", "13/4"], entry["observed"]  # type: ignore[index]


def test_jsonable_converts_numpy_scalars_and_nested_data() -> None:
    data = {"a": (Fraction(1, 3), np.bool_(True), np.float64(0.5)), 2: [Fraction(4)]}
    assert catalog.jsonable(data) == {"a": ["1/3", True, 0.5], "2": ["4"]}


def test_cli_claims_prints_the_table_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["claims"])
    out = capsys.readouterr().out
    assert code == 0, out
    for claim_id in EXPECTED_IDS:
        assert re.search(rf"^{claim_id}\s+pass\b", out, re.M), f"no passing row {claim_id}"
    assert "failed=0" in out


def test_cli_claims_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["claims", "--json", "--backend", "numpy"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {c["id"] for c in doc["claims"]} == EXPECTED_IDS
    for entry in doc["claims"]:
        assert {"id", "source", "section", "statement", "expected", "observed",
                "status"} <= set(entry), entry
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


def _float32_off_by_eight_ulps(request: Request) -> Result:
    """A backend whose float32 results are 8 ulps too large: outside the float32 budget."""
    result = resolve_backend("numpy").run(request)
    if request.dtype != "float32" or result.grads is None or result.output is None:
        return result

    def bump(v: np.ndarray) -> np.ndarray:
        return np.asarray(v + 8 * np.spacing(v), dtype=v.dtype)

    return Result(output=bump(result.output), grads={k: bump(v) for k, v in result.grads.items()})


def test_float32_result_beyond_its_budget_fails_s30() -> None:
    outcome = check_claim(BY_ID["S30"], _float32_off_by_eight_ulps)
    assert outcome.backend_status == "fail", outcome.backend_observed
    assert isinstance(outcome.backend_observed, dict)
    assert outcome.backend_observed["float32 within budget"] is False, outcome.backend_observed
