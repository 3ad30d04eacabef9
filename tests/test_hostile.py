"""Hostile engines are survived: each misbehaviour ends as a classified failure of that test
in a complete report, the run goes on, and ``resverify check`` exits 1.

One ``resverify check`` run per mode checks every hostile backend at once beside the NumPy
reference (which must still pass): in-process adapters, the same adapters served over
``cmd:`` by ``python -m resverify.impl.serve``, and external engines that break the protocol.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from resverify.reports.json_report import validate
from tests import hostile_backends as hb
from tests.hostile_backends import IN_PROCESS, PROTOCOL_BREAKERS

ROOT = Path(__file__).resolve().parents[1]
SELECT = ("float64 and (forward_and_gradients_match_spec_within_budget"
          " or (never_mutates and MutatesInputs))")
"""One test per backend (two for the mutating one): a crash restarts a worker, which costs."""
CMD_KINDS = {**IN_PROCESS, "Raises": "refused", "ReturnsNone": "refused"}
del CMD_KINDS["MutatesInputs"]  # over a pipe the engine mutates its own copy: harmless


def check(folder: Path, backends: list[str], *extra: str) -> tuple[int, dict[str, Any], str]:
    """``resverify check`` in a child process on ``backends`` (numpy first, as a control)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RESVERIFY_CMD_TIMEOUT": "1"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    argv = [sys.executable, "-m", "resverify.reports.cli", "check", "--no-claims", "--timeout", "2",
            "--report-dir", "out", "--backend", "numpy"]
    for name in backends:
        argv += ["--backend", name]
    began = time.monotonic()
    done = subprocess.run([*argv, *extra, "--", "-k", SELECT], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    print(f"check on {len(backends)} hostile backends took {time.monotonic() - began:.1f} s")
    report = folder / "out" / "report.json"
    doc = json.loads(report.read_text()) if report.exists() else {}
    return done.returncode, doc, done.stdout + done.stderr


def _by_backend(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for prop in doc["properties"]:
        grouped.setdefault(prop["backend"], []).append(prop)
    return grouped


def assert_classified(doc: dict[str, Any], expected: dict[str, str], out: str) -> None:
    """Every backend ran its selected tests; each hostile one failed with its kind."""
    validate(doc)
    assert doc["complete"] is True, (doc["warnings"], out)
    grouped = _by_backend(doc)
    control = [(p["id"], p["status"]) for p in grouped.pop("numpy")]
    assert all(status == "passed" for _, status in control), control
    assert sorted(grouped) == sorted(expected), (sorted(grouped), sorted(expected))
    for backend, kind in expected.items():
        props = grouped[backend]
        assert "forward_and_gradients_match_spec_within_budget" in {
            p["property"] for p in props}, [p["id"] for p in props]
        failed = [p for p in props if p["status"] == "failed"]
        kinds = [(p["property"], p["failure_kind"], (p["message"] or "")[:200]) for p in failed]
        assert failed, f"{backend}: no test failed, expected a {kind!r} failure"
        assert all(p["failure_kind"] == kind for p in failed), (
            f"{backend}: failure kinds {kinds}, expected {kind!r}")
        for prop in failed:  # the failure found comes first; a later one can only be the
            # time limit that cut Hypothesis' shrinking short (restarting an engine is slow)
            kinds = [f["kind"] for f in prop["failures"]]
            assert kinds[0] == kind and set(kinds[1:]) <= {kind, "timeout"}, prop["failures"]


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    names = [f"tests.hostile_backends:{name}" for name in IN_PROCESS]
    return check(tmp_path_factory.mktemp("hostile"), names)


def test_in_process_hostile_adapters_fail_classified_and_the_run_goes_on(
        in_process: tuple[int, dict[str, Any], str]) -> None:
    code, doc, out = in_process
    assert code == 1, out
    assert_classified(doc, {getattr(hb, n).name: k for n, k in IN_PROCESS.items()}, out)


def test_crashed_or_timed_out_tests_keep_property_and_backend(
        in_process: tuple[int, dict[str, Any], str]) -> None:
    _, doc, _ = in_process
    for prop in doc["properties"]:
        if prop["failure_kind"] in ("crash", "timeout"):
            assert prop["property"] in ("forward_and_gradients_match_spec_within_budget",
                                        "backend_never_mutates_inputs"), prop
            assert prop["dtype"] == "float64", prop


@pytest.mark.slow
def test_served_hostile_adapters_fail_classified_over_cmd(tmp_path: Path) -> None:
    serve = f"{sys.executable} -m resverify.impl.serve"
    names = [f"cmd:{serve} tests.hostile_backends:{n}" for n in CMD_KINDS]
    code, doc, out = check(tmp_path, names)
    assert code == 1, out
    assert_classified(doc, {getattr(hb, n).name: k for n, k in CMD_KINDS.items()}, out)


@pytest.mark.slow
def test_engines_breaking_the_protocol_fail_classified(tmp_path: Path) -> None:
    script = ROOT / "tests" / "hostile_backends.py"
    names = [f"cmd:{sys.executable} {script} {mode}" for mode in PROTOCOL_BREAKERS]
    code, doc, out = check(tmp_path, names)
    assert code == 1, out
    assert_classified(doc, {f"engine-{m.replace('_', '-')}": k
                            for m, k in PROTOCOL_BREAKERS.items()}, out)
