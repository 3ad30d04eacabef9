"""report.json: it follows its shipped JSON Schema, and the same seed gives the same
document apart from the fields named as timings."""

from __future__ import annotations

import copy
import json
import shutil
from typing import Any

import jsonschema
import numpy as np
import pytest

from resverify.reports.json_report import SCHEMA_VERSION, load_schema, strip_timings, validate
from tests.reports.fakes import run_check


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The failing fake suite checked twice with the same seed, into the same folder
    (without plots: that the same seed draws the same plots, series included, is
    test_report_plots' own law, and the plots' section of report.json is validated there
    and in test_report_forward_plot)."""
    root = tmp_path_factory.mktemp("json")
    docs = []
    with pytest.MonkeyPatch.context() as mp:
        for _ in range(2):
            code, out = run_check(mp, root, "--profile", "dev", "--seed", "7", "--no-plots")
            assert code == 1, f"exit code {code} for a failing suite, expected 1"
            docs.append(json.loads((out / "report.json").read_text()))
            shutil.copytree(out, root / f"copy{len(docs)}")
    return docs


def test_report_validates_against_the_shipped_schema(two_runs: list[dict[str, Any]]) -> None:
    doc = two_runs[0]
    validate(doc)
    assert doc["schema_version"] == SCHEMA_VERSION == load_schema()["properties"][
        "schema_version"]["const"]


def test_schema_refuses_a_report_missing_or_misnaming_fields(
        two_runs: list[dict[str, Any]]) -> None:
    missing = copy.deepcopy(two_runs[0])
    del missing["complete"]
    wrong = copy.deepcopy(two_runs[0])
    wrong["properties"][0]["status"] = "ok"
    untimed = copy.deepcopy(two_runs[0])
    untimed["properties"][0]["elapsed"] = 1.5  # a timing not named as one
    for bad in (missing, wrong, untimed):
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)


def test_report_records_environment_backends_claims_and_properties(
        two_runs: list[dict[str, Any]]) -> None:
    doc = two_runs[0]
    assert set(doc["environment"]["dependencies"]) >= {"numpy", "sympy", "mpmath",
                                                       "hypothesis", "pytest"}
    assert doc["run"]["seed"] == 7 and doc["run"]["profile"] == "dev"
    assert doc["backends"][0]["name"] == "numpy" and "float64" in doc["backends"][0]["dtypes"]
    about = doc["backends"][0]["about"]
    assert (about["library"], about["version"], about["device"]) == (
        "numpy", np.__version__, "cpu"), about
    assert [c["id"] for c in doc["claims"]] == ["S25", "S99"]
    by_status = {p["id"].split("::")[-1]: p for p in doc["properties"]}
    failed = by_status["test_zero_branch_is_identity[numpy]"]
    assert failed["status"] == "fail" and failed["vector"] == "out/vectors/zero_branch-numpy.json"
    assert failed["replay"] == f"resverify replay {failed['vector']} --backend numpy"
    assert "should be 2" in failed["message"] and "<object object>" in failed["message"]
    assert failed["message"].endswith(" vector: out/vectors/zero_branch-numpy.json"), \
        failed["message"]
    skipped = by_status["test_unclaimed_dtype_is_skipped[numpy]"]
    assert (skipped["status"], skipped["skip_reason"]) == ("skipped",
                                                           "backend does not claim bfloat16")
    passed = by_status["test_addition_commutes[numpy-float32]"]
    assert (passed["status"], passed["dtype"], passed["examples"]) == ("pass", "float32", 5)
    assert doc["complete"] is True and doc["status"] == "fail"
    assert doc["summary"]["properties"] == {"total": 4, "pass": 2, "fail": 1, "skipped": 1,
                                             "expected": 0}


def test_same_seed_gives_the_same_report_apart_from_timings(two_runs: list[dict[str, Any]]) -> None:
    first, second = two_runs
    assert strip_timings(first) == strip_timings(second)
    assert first["timings"] and "time_seconds" in first["properties"][0]
    assert "timings" not in strip_timings(first)


def test_strip_timings_removes_only_timing_fields() -> None:
    doc = {"timings": {"total_seconds": 1}, "a": [{"time_seconds": 2, "b": 3}], "c_seconds": 4,
           "seconds": 5}
    assert strip_timings(doc) == {"a": [{"b": 3}], "seconds": 5}


def test_claim_values_become_canonical_json_text() -> None:
    from fractions import Fraction

    from resverify.reports.json_report import claim_entry

    entry = claim_entry({"id": "S25", "source": "s.txt", "statement": "1/8",
                         "expected": {"value": Fraction(1, 8), "L": 3}, "observed": 0.125,
                         "status": "pass"}, "numpy")
    assert (entry["expected"], entry["observed"]) == ('{"L": 3, "value": "1/8"}', "0.125")
    assert entry["status"] == "pass" and entry["section"] is None
    assert claim_entry({"id": "x", "status": "maybe"}, "numpy")["status"] == "fail"
