"""A run that is interrupted or dies still leaves a valid report of what finished,
marked incomplete; and report files are replaced atomically, never half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

from resverify.cli.runner import RecordTail, SuiteRun
from resverify.reports.atomic import write_text
from resverify.reports.json_report import validate
from tests.reports.fakes import alive, descendants, run_check, write_fake_suite

FINISHED = ["test_addition_commutes[numpy-float32]", "test_addition_commutes[numpy-float64]",
            "test_unclaimed_dtype_is_skipped[numpy]"]


def test_test_that_kills_its_process_is_a_crash_failure_and_the_run_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run_check(monkeypatch, tmp_path, "--no-plots", mode="crash")
    assert code == 1, f"exit code {code} after a test died (os._exit), expected 1"
    doc = json.loads((out / "report.json").read_text())
    validate(doc)
    assert (doc["complete"], doc["status"]) == (True, "fail"), doc["warnings"]
    by_name = {p["id"].split("::")[-1]: p for p in doc["properties"]}
    assert sorted(by_name) == [*FINISHED, "test_zz_crash[numpy]", "test_zzz_never_reached[numpy]"]
    crashed = by_name["test_zz_crash[numpy]"]
    assert (crashed["status"], crashed["failure_kind"]) == ("fail", "crash"), crashed
    assert "died" in crashed["message"], crashed["message"]
    assert by_name["test_zzz_never_reached[numpy]"]["status"] == "pass"
    assert "crash" in (out / "report.md").read_text()
    assert "crash" in (out / "report.html").read_text()


def _wait_for(
        condition: Callable[[], object], what: str, child: subprocess.Popen,
        seconds: float = 300) -> None:
    """Poll until ``condition`` holds; ``seconds`` is far above any honest wait (the poll
    ends as soon as it holds), so only a run that never gets there fails."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert child.poll() is None, f"resverify ended before {what}: {child.communicate()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize(("mode", "signals"), [
    ("spin", [signal.SIGINT]),
    ("slow", [signal.SIGINT, signal.SIGINT]),
    ("slow", [signal.SIGTERM]),
], ids=["sigint-once", "sigint-twice", "sigterm"])
def test_signals_end_the_run_with_every_finished_test_in_all_three_reports(
        tmp_path: Path, mode: str, signals: list[signal.Signals]) -> None:
    """Ctrl-C (once or twice, to the whole process group as a terminal sends it) and
    SIGTERM (as ``timeout -s TERM`` and CI runners send it) stop the run: the report
    holds the finished tests, the running one is not counted as a failure, no process of
    the run is left, the message is one line."""
    write_fake_suite(tmp_path / "suite", mode)
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    child = subprocess.Popen([sys.executable, "-m", "resverify.cli.main", "check",
                              "--suite", "suite", "--report-dir", "out", "--no-claims"],
                             cwd=tmp_path, env=env,
                             start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    out_dir = tmp_path / "out"
    records = out_dir / "report-log.jsonl"
    _wait_for(lambda: f"test_zz_{mode}" in (records.read_text() if records.exists() else ""),
              f"test_zz_{mode} to begin", child)

    def progress_shown() -> bool:  # the periodic report.json follows the run
        try:
            doc = json.loads((out_dir / "report.json").read_text())
        except (OSError, ValueError):
            return False
        return len(doc["properties"]) == len(FINISHED)

    _wait_for(progress_shown, "report.json to show the finished tests", child)
    processes = descendants(child.pid)
    assert processes, "the property suite runs in no child process"
    for sig in signals:
        os.killpg(child.pid, sig)
        time.sleep(0.3)
    out, err = child.communicate(timeout=300)  # seconds honestly; a hung stop fails
    assert child.returncode == 1, (child.returncode, out, err)
    assert "Traceback" not in err, err
    said = [line for line in err.splitlines() if "interrupted" in line]
    assert len(said) == 1 and said[0].startswith("resverify: "), err
    deadline = time.monotonic() + 60  # the poll ends as soon as they have
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(processes), f"left running: {alive(processes)} of {processes}"
    doc = json.loads((out_dir / "report.json").read_text())
    validate(doc)
    assert (doc["complete"], doc["status"]) == (False, "incomplete"), doc["status"]
    names = sorted(p["id"].split("::")[-1] for p in doc["properties"])
    assert names == FINISHED, names
    assert doc["summary"]["properties"]["fail"] == 0, doc["properties"]
    markdown = (out_dir / "report.md").read_text()
    page = (out_dir / "report.html").read_text()
    for name in FINISHED:  # report.md counts the passed and skipped tests
        assert name in page, name
    assert "3 property tests: 2 passed, 1 skipped" in markdown, markdown
    assert "| `addition_commutes` | vjp | ✅" in markdown, "no matrix row of a finished test"
    assert "Incomplete run" in markdown and "incomplete" in page


def _phase(nodeid: str, when: str, outcome: str = "passed") -> dict[str, object]:
    """A TestReport record as pytest-reportlog writes it (the fields resverify reads)."""
    return {"$report_type": "TestReport", "nodeid": nodeid, "when": when, "outcome": outcome,
            "duration": 0.1, "user_properties": [], "longrepr": None,
            "resverify_collected": 3}


def test_partial_record_stream_counts_only_finished_tests(tmp_path: Path) -> None:
    log = tmp_path / "report-log.jsonl"
    lines = [{"$report_type": "SessionStart"}, _phase("t::a", "setup"), _phase("t::a", "call"),
             _phase("t::a", "teardown"), _phase("t::b", "setup")]
    log.write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"$report_type": "Tes')
    suite = SuiteRun()
    for record in RecordTail(log).read():
        suite.add(record)
    assert (suite.collected, len(suite.results), suite.exitstatus) == (3, 1, None)
    assert list(suite.running) == ["t::b"], "the test whose setup ended is not running"
    assert not suite.finished, "a run without its SessionFinish record counted as finished"
    suite.add({"$report_type": "SessionFinish", "exitstatus": 1})
    assert not suite.finished, "1 of 3 results counted as finished"


def test_record_tail_keeps_a_half_written_line_for_the_next_read(tmp_path: Path) -> None:
    log = tmp_path / "report-log.jsonl"
    log.write_text('{"$report_type": "SessionStart"}\n{"$report_type": "Session')
    tail = RecordTail(log)
    assert tail.read() == [{"$report_type": "SessionStart"}]
    with open(log, "a") as handle:
        handle.write('Finish", "exitstatus": 0}\n')
    assert tail.read() == [{"$report_type": "SessionFinish", "exitstatus": 0}]


def test_failed_write_leaves_the_old_file_and_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.json"
    write_text(target, "old")

    def refuse(src: object, dst: object) -> NoReturn:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_text(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_atomic_write_keeps_the_permissions_of_the_file_it_replaces(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    write_text(target, "a")
    os.chmod(target, 0o640)
    write_text(target, "b")
    assert (target.read_text(), target.stat().st_mode & 0o777) == ("b", 0o640)


def test_time_limit_times_the_test_function_so_a_slow_reporting_hook_is_no_internal_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--timeout`` limits the test function only: a limit over the whole test protocol
    fired inside a reporting hook of a loaded machine, which pytest takes for an internal
    error that ends the run.

    The suite's reporting hook reads the limit's timer (pytest-timeout's signal method, which
    resverify uses): armed there, the hook waits until it strikes, as a slow hook would; not
    armed, the hook returns at once. So the limit can be far above any honest test's time
    (60 s) and the outcome does not depend on the machine's speed."""
    suite = write_fake_suite(tmp_path / "suite-slowhook", "pass")
    armed = tmp_path / "armed-in-hook"
    with open(suite / "conftest.py", "a") as conftest:
        conftest.write("\n\ndef pytest_runtest_logreport(report):\n"
                       "    import signal, time\n"
                       "    if report.when == 'call':\n"
                       "        left = signal.getitimer(signal.ITIMER_REAL)[0]\n"
                       f"        with open({str(armed)!r}, 'a') as out:\n"
                       "            out.write(f'{report.nodeid} {left}\\n')\n"
                       "        time.sleep(left + 1 if left else 0)\n")
    code, out = run_check(monkeypatch, tmp_path, "--timeout", "60", "--no-claims", "--no-plots",
                          mode="slowhook")
    doc = json.loads((out / "report.json").read_text())
    validate(doc)
    got = (code, doc["complete"], sorted(p["id"].split("::")[-1] for p in doc["properties"]))
    assert got == (0, True, FINISHED), (
        f"check --timeout 60 on a suite whose reporting hook outlasts an armed limit gives "
        f"{got}, expected (0, True, {FINISHED}); warnings {doc['warnings']}")
    seen: dict[str, float] = {}
    for line in armed.read_text().splitlines():
        nodeid, left = line.rsplit(" ", 1)
        name = nodeid.split("::")[-1]
        seen[name] = max(seen.get(name, 0.0), float(left))
    assert sorted(seen) == FINISHED, f"the reporting hook saw the call phases of {sorted(seen)}"
    assert not any(seen.values()), f"the time limit was still armed in the reporting hook: {seen}"
