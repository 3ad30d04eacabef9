"""Run the property suite through pytest in a child process and follow it as it goes.

A child process keeps a crash, an ``os._exit`` or a hung extension in the suite from
taking the report down with it, and it lets pytest's own options (``-n`` from
pytest-xdist, ``-k``, ``--junitxml``) work unchanged. The child loads
:mod:`reports.collector`, which appends one JSON line per finished test to an events
file; this module tails that file, shows progress on a terminal and returns what
finished, whether or not pytest reached the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["EventTail", "Progress", "SuiteRun", "child_environment", "pytest_command",
           "run_suite"]

DEFAULT_TARGET = ("--pyargs", "properties")
SUITE_PLUGIN = "properties.plugin"  # loaded explicitly: a root conftest.py is not seen from
# another working directory
Event = dict[str, Any]


@dataclass
class SuiteRun:
    """What the child pytest reported: results of finished tests, and how it ended."""

    collected: int | None = None
    results: list[Event] = field(default_factory=list)
    exitstatus: int | None = None
    returncode: int | None = None
    interrupted: bool = False

    @property
    def finished(self) -> bool:
        """pytest reached the end of its session and every collected test has a result."""
        return (self.exitstatus in (0, 1) and self.collected is not None
                and len(self.results) >= self.collected)

    def add(self, event: Event) -> None:
        kind = event.get("event")
        if kind == "collected":
            self.collected = int(event["count"])
        elif kind == "result":
            self.results.append(event)
        elif kind == "finish":
            self.exitstatus = int(event["exitstatus"])


def pytest_command(*, events: Path, backends: Sequence[str], profile: str, seed: int,
                   target: Sequence[str] = DEFAULT_TARGET, numprocesses: str | None = None,
                   junitxml: Path | None = None, extra: Sequence[str] = ()) -> list[str]:
    """The command line of the child pytest run."""
    own_suite = tuple(target) == DEFAULT_TARGET
    plugin = ["-p", SUITE_PLUGIN] if own_suite else []
    cmd = [sys.executable, "-m", "pytest", *target, *plugin, "-p", "reports.collector",
           f"--resverify-events={events}", "-q", "-p", "no:cacheprovider",
           f"--hypothesis-profile={profile}", f"--hypothesis-seed={seed}"]
    cmd += [f"--backend={name}" for name in backends]
    if numprocesses is not None:
        cmd += ["-n", numprocesses]
    if junitxml is not None:
        cmd.append(f"--junitxml={junitxml}")
    return cmd + list(extra)


class EventTail:
    """Reads the complete lines appended to the events file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[Event]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events


class Progress:
    """One rewritten status line on a terminal; silent otherwise."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = sys.stdout if stream is None else stream
        self.enabled = self.stream.isatty()
        self.total: int | None = None
        self.done = 0
        self.failed = 0

    def show(self, text: str) -> None:
        if self.enabled:
            width = shutil.get_terminal_size((100, 24)).columns - 1
            self.stream.write("\r\033[K" + text[:width])
            self.stream.flush()

    def event(self, event: Event) -> None:
        kind = event.get("event")
        if kind == "collected":
            self.total = int(event["count"])
        elif kind == "begin":
            self.show(f"{self._count()} running {event['nodeid'].split('::')[-1]}")
        elif kind == "result":
            self.done += 1
            self.failed += event.get("outcome") == "failed"
            examples = event.get("properties", {}).get("examples")
            shown = "" if examples is None else f", {examples} examples"
            name = event["nodeid"].split("::")[-1]
            self.show(f"{self._count()} {name}: {event.get('outcome')}{shown}")

    def _count(self) -> str:
        total = "?" if self.total is None else str(self.total)
        failed = f" {self.failed} failed" if self.failed else ""
        return f"[{self.done}/{total}{failed}]"

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


def run_suite(cmd: Sequence[str], *, events: Path, log: Path, env: dict[str, str],
              progress: Progress, on_event: Callable[[SuiteRun], None] | None = None,
              poll_seconds: float = 0.1) -> SuiteRun:
    """Run ``cmd`` (see :func:`pytest_command`), following its events until it exits.

    On KeyboardInterrupt the child is asked to stop (SIGINT, as a terminal would), given a
    few seconds to write its last events, then killed; the run is marked interrupted.
    """
    suite = SuiteRun()
    tail = EventTail(events)

    def drain() -> None:
        fresh = tail.read()
        for event in fresh:
            suite.add(event)
            progress.event(event)
        if fresh and on_event is not None:
            on_event(suite)

    with open(log, "wb") as log_handle:
        child = subprocess.Popen(list(cmd), stdout=log_handle, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env)
        try:
            while child.poll() is None:
                drain()
                time.sleep(poll_seconds)
        except KeyboardInterrupt:
            suite.interrupted = True
            _stop(child)
        finally:
            if child.poll() is None:
                _stop(child)
    suite.returncode = child.returncode
    drain()
    progress.close()
    return suite


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def child_environment(vector_dir: Path, profile: str) -> dict[str, str]:
    """The environment of the child: where to save counterexamples, which profile."""
    env = dict(os.environ)
    env["RESVERIFY_VECTOR_DIR"] = str(vector_dir)
    env["RESVERIFY_PROFILE"] = profile
    env.setdefault("PYTHONHASHSEED", "0")
    return env
