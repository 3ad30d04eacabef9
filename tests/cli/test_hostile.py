"""Hostile engines are survived: each misbehaviour ends as a classified failure of that test
in a complete report, the run goes on, and ``resverify check`` exits 1.

One ``resverify check`` run per mode checks every hostile backend at once beside the NumPy
reference (which must still pass): in-process adapters, the same adapters served over
``cmd:`` by ``python -m resverify.impl.serve``, and external engines that break the protocol.

No verdict here depends on the machine's speed. The run with the NumPy control has time
limits far above any honest test's time (:data:`HONEST_LIMITS`), so the control passes on
a loaded machine too; the engines that hang never answer at all, and run on their own
with short limits (:data:`HANG_LIMITS`), beside no honest backend, so a timeout there is
the only possible outcome whatever the speed.

The plots (a process per backend asking it for the plotted series) are drawn for the
served adapters and the protocol-breaking engines of the slow tests, where a hostile
backend in a plot must leave the report standing; the in-process run draws none
(tests/reports/test_report_plots.py keeps a backend that exits or raises in a plot in the default
run).
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

ROOT = Path(__file__).resolve().parents[2]
SELECT = ("float64 and ((forward_and_gradients_match_spec_within_budget and linear)"
          " or (never_mutates and MutatesInputs))")
"""One test per backend (two for the mutating one): a crash restarts a worker, which costs
(and xdist replaces a crashed worker four times at most); of the oracle law, split by
branch family, the test of the first family."""
CMD_KINDS = {**IN_PROCESS, "Raises": "refused", "ReturnsNone": "refused"}
del CMD_KINDS["MutatesInputs"]  # over a pipe the engine mutates its own copy: harmless
HANGS = frozenset({"Sleeps", "half_line"})
"""The hostile backends and engine modes that never answer: run apart, see the docstring."""
HONEST_LIMITS = ("600", "120")
"""(a property test's limit, one exchange with a cmd: engine's), in seconds, for the run
with the control: an honest test takes seconds, also at a load of 7 on two cores."""
HANG_LIMITS = ("5", "1")
"""The same limits for the engines that never answer (no honest backend in that run). The
test's limit leaves the test 5 s to reach the backend (about 50 ms on an idle machine):
the limit must strike while the backend runs, for the timeout to keep its request as the
vector."""


def check(folder: Path, backends: list[str], *extra: str, limits: tuple[str, str] = HONEST_LIMITS,
          control: bool = True, plots: bool = False) -> tuple[int, dict[str, Any], str]:
    """``resverify check`` in a child process on ``backends`` (numpy first, as a control,
    unless ``control`` is False), under ``limits``; the plots are drawn only when ``plots``
    (each backend's plot process is seconds: the served and protocol-breaking engines of
    the slow tests are plotted, the in-process adapters are not)."""
    test_limit, exchange_limit = limits
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RESVERIFY_CMD_TIMEOUT": exchange_limit}
    env.pop("GITHUB_STEP_SUMMARY", None)
    argv = [sys.executable, "-m", "resverify.cli.main", "check", "--no-claims", "--timeout",
            test_limit, "--report-dir", "out", *(["--backend", "numpy"] if control else []),
            *([] if plots else ["--no-plots"])]
    folder.mkdir(parents=True, exist_ok=True)
    for name in backends:
        argv += ["--backend", name]
    began = time.monotonic()
    done = subprocess.run([*argv, *extra, "--", "-k", SELECT], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=1800, check=False)
    print(f"check on {len(backends)} hostile backends took {time.monotonic() - began:.1f} s")
    report = folder / "out" / "report.json"
    doc = json.loads(report.read_text()) if report.exists() else {}
    return done.returncode, doc, done.stdout + done.stderr


def _by_backend(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for prop in doc["properties"]:
        grouped.setdefault(prop["backend"], []).append(prop)
    return grouped


def _said(prop: dict[str, Any]) -> str:
    """A property entry as a failing assertion shows it: id, status, kind and message."""
    return (f"{prop['id']}: {prop['status']} ({prop['failure_kind']}) "
            f"{(prop['message'] or '')[:300]}")


def assert_control_passed(props: list[dict[str, Any]]) -> None:
    """Every test of the NumPy control passed; else each other one with kind and message."""
    broken = [_said(p) for p in props if p["status"] != "pass"]
    assert not broken, "the numpy control did not pass:\n" + "\n".join(broken)


def assert_classified(doc: dict[str, Any], expected: dict[str, str], out: str,
                      control: bool = True) -> None:
    """Every backend ran its selected tests; each hostile one failed with its kind, and the
    NumPy control (when there is one) passed every test."""
    validate(doc)
    assert doc["complete"] is True, (doc["warnings"], out)
    grouped = _by_backend(doc)
    if control:
        assert_control_passed(grouped.pop("numpy"))
    assert sorted(grouped) == sorted(expected), (sorted(grouped), sorted(expected))
    for backend, kind in expected.items():
        props = grouped[backend]
        assert "forward_and_gradients_match_spec_within_budget" in {
            p["property"] for p in props}, [p["id"] for p in props]
        failed = [p for p in props if p["status"] == "fail"]
        assert failed, (f"{backend}: no test failed, expected a {kind!r} failure:\n"
                        + "\n".join(_said(p) for p in props))
        assert all(p["failure_kind"] == kind for p in failed), (
            f"{backend}: expected {kind!r} failures, got:\n" + "\n".join(map(_said, failed)))
        for prop in failed:  # the failure found comes first; a later one can only be the
            # time limit that cut Hypothesis' shrinking short (restarting an engine is slow)
            kinds = [f["kind"] for f in prop["failures"]]
            assert kinds[0] == kind and set(kinds[1:]) <= {kind, "timeout"}, prop["failures"]


def _kinds(kinds: dict[str, str], hangs: bool, name: Any = lambda n: getattr(hb, n).name
           ) -> dict[str, str]:
    """The backend names and kinds of ``kinds`` that hang (``hangs``) or answer."""
    return {name(n): k for n, k in kinds.items() if (n in HANGS) == hangs}


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    names = [f"tests.hostile_backends:{name}" for name in IN_PROCESS if name not in HANGS]
    return check(tmp_path_factory.mktemp("hostile"), names)


@pytest.fixture(scope="module")
def in_process_hangs(tmp_path_factory: pytest.TempPathFactory
                     ) -> tuple[int, dict[str, Any], str]:
    names = [f"tests.hostile_backends:{name}" for name in IN_PROCESS if name in HANGS]
    return check(tmp_path_factory.mktemp("hangs"), names, limits=HANG_LIMITS, control=False)


def test_in_process_hostile_adapters_fail_classified_and_the_run_goes_on(
        in_process: tuple[int, dict[str, Any], str]) -> None:
    code, doc, out = in_process
    assert code == 1, out
    assert_classified(doc, _kinds(IN_PROCESS, hangs=False), out)


def test_an_in_process_adapter_that_never_answers_times_out_and_the_run_goes_on(
        in_process_hangs: tuple[int, dict[str, Any], str]) -> None:
    code, doc, out = in_process_hangs
    assert code == 1, out
    assert_classified(doc, _kinds(IN_PROCESS, hangs=True), out, control=False)


def test_a_timeout_keeps_the_request_the_backend_was_running_as_its_vector(
        in_process_hangs: tuple[int, dict[str, Any], str]) -> None:
    _, doc, _ = in_process_hangs
    [prop] = [p for p in doc["properties"] if p["status"] == "fail"]
    assert [(f["kind"], f["vector"] is not None) for f in prop["failures"]] == [
        ("timeout", True)], prop["failures"]
    assert prop["replay"] and prop["replay"].startswith("resverify replay "), prop


def test_a_failing_control_is_shown_with_its_kind_and_message() -> None:
    """A failing control names the test, its kind and its message, not just 'failed'."""
    entry = {"id": "t::test_law[numpy-float64]", "property": "law", "backend": "numpy",
             "status": "fail", "failure_kind": "timeout", "message": "Timeout (>2s)"}
    with pytest.raises(AssertionError) as caught:
        assert_control_passed([entry])
    assert "t::test_law[numpy-float64]: fail (timeout) Timeout (>2s)" in str(caught.value), (
        str(caught.value))


def _check_apart(folder: Path, kinds: dict[str, str], backend: Any, name: Any) -> None:
    """The engines of ``kinds`` that answer beside the control, then those that never
    answer on their own (``backend(n)`` the --backend spec, ``name(n)`` its name)."""
    for hangs in (False, True):
        names = [backend(n) for n in kinds if (n in HANGS) == hangs]
        code, doc, out = check(folder / str(hangs), names, control=not hangs,
                               limits=HANG_LIMITS if hangs else HONEST_LIMITS, plots=not hangs)
        assert code == 1, out
        assert_classified(doc, _kinds(kinds, hangs, name), out, control=not hangs)


@pytest.mark.slow
def test_served_hostile_adapters_fail_classified_over_cmd(tmp_path: Path) -> None:
    serve = f"{sys.executable} -m resverify.impl.serve"
    _check_apart(tmp_path, CMD_KINDS, lambda n: f"cmd:{serve} tests.hostile_backends:{n}",
                 lambda n: getattr(hb, n).name)


@pytest.mark.slow
def test_engines_breaking_the_protocol_fail_classified(tmp_path: Path) -> None:
    script = ROOT / "tests" / "hostile_backends.py"
    _check_apart(tmp_path, PROTOCOL_BREAKERS, lambda m: f"cmd:{sys.executable} {script} {m}",
                 lambda m: f"engine-{m.replace('_', '-')}")
