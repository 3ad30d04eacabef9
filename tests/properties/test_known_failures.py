"""Known failures, pinned: a listed failure that reproduces on its vector is ``expected`` and
the run passes; a listed one that passes now is ``fixed`` and fails the run; an unlisted
failure, or one of another kind, fails as before. Files with mistakes are one-line usage
errors naming the file and the entry.

The in-process tests judge real vectors on fake backends (the catalog ``tests/mutants/``);
one end-to-end ``resverify check`` run shows the file turning a red run green.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from resverify.impl.backend import Backend
from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties import known_failures
from resverify.properties.vectors import save_vector
from resverify.reports.json_report import build_report, known_entries, validate
from resverify.spec.errors import UsageError
from resverify.spec.fixtures import linear_block_request
from tests.mutants import DroppedIdentityGrad
from tests.reports.fakes import run_check

ROOT = Path(__file__).resolve().parents[2]
PROPERTY = "forward_and_gradients_match_spec_within_budget"
BROKEN = DroppedIdentityGrad.name


def _file(folder: Path, body: str, name: str = "known.toml") -> Path:
    path = folder / name
    path.write_text(body, encoding="utf-8")
    return path


def _entry(backend: str, prop: str = PROPERTY, vector: str = "s06.json", extra: str = "") -> str:
    return (f'[[failure]]\nbackend = "{backend}"\nproperty = "{prop}"\nvector = "{vector}"\n'
            f'reason = "the merge forgets its identity edge"\n{extra}\n')


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding s06.json: S06's request, which the broken backend gets wrong."""
    saved = save_vector(linear_block_request(), tmp_path, PROPERTY, BROKEN)
    saved.rename(tmp_path / "s06.json")
    return tmp_path


def _failed(backend: str, prop: str = PROPERTY, kind: str = "law",
            dtype: str = "float64") -> dict[str, Any]:
    """A failed property test as report.json holds it."""
    return {"id": f"test_{prop}[{backend}-{dtype}]", "property": prop, "backend": backend,
            "mode": "vjp",
            "dtype": dtype, "status": "fail", "examples": 3, "time_seconds": 0.1,
            "vector": None, "replay": None, "skip_reason": None, "message": "wrong",
            "examples_wanted": 25, "failure_kind": kind,
            "failures": [{"message": "wrong", "kind": kind, "vector": None, "replay": None,
                          "element": None}],
            "known_failure": None, "reached": {}, "floor": [], "backend_warnings": []}


def _report(path: Path, backends: list[Backend], props: list[dict[str, Any]],
            claims: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    entries = known_failures.load(path)
    checked = known_entries(known_failures.judge_entries(entries, {b.name: b for b in backends}),
                            path.parent)
    doc = build_report(run={"seed": 0, "profile": "ci", "backends": [b.name for b in backends],
                            "pytest_args": [], "pytest_exit_code": 1},
                       backends=backends, claims=claims or [], properties=props, complete=True,
                       warnings=[], timings={}, known={"file": str(path), "entries": checked})
    validate(doc)
    return doc


def test_listed_failure_that_reproduces_is_expected_and_the_run_passes(folder: Path) -> None:
    path = _file(folder, _entry(BROKEN))
    doc = _report(path, [DroppedIdentityGrad()], [_failed(BROKEN)])
    (entry,) = doc["known_failures"]["entries"]
    assert entry["status"] == "expected", entry
    assert "grads['x']" in entry["detail"], entry["detail"]
    prop = doc["properties"][0]
    assert (prop["status"], prop["known_failure"]) == ("expected", 1), prop
    assert doc["status"] == "pass", (doc["status"], doc["summary"])
    assert doc["summary"]["properties"]["expected"] == 1
    assert doc["backends"][0]["status"] == "pass" and doc["backends"][0]["expected"] == 1


def test_listed_failure_that_passes_now_is_fixed_and_fails_the_run(folder: Path) -> None:
    path = _file(folder, _entry("numpy"))
    passed = dict(_failed("numpy"), status="pass", failure_kind=None, failures=[])
    doc = _report(path, [NumpyBackend()], [passed])
    (entry,) = doc["known_failures"]["entries"]
    assert entry["status"] == "fixed", entry
    assert doc["status"] == "fail" and doc["summary"]["known_failures"]["fixed"] == 1
    assert doc["backends"][0]["status"] == "fail", doc["backends"][0]


def test_unlisted_failure_and_a_failure_of_another_kind_still_fail(folder: Path) -> None:
    path = _file(folder, _entry(BROKEN))
    other = _failed(BROKEN, prop="zero_branch_is_identity_and_still_learns")
    crashed = _failed(BROKEN, kind="crash", dtype="float64")
    for failed in (other, crashed, _failed(BROKEN, dtype="float32")):
        doc = _report(path, [DroppedIdentityGrad()], [failed])
        assert doc["known_failures"]["entries"][0]["status"] == "expected"
        assert doc["properties"][0]["status"] == "fail", (failed["property"], failed["dtype"])
        assert doc["status"] == "fail"


def test_entry_for_a_backend_not_in_the_run_is_not_checked(folder: Path) -> None:
    path = _file(folder, _entry("jax"))
    doc = _report(path, [NumpyBackend()], [])
    entry = doc["known_failures"]["entries"][0]
    assert (entry["status"], doc["status"]) == ("unjudged", "unjudged"), entry


def _claim(backend: str, status: str) -> dict[str, Any]:
    side = {"backend": backend, "expected": "1", "observed": "2", "status": status,
            "reason": None, "failure_kind": "law" if status == "fail" else None}
    return {"id": "S06", "source": "s.txt", "section": None, "section_en": None,
            "statement": "x", "expected": "1", "observed": "1", "exact_status": "pass",
            "backends": [side], "status": status, "note": None}


def test_claim_entry_is_expected_while_the_claim_fails_and_fixed_once_it_passes(
        folder: Path) -> None:
    path = _file(folder, '[[failure]]\nbackend = "numpy"\nclaim = "S06"\nreason = "r"\n')
    doc = _report(path, [NumpyBackend()], [], [_claim("numpy", "fail")])
    assert doc["known_failures"]["entries"][0]["status"] == "expected"
    assert doc["claims"][0]["status"] == "expected" and doc["summary"]["claims"]["fail"] == 0
    doc = _report(path, [NumpyBackend()], [], [_claim("numpy", "pass")])
    assert doc["known_failures"]["entries"][0]["status"] == "fixed"
    assert doc["status"] == "fail"


@pytest.mark.parametrize(("body", "said"), [
    ("[[failure]\n", "not valid TOML"),
    (_entry("numpy").replace('reason = "the merge forgets its identity edge"\n', ""),
     "entry 1: 'reason' is a required property"),
    (_entry("numpy") + 'claim = "S06"\n', "entry 1: a claim entry takes no property"),
    ('[[failure]]\nbackend = "jax"\nproperty = "p"\nreason = "r"\n',
     "entry 1: a property entry needs the vector"),
    ('[[failure]]\nbackend = "jax"\nreason = "r"\n', "entry 1: give a property and its vector"),
    (_entry("numpy", extra='kind = "oops"\n'), "entry 1 field 'kind'"),
    (_entry("numpy") + _entry("numpy", vector="missing.json"),
     "entry 2: cannot read vector"),
    (_entry("numpy", vector="bad.json"), "entry 1: vector"),
])
def test_mistakes_in_the_file_are_one_line_usage_errors_naming_file_and_entry(
        folder: Path, body: str, said: str) -> None:
    (folder / "bad.json").write_text('{"resverify": 1, "kind": "request"}')
    path = _file(folder, body)
    with pytest.raises(UsageError) as caught:
        known_failures.load(path)
    message = str(caught.value)
    assert said in message and str(path) in message and "\n" not in message, message


def test_json_form_is_read_like_the_toml_form(folder: Path) -> None:
    doc = {"failure": [{"backend": BROKEN, "property": PROPERTY, "vector": "s06.json",
                        "reason": "r", "dtype": "float64"}]}
    path = _file(folder, json.dumps(doc), "known.json")
    (entry,) = known_failures.load(path)
    assert (entry.backend, entry.prop, entry.dtype, entry.kind) == (
        BROKEN, PROPERTY, "float64", "law")


def test_default_file_is_found_in_the_working_folder(tmp_path: Path) -> None:
    assert known_failures.find_file(None, tmp_path) is None
    (tmp_path / known_failures.DEFAULT_FILE).write_text("failure = []\n")
    assert known_failures.find_file(None, tmp_path) == tmp_path / known_failures.DEFAULT_FILE
    assert known_failures.find_file(Path("x.toml"), tmp_path) == Path("x.toml")


@pytest.mark.slow  # 21 vectors through jax.jit: about 15 s
def test_shipped_example_entries_reproduce_on_jax() -> None:
    """The example file's entries are real: JAX on the CPU flushes subnormals to zero."""
    pytest.importorskip("jax")
    from resverify.impl.registry import resolve_backend

    path = ROOT / "examples" / "known-failures.toml"
    entries = known_failures.load(path)
    assert entries and {e.backend for e in entries} == {"jax"}
    checked = known_entries(known_failures.judge_entries(entries, {"jax": resolve_backend("jax")}),
                            ROOT)
    statuses = {(e["property"], e["dtype"]): e["status"] for e in checked}
    assert set(statuses.values()) == {"expected"}, statuses


def test_check_with_a_known_failure_file_turns_a_red_run_green(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end: the fake suite's failing test on the broken backend is expected."""
    save_vector(linear_block_request(), tmp_path, "x", BROKEN).rename(tmp_path / "s06.json")
    _file(tmp_path, _entry(BROKEN, prop="zero_branch_is_identity"),
          str(known_failures.DEFAULT_FILE))
    code, out = run_check(monkeypatch, tmp_path, "--profile", "dev", "--no-plots", "--backend",
                          "tests.mutants:DroppedIdentityGrad")
    said = capsys.readouterr().out
    doc = json.loads((out / "report.json").read_text())
    assert code == 0, (code, said)
    assert doc["summary"]["properties"]["expected"] == 1, doc["summary"]
    assert "1 expected" in said and "known failures (resverify-known-failures.toml)" in said, said
    assert "Known failures" in (out / "report.md").read_text()
