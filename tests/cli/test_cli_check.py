"""``resverify check`` on the command line: usage errors are one line and exit 2; pytest's
own options (-n, --junitxml, -- -k) pass through; ``resverify`` alone means check. The
report is a pure function of the run's records, the plots' process leaves nothing behind
when it is stopped, and the command's modules import one way."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Set
from pathlib import Path
from typing import NoReturn

import pytest

from resverify.cli.evidence import Evidence, document
from resverify.cli.main import main
from resverify.cli.plots_run import PlotProcess
from resverify.cli.request import Request
from resverify.cli.runner import Progress, SuiteRun, keep_shrinking, read_states
from resverify.impl import resolve_backend
from tests.reports.fakes import alive, descendants, write_fake_suite

ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.startswith("resverify: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("argv", "said"), [
    (["check", "--backend", "no-such-backend"], "unknown backend"),
    (["check", "--profile", "nightly"], "unknown profile"),
    (["check", "--report-dir", "taken"], "cannot write to report folder"),
    (["check", "--no-such-option"], "unrecognized arguments"),
])
def test_usage_errors_exit_2_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str], said: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").write_text("a file where the report folder should go")
    assert main(argv) == 2, argv
    assert said in _one_line_error(capsys)
    assert not (tmp_path / "resverify-report").exists(), "a refused run wrote a report"


def test_pytest_refusing_its_arguments_is_a_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    write_fake_suite(tmp_path / "suite")
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--suite", "suite", "--no-claims", "--", "--no-such-pytest-flag"])
    assert code == 2
    assert "pytest refused the arguments" in _one_line_error(capsys)
    assert not (tmp_path / "resverify-report" / "report.json").exists()


def test_bare_command_checks_with_xdist_junit_and_selection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    write_fake_suite(tmp_path / "suite", "fail")
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    code = main(["--suite", "suite", "--no-claims", "--no-plots", "-n", "2", "--junitxml",
                 "junit.xml", "--", "-k", "commutes or skipped"])
    assert code == 0, capsys.readouterr()
    doc = json.loads((tmp_path / "resverify-report" / "report.json").read_text())
    assert doc["complete"] is True and doc["status"] == "pass", doc["warnings"]
    assert doc["run"]["pytest_args"] == ["-k", "commutes or skipped"]
    assert sorted(p["id"].split("::")[-1] for p in doc["properties"]) == [
        "test_addition_commutes[numpy-float32]", "test_addition_commutes[numpy-float64]",
        "test_unclaimed_dtype_is_skipped[numpy]"]
    examples = [p["examples"] for p in doc["properties"] if p["status"] == "pass"]
    assert examples == [4, 4], f"examples {examples}; the fake ci profile runs 4"
    cases = ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")
    assert len(list(cases)) == 3
    text = summary.read_text()
    assert text.startswith("earlier step\n# resverify: PASS"), text[:80]
    out = capsys.readouterr().out
    assert "\r" not in out, "progress was drawn although stdout is not a terminal"
    assert "pass (report in resverify-report/report.html)" in out, out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_shown_on_a_terminal_and_silent_otherwise() -> None:
    nodeid = "suite/t.py::test_a[numpy]"
    records: list[dict[str, object]] = [{"$report_type": "SessionStart"}]
    for when, outcome in (("setup", "passed"), ("call", "failed"), ("teardown", "passed")):
        records.append({"$report_type": "TestReport", "nodeid": nodeid, "when": when,
                        "outcome": outcome, "duration": 0.0, "longrepr": None,
                        "resverify_collected": 2, "user_properties": [["examples", 12]]})
    for stream, shown in ((_Terminal(), True), (io.StringIO(), False)):
        progress, suite = Progress(stream), SuiteRun()
        for record in records:
            progress.update(suite, record, suite.add(record))
        text = stream.getvalue()
        assert ("[0/2] running test_a[numpy]" in text) is shown, text
        assert ("[1/2 1 failed] test_a[numpy]: failed, 12 examples" in text) is shown, text
        assert (text == "") is not shown


def test_check_runs_the_real_property_suite_and_reads_its_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("resverify.properties.plugin", reason="the property suite is not installed")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code = main(["check", "--no-claims", "--no-plots", "--", "-k", "residual_stack and float64"])
    doc = json.loads((tmp_path / "resverify-report" / "report.json").read_text())
    assert code == 0 and doc["complete"] is True, (code, doc["warnings"])
    assert doc["properties"], "no property of the real suite was selected"
    for prop in doc["properties"]:
        assert prop["id"].split("::")[0].endswith("test_depth.py"), prop["id"]
        assert (prop["backend"], prop["dtype"], prop["status"]) == ("numpy", "float64",
                                                                   "pass"), prop
        assert isinstance(prop["examples"], int) and prop["examples"] > 0, prop


def test_no_plots_asks_no_backend_for_plot_data_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--no-plots``: no plot process runs (a backend that hangs in a plot costs nothing),
    and the report says the plots were not drawn."""
    write_fake_suite(tmp_path / "suite")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    code = main(["check", "--suite", "suite", "--no-claims", "--no-plots"])
    out = tmp_path / "resverify-report"
    doc = json.loads((out / "report.json").read_text())
    assert code == 0 and "plots were not drawn (--no-plots)" in doc["warnings"], (
        code, doc["warnings"])
    assert "plots" not in doc and not (out / "plots.log").exists(), sorted(doc)
    assert not list(out.glob("plots/*.png")), sorted(out.glob("plots/*"))


def test_help_lists_every_kind_of_backend_name_and_the_new_options(
        capsys: pytest.CaptureFixture[str]) -> None:
    from resverify.impl.registry import BUILTIN

    assert main(["check", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in [*BUILTIN, "module:attr", "cmd:COMMAND", "--allow-nothing-checked",
                 "--timeout SECONDS"]:
        assert name in text, f"{name!r} missing from check --help: {text}"


@pytest.mark.parametrize("argv", [["blocks", "list"], ["blocks", "check", "hf.BertLayer"]])
def test_blocks_without_torch_is_a_one_line_error_that_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        argv: list[str]) -> None:
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else found(name, *a))
    assert main(argv) == 2, f"resverify {' '.join(argv)} without torch did not exit 2"
    err = _one_line_error(capsys)
    assert "needs torch" in err and "make blocks" in err, err
    assert "pip install -c constraints.txt" in err, \
        f"{err!r}: the pip hint must carry the constraints (else a 5.8 GB CUDA torch)"


def test_adapter_module_failing_on_import_is_a_one_line_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exploding_adapter.py").write_text(
        "raise RuntimeError('this adapter cannot load')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--no-claims", "--backend", "exploding_adapter:Backend"])
    assert code == 2
    err = _one_line_error(capsys)
    assert "exploding_adapter" in err and "this adapter cannot load" in err, err
    assert not (tmp_path / "resverify-report" / "report.json").exists()


def test_status_line_is_cleared_when_ctrl_c_stops_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def interrupted_claims(backends: object, **kwargs: object) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr("resverify.cli.check.run_claims", interrupted_claims)
    assert main(["check", "--report-dir", "out"]) == 1
    text = terminal.getvalue()
    shown = text.index("checking claims on numpy")
    assert "\r\033[K" in text[shown:].split("\n")[0], f"status line left on screen: {text!r}"
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (doc["complete"], doc["status"]) == (False, "incomplete"), doc["warnings"]


ELEMENT = {"element": "grads['x'][0]", "backend": "1.5", "expected": "3", "diff": "3/2",
           "budget": "0.0"}


def _shrinking_suite(status: Path, request: dict[str, object] | None) -> tuple[SuiteRun, str]:
    """A suite whose one running test left a counterexample in the status folder."""
    nodeid = "suite/t.py::test_a[numpy]"
    suite = SuiteRun()
    suite.add({"$report_type": "TestReport", "nodeid": nodeid, "when": "setup",
               "outcome": "passed", "duration": 0.0, "longrepr": None,
               "resverify_collected": 2,
               "user_properties": [["property", "a"], ["backend", "numpy"],
                                   ["dtype", "float64"]]})
    status.mkdir()
    (status / "123.json").write_text(json.dumps({
        "nodeid": nodeid, "property": "a", "backend": "numpy", "failed_after": 3,
        "examples": 9, "max_examples": 25, "shrink_limit": 50, "since": 0.0,
        "message": "grads['x'][0]: backend = 1.5, spec = 3", "kind": "law",
        "request": request, "element": ELEMENT}))
    return suite, nodeid


def test_status_line_says_a_counterexample_is_being_shrunk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the whole line: a narrow terminal cuts its end
    suite, _ = _shrinking_suite(tmp_path / "status", None)
    terminal = _Terminal()
    progress = Progress(terminal)
    suite.shrinking = read_states(tmp_path / "status")
    progress.tick(suite)
    text = terminal.getvalue()
    want = "[0/2] counterexample found after 3 examples, shrinking (Ctrl-C keeps it): test_a[numpy]"
    assert want in text, f"status line {text!r}, expected {want!r}"


def test_ctrl_c_while_shrinking_keeps_the_counterexample_as_a_failure(tmp_path: Path) -> None:
    from resverify.properties import pinned
    from resverify.spec.codec import loads_request, request_to_dict

    request = pinned.S06.request("float64")
    suite, nodeid = _shrinking_suite(tmp_path / "status", request_to_dict(request))
    suite.shrinking = read_states(tmp_path / "status")
    suite.interrupted = "SIGINT"
    keep_shrinking(suite, tmp_path / "vectors")
    assert nodeid not in suite.running, "the kept test is still listed as running"
    [result] = suite.results
    props = result["properties"]
    assert result["outcome"] == "failed", result
    assert (props["failed_after"], props["max_examples"], props["failure_kind"]) == (
        3, 25, "law"), props
    assert "interrupted while shrinking" in result["message"], result["message"]
    vector = Path(props["vector"])
    assert vector.parent == tmp_path / "vectors", vector
    assert loads_request(vector.read_text()).program == request.program, vector
    assert props["replay"] == f"resverify replay {vector} --backend numpy", props["replay"]
    assert [f["element"] for f in props["failures"]] == [ELEMENT], props["failures"]


def test_claims_phase_counts_each_claim_on_the_status_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from resverify.cli import claims as cmd_claims
    from resverify.spec.claims import CLAIMS

    subset = tuple(c for c in CLAIMS if c.id in ("S10", "S24", "S30"))
    monkeypatch.setattr(cmd_claims, "CLAIMS", subset)
    terminal = _Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    write_fake_suite(tmp_path / "suite")
    main(["check", "--suite", "suite", "--report-dir", "out", "--no-plots", "--", "-k", "commutes"])
    text = terminal.getvalue()
    for k in (1, 2, 3):
        want = f"checking claims on numpy [{k}/3]"
        assert want in text, f"{want!r} not on the status line: {text!r}"


def test_interrupt_during_the_claims_says_no_property_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def interrupted_claims(backends: object, **kwargs: object) -> NoReturn:
        raise KeyboardInterrupt

    monkeypatch.setattr("resverify.cli.check.run_claims", interrupted_claims)
    assert main(["check", "--report-dir", "out"]) == 1
    out = capsys.readouterr().out
    want = "numpy: nothing checked: interrupted before any property ran"
    assert want in out, f"summary {out!r}, expected {want!r}"
    assert "could not run on it" not in out, out


def test_summary_says_how_long_the_failures_shrank() -> None:
    from resverify.cli.summary import shrink_summary

    props = [{"status": "fail", "examples": 37, "failed_after": 2, "shrink_seconds": 2.2},
             {"status": "fail", "examples": 60, "failed_after": 9, "shrink_seconds": 30.1},
             {"status": "pass", "examples": 25, "failed_after": None, "shrink_seconds": None}]
    said = shrink_summary(props, "ci")
    want = ("shrinking: 2 failed tests shrank for 32.3 s (86 examples after their first "
            "counterexamples; at most 50 each under profile ci)")
    assert said == want, f"{said!r}, expected {want!r}"
    assert shrink_summary(props[2:], "ci") is None


def test_stop_message_counts_the_test_kept_while_it_shrank(tmp_path: Path) -> None:
    from resverify.cli.evidence import stop_message

    suite, _ = _shrinking_suite(tmp_path / "status", None)
    suite.shrinking = read_states(tmp_path / "status")
    suite.interrupted = "SIGINT"
    keep_shrinking(suite, tmp_path / "vectors")
    said = stop_message(suite)
    want = ("interrupted by SIGINT: the report holds the 0 tests that finished and 1 stopped "
            "while shrinking, kept as failed with the counterexample found so far")
    assert said == want, f"{said!r}, expected {want!r}"


NODE = "suite/t.py::test_a[numpy]"


def _finished_suite(outcome: str = "passed", backend: str = "numpy") -> SuiteRun:
    """A suite of one test on ``backend`` whose pytest session ran to its end."""
    suite = SuiteRun()
    suite.add({"$report_type": "SessionStart"})
    for when in ("setup", "call", "teardown"):
        suite.add({"$report_type": "TestReport", "nodeid": NODE, "when": when,
                   "outcome": outcome if when == "call" else "passed", "duration": 0.5,
                   "longrepr": None if outcome == "passed" else "output[0]=1.0, but should be 2",
                   "resverify_collected": 1,
                   "user_properties": [["property", "a"], ["backend", backend],
                                       ["dtype", "float64"], ["examples", 7]]})
    suite.add({"$report_type": "SessionFinish", "exitstatus": 0 if outcome == "passed" else 1})
    suite.returncode = suite.exitstatus
    return suite


def _request(folder: Path, backend: str = "numpy") -> Request:
    return Request(named={backend: resolve_backend(backend)}, report_dir=folder, seed=3,
                   profile="ci", pytest_args=("-k", "a"))


def _shown(doc: Mapping[str, object]) -> tuple[object, ...]:
    """What a report says about a run: complete, status, warnings, and each property's
    id, backend and status."""
    props = doc["properties"]
    assert isinstance(props, list)
    return (doc["complete"], doc["status"], doc["warnings"],
            [(p["id"], p["backend"], p["status"]) for p in props])


def test_report_is_a_pure_function_of_the_records(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """document() reads no clock and no working directory: the time and the folder are
    arguments, and the same records give the same document."""
    request, found = _request(tmp_path), Evidence(suite=_finished_suite())

    def refused(*args: object) -> NoReturn:
        raise AssertionError("document() read the clock or the working directory")

    with monkeypatch.context() as mp:
        mp.setattr(time, "monotonic", refused)
        mp.setattr(os, "getcwd", refused)
        first = document(request, found, elapsed=1.25, base=tmp_path)
        again = document(request, found, elapsed=1.25, base=tmp_path)
    assert first == again, "the same records made two different reports"
    got = (*_shown(first), first["timings"], first["run"]["seed"], first["run"]["pytest_args"])
    want: tuple[object, ...] = (True, "pass", [], [(NODE, "numpy", "pass")],
                                {"total_seconds": 1.25}, 3, ["-k", "a"])
    assert got == want, f"document(one finished passing test) = {got}, expected {want}"


@pytest.mark.parametrize(("change", "want"), [
    ("none", (True, "pass", [], [(NODE, "numpy", "pass")])),
    ("sigterm", (False, "incomplete",
                 ["interrupted by SIGTERM: the report holds the 1 test that finished"],
                 [(NODE, "numpy", "pass")])),
    ("failed", (True, "fail", [], [(NODE, "numpy", "fail")])),
    ("no end", (False, "incomplete",
                ["pytest stopped before the end of its session (exit code -9); see pytest.log"],
                [(NODE, "numpy", "pass")])),
])
def test_report_says_how_the_records_ended(tmp_path: Path, change: str,
                                           want: tuple[object, ...]) -> None:
    """The verdict follows the records: a signal or a pytest that never reached its end
    makes the run incomplete, a failed test makes it failed, and the finished tests are in
    the report whichever way it ended."""
    suite = _finished_suite("failed" if change == "failed" else "passed")
    if change == "sigterm":
        suite.interrupted = "SIGTERM"
    if change == "no end":
        suite.exitstatus, suite.returncode = None, -9
    doc = document(_request(tmp_path), Evidence(suite=suite), elapsed=0.0, base=tmp_path)
    assert _shown(doc) == want, f"document(records, {change}) = {_shown(doc)}, expected {want}"


def test_report_names_a_backend_typed_on_the_command_line_by_its_own_name(
        tmp_path: Path) -> None:
    typed = "tests.hostile_backends:Raises"
    suite = _finished_suite(backend=typed)
    doc = document(_request(tmp_path, typed), Evidence(suite=suite), elapsed=0.0, base=tmp_path)
    shown = [(p["backend"], p["status"]) for p in doc["properties"]]
    assert shown == [("hostile-raises", "pass")], (
        f"properties of a suite that recorded {typed!r}: {shown}, expected the backend's name")


def test_stopped_plots_leave_no_process_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that hangs in its plot process: when check gives up on the plots (an
    interrupted run waits 0 s for them), the drawing process and the backend's process
    that it watches both end, and the report is told why there are no plots."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)
    typed = "tests.hostile_backends:Sleeps"
    before = descendants(os.getpid())
    plots = PlotProcess(0, {typed: resolve_backend(typed)}, tmp_path)
    plots.start()
    deadline = time.monotonic() + 300  # far above any honest start; the poll ends at once
    started: Set[int] = set()
    while len(started) < 2:  # the drawing process, and the plot process it started
        assert time.monotonic() < deadline, "the drawing process started no plot process"
        time.sleep(0.1)
        started = alive(descendants(os.getpid()) - before)
    try:
        drawn = plots.result(0.0)
        said = "plots were not drawn: the run ended before they were ready"
        assert (drawn.notes, dict(drawn.pngs), drawn.summary) == ((said,), {}, None), drawn
        deadline = time.monotonic() + 60  # the poll ends as soon as they have
        while alive(set(started)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(set(started)), f"left running: {alive(set(started))} of {started}"
    finally:  # a failed check leaves no sleeper behind either
        for pid in alive(set(started)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
