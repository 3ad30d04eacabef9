"""Run the property suite through pytest in a child process and follow it as it goes.

A child process keeps a crash, an ``os._exit`` or a hung extension in the suite from
taking the report down with it, and it lets pytest's own options (``-n`` from
pytest-xdist, ``-k``, ``--junitxml``) work unchanged. The suite always runs under
pytest-xdist (one worker unless ``-n`` says otherwise), so a test that kills its
process (a segfault, ``os._exit``) kills a worker that xdist replaces, and the run goes
on. The child loads :mod:`resverify.reports.collector`, which appends one JSON line per finished
test to an events file; this module tails that file into a :class:`SuiteRun` that the
caller can read at any moment, shows progress on a terminal and returns what finished,
whether or not pytest reached the end.

The child runs in its own process group: a terminal's Ctrl-C reaches only resverify,
which then stops the whole group (pytest and its xdist workers) with SIGTERM, and
SIGKILL if it lingers. The child never sees a KeyboardInterrupt, so the test that was
running is simply not finished, never turned into a failure.
"""

from __future__ import annotations

import contextlib
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

__all__ = ["EventTail", "Interrupted", "Progress", "SuiteRun", "child_environment",
           "pytest_command", "run_suite", "stop_group"]

DEFAULT_TARGET = ("--pyargs", "resverify.properties")
# loaded explicitly: a root conftest.py is not seen from another working directory
SUITE_PLUGIN = "resverify.properties.plugin"
Event = dict[str, Any]


class Interrupted(KeyboardInterrupt):
    """A stop signal other than Ctrl-C (SIGTERM), raised like the KeyboardInterrupt of
    Ctrl-C so that both end a run the same way; ``signal_name`` says which it was."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@dataclass
class SuiteRun:
    """What the child pytest reported: results of finished tests, and how it ended."""

    collected: int | None = None
    results: list[Event] = field(default_factory=list)
    exitstatus: int | None = None
    returncode: int | None = None
    interrupted: str = ""  # the signal that stopped the run ("SIGINT", "SIGTERM"), if one did
    running: dict[str, None] = field(default_factory=dict)  # begun, not finished

    @property
    def finished(self) -> bool:
        """pytest reached the end of its session and every collected test has a result."""
        return (self.exitstatus in (0, 1) and self.collected is not None
                and len(self.results) >= self.collected)

    def add(self, event: Event) -> None:
        kind = event.get("event")
        if kind == "collected":
            self.collected = int(event["count"])
        elif kind == "begin":
            self.running[str(event["nodeid"])] = None
        elif kind == "result":
            self.results.append(event)
            self.running.pop(str(event["nodeid"]), None)
        elif kind == "finish":
            self.exitstatus = int(event["exitstatus"])


def pytest_command(*, events: Path, backends: Sequence[str], profile: str, seed: int,
                   target: Sequence[str] = DEFAULT_TARGET, numprocesses: str | None = None,
                   junitxml: Path | None = None, timeout: float | None = None,
                   extra: Sequence[str] = ()) -> list[str]:
    """The command line of the child pytest run: under pytest-xdist (``numprocesses``
    workers, 1 by default) and, when ``timeout`` is given, pytest-timeout's per-test limit
    in seconds (signal method)."""
    own_suite = tuple(target) == DEFAULT_TARGET
    plugin = ["-p", SUITE_PLUGIN] if own_suite else []
    cmd = [sys.executable, "-m", "pytest", *target, *plugin, "-p", "resverify.reports.collector",
           f"--resverify-events={events}", "-q", "-p", "no:cacheprovider",
           f"--hypothesis-profile={profile}", f"--hypothesis-seed={seed}"]
    cmd += [f"--backend={name}" for name in backends]
    cmd += ["-p", "xdist", "-n", numprocesses or "1"]
    if timeout:
        cmd += ["-p", "timeout", f"--timeout={timeout:g}", "--timeout-method=signal"]
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
              progress: Progress, suite: SuiteRun | None = None,
              on_tick: Callable[[SuiteRun], None] | None = None,
              poll_seconds: float = 0.1) -> SuiteRun:
    """Run ``cmd`` (see :func:`pytest_command`), filling ``suite`` with its events as they
    come, until it exits; ``on_tick`` is called after every poll.

    On KeyboardInterrupt (Ctrl-C, or a SIGTERM turned into one by the caller) the child's
    process group is stopped (:func:`stop_group`) and the run is marked interrupted; what
    finished stays in ``suite``, the status line is cleared.
    """
    suite = SuiteRun() if suite is None else suite
    tail = EventTail(events)

    def drain() -> None:
        for event in tail.read():
            suite.add(event)
            progress.event(event)

    try:
        with open(log, "wb") as log_handle:
            child = subprocess.Popen(list(cmd), stdout=log_handle, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, process_group=0)
            try:
                while child.poll() is None:
                    drain()
                    if on_tick is not None:
                        on_tick(suite)
                    time.sleep(poll_seconds)
            except KeyboardInterrupt as exc:
                suite.interrupted = getattr(exc, "signal_name", "SIGINT")
            finally:
                stop_group(child)
        suite.returncode = child.returncode
        drain()
    finally:
        progress.close()
    return suite


def stop_group(child: subprocess.Popen[bytes], grace_seconds: float = 5.0) -> None:
    """End ``child`` and every process left in its group (xdist workers): SIGTERM, then
    SIGKILL after ``grace_seconds``, or at once on another KeyboardInterrupt."""
    if child.poll() is None:
        _signal_group(child.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
            child.wait(timeout=grace_seconds)
    _signal_group(child.pid, signal.SIGKILL)
    child.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def child_environment(vector_dir: Path, profile: str) -> dict[str, str]:
    """The environment of the child: where to save counterexamples, which profile."""
    env = dict(os.environ)
    env["RESVERIFY_VECTOR_DIR"] = str(vector_dir)
    env["RESVERIFY_PROFILE"] = profile
    env.setdefault("PYTHONHASHSEED", "0")
    return env
