"""What resverify adds to pytest-reportlog's records, and how one test's records become
one result.

``resverify check`` runs the property suite with pytest-reportlog (``--report-log FILE``)
and loads this module into that run (``-p resverify.cli.collector``). pytest-reportlog
writes and flushes one JSON record a line as each phase of each test ends, so when
pytest is interrupted or dies the parent still knows exactly what finished; the last
record, ``SessionFinish``, is only there when pytest reached the end of its session.
Under pytest-xdist only the controller writes: the workers' reports reach it through
``pytest_runtest_logreport``. This plugin, in the controller only, adds two things to
those records:

* ``resverify_collected``, the number of tests collected, on every ``TestReport``
  record (pytest-reportlog has no record of its own for it under xdist);
* a test whose xdist worker died (a segfault, ``os._exit``) gets one report from xdist
  and no teardown: that report is marked failed with ``failure_kind`` ``crash``,
  keeping what its setup recorded (property, backend, dtype).

:func:`summarize` turns the records of one test (setup, call, teardown: pytest's
serialized ``TestReport``) into one result: ``nodeid``, ``outcome``, ``duration``,
``properties`` (the test's ``record_property`` pairs: the property suite records
``property``, ``backend``, ``examples``, ``max_examples``, ``dtype``, and on failure
``failure_kind``, ``failures``, ``vector`` and ``replay``), ``skip_reason`` and ``message``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Generator, Sequence
from typing import Any

import pytest

__all__ = []

MESSAGE_LIMIT = 4000
COLLECTED = "resverify_collected"
CRASH_MESSAGE = ("the process running this test died (a segfault, os._exit or a kill) "
                 "before the test ended; xdist started a new one and the run went on")
Record = dict[str, Any]


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Annotator(), "resverify-annotator")


class _Annotator:
    """Adds to the controller's records; registered only in the process that reports."""

    def __init__(self) -> None:
        self.collected: int | None = None

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.collected is None:
            self.collected = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected = len(ids)

    @pytest.hookimpl(wrapper=True)
    def pytest_report_to_serializable(self, report: object) -> Generator[None, Any, Any]:
        data = yield
        if isinstance(report, pytest.TestReport) and isinstance(data, dict) and (
                self.collected is not None):
            data[COLLECTED] = self.collected
        return data

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport,
                               sched: Any) -> None:
        report.user_properties.append(("failure_kind", "crash"))
        report.longrepr = f"{CRASH_MESSAGE} [{report.longrepr}]"


def summarize(phases: Sequence[Record]) -> Record:
    """One test's records (setup, call and teardown, as pytest serializes a TestReport)
    as one result."""
    failed = next((r for r in phases if r.get("outcome") == "failed"), None)
    skipped = next((r for r in phases if r.get("outcome") == "skipped"), None)
    props: dict[str, Any] = {}
    for record in phases:
        props.update({str(k): _plain(v) for k, v in record.get("user_properties") or ()})
    result: Record = {
        "nodeid": str(phases[0]["nodeid"]),
        "duration": sum(float(r.get("duration") or 0.0) for r in phases),
        "properties": props,
        "skip_reason": None,
        "message": None,
    }
    if failed is not None:
        result.update(outcome="failed", message=_message(failed))
        if props.get("failure_kind") is not None and not props.get("failures"):
            props["failures"] = [{"message": result["message"], "kind": props["failure_kind"],
                                  "vector": None, "replay": None}]
    else:
        result.update(_not_failed(skipped))
    return result


def _not_failed(skipped: Record | None) -> Record:
    """The outcome and skip reason of a test that did not fail: ``skipped`` is its phase
    that pytest reported as skipped, if any (an expected failure is reported so too)."""
    if skipped is None:
        return {"outcome": "passed"}
    if "wasxfail" in skipped:
        return {"outcome": "xfailed",
                "skip_reason": str(skipped["wasxfail"]) or "expected failure"}
    return {"outcome": "skipped", "skip_reason": _skip_reason(skipped)}


def interrupted_while_shrinking(phases: Sequence[Record], state: Record, vector: str | None,
                                replay: str | None) -> Record:
    """A test stopped while it shrank a counterexample, as a failed result: what its setup
    recorded, the worker's latest ``state`` (see
    :meth:`resverify.properties.plugin.PropertyRun.write_status`) and the ``vector`` saved
    from it with its ``replay`` command."""
    result = summarize(phases) if phases else {
        "nodeid": state["nodeid"], "duration": 0.0, "properties": {}, "skip_reason": None}
    message, kind = str(state.get("message") or "failed"), str(state.get("kind") or "law")
    examples, failed_after = int(state["examples"]), int(state["failed_after"])
    failure = {"message": message, "kind": kind, "vector": vector, "replay": replay,
               "element": state.get("element")}
    result["properties"].update(
        examples=examples, max_examples=state.get("max_examples"), failed_after=failed_after,
        shrink_examples=examples - failed_after, shrink_limit=state.get("shrink_limit"),
        shrink_seconds=round(max(0.0, time.time() - float(state.get("since") or 0.0)), 3),
        failure_kind=kind, failures=[failure], vector=vector, replay=replay,
        shrink_interrupted=True)
    result.update(outcome="failed", message=(
        f"{message} (interrupted while shrinking: the counterexample found after "
        f"{failed_after} examples, shrunk for {examples - failed_after})"[:MESSAGE_LIMIT]))
    return result


def _plain(value: object) -> object:
    """A value as JSON can hold it: scalars, lists and objects as they are, else text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _message(record: Record) -> str:
    """The failure's message; object addresses (``<X object at 0x7f..>``) are dropped, so
    the same failure reads the same in every run."""
    longrepr = record.get("longrepr")
    crash = longrepr.get("reprcrash") if isinstance(longrepr, dict) else None
    if isinstance(crash, dict):
        text = str(crash.get("message", ""))
    elif isinstance(longrepr, dict):
        text = _last_lines(longrepr)
    else:
        text = str(longrepr)
    if record.get("when") in ("setup", "teardown"):
        text = f"error in {record['when']}: {text}"
    return _ADDRESS.sub("", text)[:MESSAGE_LIMIT]


def _last_lines(longrepr: Record) -> str:
    """The lines of the last traceback entry of a failure that names no crash."""
    entries = (longrepr.get("reprtraceback") or {}).get("reprentries") or [{}]
    lines = (entries[-1].get("data") or {}).get("lines") or []
    return "\n".join(str(line) for line in lines) or "failed"


def _skip_reason(record: Record) -> str:
    longrepr = record.get("longrepr")
    text = longrepr[2] if isinstance(longrepr, list) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ")[:MESSAGE_LIMIT]
