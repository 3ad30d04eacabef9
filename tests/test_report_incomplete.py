"""A run that is interrupted or dies still leaves a valid report of what finished,
marked incomplete; and report files are replaced atomically, never half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from test_report_fakes import run_check, write_fake_suite

from reports.atomic import write_text
from reports.json_report import validate
from reports.runner import EventTail, SuiteRun


def test_crashed_suite_leaves_a_valid_incomplete_report(tmp_path, monkeypatch):
    code, out = run_check(monkeypatch, tmp_path, mode="crash")
    assert code == 1, f"exit code {code} after pytest died (os._exit), expected 1"
    doc = json.loads((out / "report.json").read_text())
    validate(doc)
    assert (doc["complete"], doc["status"]) == (False, "incomplete"), doc["status"]
    finished = sorted(p["id"].split("::")[-1] for p in doc["properties"])
    assert finished == ["test_addition_commutes[numpy-float32]",
                        "test_addition_commutes[numpy-float64]",
                        "test_unclaimed_dtype_is_skipped[numpy]"], finished
    assert any("stopped before the end" in w for w in doc["warnings"]), doc["warnings"]
    assert "Incomplete run" in (out / "report.md").read_text()
    assert "incomplete" in (out / "report.html").read_text()


def test_ctrl_c_during_the_suite_still_writes_an_incomplete_report(tmp_path):
    write_fake_suite(tmp_path / "suite", "slow")
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    child = subprocess.Popen([sys.executable, "-m", "reports.cli", "check", "--suite", "suite",
                              "--report-dir", "out", "--no-claims"], cwd=tmp_path, env=env,
                             start_new_session=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    events = tmp_path / "out" / "events.jsonl"
    deadline = time.monotonic() + 60
    while "test_zz_slow" not in (events.read_text() if events.exists() else ""):
        assert time.monotonic() < deadline and child.poll() is None, "the slow test never began"
        time.sleep(0.1)
    os.killpg(child.pid, signal.SIGINT)  # what a terminal's Ctrl-C does to the whole group
    out, err = child.communicate(timeout=60)
    assert child.returncode == 1, (child.returncode, out, err)
    assert "Traceback" not in err, err
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    validate(doc)
    assert doc["complete"] is False and len(doc["properties"]) == 3, doc["properties"]
    assert (tmp_path / "out" / "report.html").exists()


def test_partial_event_stream_counts_only_finished_tests(tmp_path):
    events = tmp_path / "events.jsonl"
    lines = [{"event": "collected", "count": 3},
             {"event": "result", "nodeid": "t::a", "outcome": "passed", "duration": 0.1,
              "properties": {}, "skip_reason": None, "message": None}]
    events.write_text("".join(json.dumps(e) + "\n" for e in lines) + '{"event": "res')
    suite = SuiteRun()
    for event in EventTail(events).read():
        suite.add(event)
    assert (suite.collected, len(suite.results), suite.exitstatus) == (3, 1, None)
    assert not suite.finished, "a run without its finish event counted as finished"
    suite.add({"event": "finish", "exitstatus": 1})
    assert not suite.finished, "1 of 3 results counted as finished"


def test_event_tail_keeps_a_half_written_line_for_the_next_read(tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text('{"event": "collected", "count": 1}\n{"event": "fin')
    tail = EventTail(events)
    assert tail.read() == [{"event": "collected", "count": 1}]
    with open(events, "a") as handle:
        handle.write('ish", "exitstatus": 0}\n')
    assert tail.read() == [{"event": "finish", "exitstatus": 0}]


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    write_text(target, "old")

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        write_text(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_atomic_write_keeps_the_permissions_of_the_file_it_replaces(tmp_path):
    target = tmp_path / "report.md"
    write_text(target, "a")
    os.chmod(target, 0o640)
    write_text(target, "b")
    assert (target.read_text(), target.stat().st_mode & 0o777) == ("b", 0o640)
