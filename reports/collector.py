"""A pytest plugin that records each finished test as one JSON line, as it happens.

``resverify check`` loads it into the pytest run of the property suite
(``-p resverify.reports.collector --resverify-events FILE``). Every line is written and flushed
the moment a test finishes, so when pytest is interrupted or dies the parent still
knows exactly what finished; the last event, ``finish``, is only there when pytest
reached the end of its session. Under pytest-xdist only the controller writes: the
workers' reports reach it through ``pytest_runtest_logreport``.

Events, one JSON object a line: ``{"event": "collected", "count": N}``,
``{"event": "begin", "nodeid": ...}``, ``{"event": "result", "nodeid", "outcome",
"duration", "properties", "skip_reason", "message"}`` and
``{"event": "finish", "exitstatus": N}``. ``properties`` are the test's
``record_property`` pairs (the property suite records ``property``, ``backend``,
``examples``, ``max_examples``, ``dtype``, and on failure ``failure_kind``, ``failures``,
``vector`` and ``replay``).

A test whose xdist worker died (a segfault, ``os._exit``) gets one report from xdist and
no teardown: it is recorded at once as failed, ``failure_kind`` ``crash``, keeping what
its setup recorded (property, backend, dtype).
"""

from __future__ import annotations

import json
import re
from typing import IO, Any

import pytest

__all__ = ["CRASH_MESSAGE", "MESSAGE_LIMIT", "summarize"]

MESSAGE_LIMIT = 4000
CRASH_MESSAGE = ("the process running this test died (a segfault, os._exit or a kill) "
                 "before the test ended; xdist started a new one and the run went on")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--resverify-events", default=None,
                     help="append one JSON line per finished test to this file (resverify check)")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--resverify-events")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Recorder(path), "resverify-recorder")


class _Recorder:
    """Writes the events; registered only in the process that reports (never an xdist worker)."""

    def __init__(self, path: str) -> None:
        self.handle: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self.phases: dict[str, list[pytest.TestReport]] = {}
        self.counted = False

    def emit(self, **event: Any) -> None:
        self.handle.write(json.dumps(event, sort_keys=True, default=str) + "\n")
        self.handle.flush()

    def _count(self, count: int) -> None:
        if not self.counted:
            self.counted = True
            self.emit(event="collected", count=count)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._count(len(session.items))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._count(len(ids))

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.emit(event="begin", nodeid=nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport,
                               sched: Any) -> None:
        report.user_properties.append(("failure_kind", "crash"))
        report.longrepr = f"{CRASH_MESSAGE} [{report.longrepr}]"

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.phases.setdefault(report.nodeid, []).append(report)
        if report.when not in ("setup", "call"):  # teardown, or xdist's crash report
            self.emit(event="result", **summarize(self.phases.pop(report.nodeid)))

    def pytest_sessionfinish(self, exitstatus: int) -> None:
        self.emit(event="finish", exitstatus=int(exitstatus))

    def pytest_unconfigure(self) -> None:
        self.handle.close()


def summarize(phases: list[pytest.TestReport]) -> dict[str, Any]:
    """One test's setup, call and teardown reports as one record."""
    failed = next((r for r in phases if r.failed), None)
    skipped = next((r for r in phases if r.skipped), None)
    props: dict[str, Any] = {}
    for report in phases:
        props.update({str(k): _plain(v) for k, v in report.user_properties})
    record: dict[str, Any] = {
        "nodeid": phases[0].nodeid,
        "duration": sum(r.duration for r in phases),
        "properties": props,
        "skip_reason": None,
        "message": None,
    }
    if failed is not None:
        record["outcome"] = "failed"
        record["message"] = _message(failed)
        if props.get("failure_kind") is not None and not props.get("failures"):
            props["failures"] = [{"message": record["message"], "kind": props["failure_kind"],
                                  "vector": None, "replay": None}]
    elif skipped is not None and hasattr(skipped, "wasxfail"):
        record["outcome"] = "xfailed"
        record["skip_reason"] = str(skipped.wasxfail) or "expected failure"
    elif skipped is not None:
        record["outcome"] = "skipped"
        record["skip_reason"] = _skip_reason(skipped)
    else:
        record["outcome"] = "passed"
    return record


def _plain(value: object) -> object:
    """A value as JSON can hold it: scalars, lists and objects as they are, else text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _message(report: pytest.TestReport) -> str:
    """The failure's message; object addresses (``<X object at 0x7f..>``) are dropped, so
    the same failure reads the same in every run."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    if report.when in ("setup", "teardown"):
        text = f"error in {report.when}: {text}"
    return _ADDRESS.sub("", text)[:MESSAGE_LIMIT]


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ")[:MESSAGE_LIMIT]
