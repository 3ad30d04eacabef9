"""Run the property suite through pytest in a child process and follow it as it goes.

A child process keeps a crash, an ``os._exit`` or a hung extension in the suite from
taking the report down with it, and it lets pytest's own options (``-n`` from
pytest-xdist, ``-k``, ``--junitxml``) work unchanged. The suite always runs under
pytest-xdist (one worker unless ``-n`` says otherwise), so a test that kills its
process (a segfault, ``os._exit``) kills a worker that xdist replaces, and the run goes
on.

One channel carries the run back: pytest-reportlog's ``--report-log`` file, one JSON
record a line, written and flushed as each phase of each test ends
(``SessionStart``, ``TestReport`` for setup, call and teardown, ``SessionFinish`` with
pytest's exit status). :mod:`resverify.cli.collector`, loaded into the child, adds
what pytest-reportlog does not say by itself (how many tests were collected, which
test's process died). :class:`SuiteChild` starts the child and, each time the caller's
loop polls it, tails that file into a :class:`SuiteRun` that the caller can read at any
moment and shows progress on a terminal; what finished is there whether or not pytest
reached the end. The loop is the caller's, so that what it does between polls (rewrite
a report) stays with it, and no thread is needed: the child is watched from the loop.

A second, smaller channel says what a test is doing before it ends: a test that found a
counterexample leaves it in the status folder (``--status-dir``; one JSON file per worker
process, :meth:`resverify.properties.plugin.PropertyRun.write_status`), read on every poll
(:func:`read_states`), so the status line can say that it is shrinking, and an interrupt
keeps the counterexample found so far as the test's failure (:func:`keep_shrinking`).

Every setting reaches the child as a pytest option (:func:`pytest_command`); a child that
exits with pytest's usage-error status before its session began refused its command line
(:attr:`SuiteRun.refused`). Nothing else does: the property suite runs under its own
packaged configuration (:func:`suite_configuration`), never the ``pytest.ini``,
``pyproject.toml`` or ``conftest.py`` of the directory ``resverify check`` started in, and
without ``PYTEST_ADDOPTS`` (:func:`suite_environment`), so a verdict does not depend on
where it was asked for.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, Any

from resverify.cli.collector import COLLECTED, interrupted_while_shrinking, summarize

__all__ = []

DEFAULT_TARGET = ("--pyargs", "resverify.properties")
# loaded explicitly: a root conftest.py is not seen from another working directory
SUITE_PLUGIN = "resverify.properties.plugin"
SUITE_INI = "suite.ini"  # the property suite's own pytest configuration, packaged
HYPOTHESIS_PLUGIN = "hypothesispytest"  # Hypothesis' pytest plugin, by its entry point name
PYTEST_VARIABLES = frozenset({"PYTEST_ADDOPTS", "PYTEST_PLUGINS",
                              "PYTEST_DISABLE_PLUGIN_AUTOLOAD"})
USAGE_ERROR = 4  # pytest's exit status for a command line it refused
Record = dict[str, Any]


class Interrupted(KeyboardInterrupt):
    """A stop signal other than Ctrl-C (SIGTERM), raised like the KeyboardInterrupt of
    Ctrl-C so that both end a run the same way; ``signal_name`` says which it was."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


def signal_name(exc: BaseException) -> str:
    """The stop signal a KeyboardInterrupt stands for: SIGINT for Ctrl-C, or the one an
    :class:`Interrupted` names."""
    return str(getattr(exc, "signal_name", "SIGINT"))


@dataclass
class SuiteRun:
    """What the child pytest reported: results of finished tests, and how it ended."""

    began: bool = False  # pytest's session started (its command line was accepted)
    collected: int | None = None
    results: list[Record] = field(default_factory=list)
    exitstatus: int | None = None
    returncode: int | None = None
    interrupted: str = ""  # the signal that stopped the run ("SIGINT", "SIGTERM"), if one did
    running: dict[str, list[Record]] = field(default_factory=dict)  # begun: phases so far
    shrinking: dict[str, Record] = field(default_factory=dict)  # a running test's latest
    # counterexample, by node id (read_states)

    @property
    def finished(self) -> bool:
        """pytest reached the end of its session and every collected test has a result."""
        return (self.exitstatus in (0, 1) and self.collected is not None
                and len(self.results) >= self.collected)

    @property
    def refused(self) -> bool:
        """pytest refused its command line: a usage error before its session began."""
        return self.returncode == USAGE_ERROR and not self.began

    def add(self, record: Record) -> Record | None:
        """Take one report-log record; returns the test's result when it ends one."""
        kind = record.get("$report_type")
        if kind == "SessionStart":
            self.began = True
        elif kind == "SessionFinish":
            self.exitstatus = int(record["exitstatus"])
        elif kind == "TestReport":
            return self._phase(record)
        return None

    def _phase(self, record: Record) -> Record | None:
        """One phase of a test; the test's result when it was its last."""
        if COLLECTED in record:
            self.collected = int(record[COLLECTED])
        nodeid = str(record["nodeid"])
        self.running.setdefault(nodeid, []).append(record)
        if record.get("when") in ("setup", "call"):
            return None
        result = summarize(self.running.pop(nodeid))  # after teardown, or xdist's crash report
        self.results.append(result)
        return result


def suite_configuration() -> list[str]:
    """The options that make the property suite's child pytest read resverify's own
    configuration and nothing of the working directory's: ``-c`` the packaged
    ``suite.ini``, ``--rootdir`` its folder (so node ids read ``test_oracle.py::...``
    wherever the run starts), ``--noconftest``, and no plugin but the ones named
    (``--disable-plugin-autoload``; Hypothesis' by name)."""
    ini = resources.files("resverify.properties") / SUITE_INI
    folder = Path(str(ini)).parent
    return ["-c", str(ini), f"--rootdir={folder}", "--noconftest", "--disable-plugin-autoload",
            "-p", HYPOTHESIS_PLUGIN]


def suite_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``environ`` (this process's by default) without the
    variables through which pytest takes options and plugins from outside its command line
    (:data:`PYTEST_VARIABLES`), with stable str hashes (``PYTHONHASHSEED`` 0 unless set)."""
    env = {k: v for k, v in (os.environ if environ is None else environ).items()
           if k not in PYTEST_VARIABLES}
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def pytest_command(*, report_log: Path, backends: Sequence[str], profile: str, seed: int,
                   vector_dir: Path, target: Sequence[str] = DEFAULT_TARGET,
                   numprocesses: str | None = None, junitxml: Path | None = None,
                   timeout: float | None = None, status_dir: Path | None = None,
                   extra: Sequence[str] = ()) -> list[str]:
    """The command line of the child pytest run, which carries every setting: under
    pytest-xdist (``numprocesses`` workers, 1 by default) and, when ``timeout`` is given,
    pytest-timeout's per-test limit in seconds (signal method), timing the test function
    only: a limit timing the whole protocol can fire inside a reporting hook, which pytest
    reports as an internal error that ends the run instead of a ``timeout`` failure. The
    property suite also gets ``status_dir`` (:func:`read_states`) and runs under its own
    configuration only (:func:`suite_configuration`); ``extra`` (the arguments after
    ``--``) comes last and still applies. A suite other than the default target accepts
    ``--backend`` and ``--vector-dir`` like the property suite, and reads the
    configuration pytest finds for it, as it would when run by hand."""
    own_suite = tuple(target) == DEFAULT_TARGET
    plugin = ["-p", SUITE_PLUGIN, *suite_configuration()] if own_suite else []
    cmd = [sys.executable, "-m", "pytest", *target, *plugin, "-q", "-p", "no:cacheprovider",
           "-p", "pytest_reportlog", f"--report-log={report_log}",
           "-p", "resverify.cli.collector",
           f"--hypothesis-profile={profile}", f"--hypothesis-seed={seed}",
           f"--vector-dir={vector_dir}"]
    cmd += [f"--backend={name}" for name in backends]
    if own_suite and status_dir is not None:
        cmd.append(f"--status-dir={status_dir}")
    cmd += ["-p", "xdist", "-n", numprocesses or "1"]
    if timeout:
        cmd += ["-p", "timeout", f"--timeout={timeout:g}", "--timeout-method=signal",
                "-o", "timeout_func_only=true"]
    if junitxml is not None:
        cmd.append(f"--junitxml={junitxml}")
    return cmd + list(extra)


class RecordTail:
    """Reads the complete JSON lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[Record]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records


class Progress:
    """One rewritten status line on a terminal; silent otherwise."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = sys.stdout if stream is None else stream
        self.enabled = self.stream.isatty()
        self.failed = 0
        self.said: str | None = None  # the shrinking line shown last, if it is still up

    def show(self, text: str) -> None:
        if self.enabled:
            width = shutil.get_terminal_size((100, 24)).columns - 1
            self.stream.write("\r\033[K" + text[:width])
            self.stream.flush()

    def update(self, suite: SuiteRun, record: Record, result: Record | None) -> None:
        """Show what ``record``, just added to ``suite``, says: a test began, or ended with
        ``result``."""
        if result is not None:
            self.failed += result["outcome"] == "failed"
            examples = result["properties"].get("examples")
            shown = "" if examples is None else f", {examples} examples"
            self.show(f"{self._count(suite)} {_test_name(result)}: {result['outcome']}{shown}")
        elif record.get("$report_type") == "TestReport" and record.get("when") == "setup":
            self.show(f"{self._count(suite)} running {_test_name(record)}")

    def tick(self, suite: SuiteRun) -> None:
        """Between records: say so when a running test is shrinking a counterexample."""
        state = next((suite.shrinking[n] for n in suite.running if n in suite.shrinking), None)
        if state is None:
            self.said = None
            return
        # the news before the test's name, which can fill the terminal's width
        text = (f"{self._count(suite)} counterexample found after {state['failed_after']} "
                f"examples, shrinking (Ctrl-C keeps it): {_test_name(state)}")
        if text != self.said:
            self.said = text
            self.show(text)

    def _count(self, suite: SuiteRun) -> str:
        total = "?" if suite.collected is None else str(suite.collected)
        failed = f" {self.failed} failed" if self.failed else ""
        return f"[{len(suite.results)}/{total}{failed}]"

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _test_name(record: Record) -> str:
    return str(record["nodeid"]).split("::")[-1]


def read_states(folder: Path | None) -> dict[str, Record]:
    """The counterexamples the workers left in ``folder``, by node id; a file being
    replaced or unreadable is skipped (the next poll reads it)."""
    states: dict[str, Record] = {}
    if folder is None or not folder.is_dir():
        return states
    for path in sorted(folder.glob("*.json")):
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(state, dict) and isinstance(state.get("nodeid"), str):
            states[state["nodeid"]] = state
    return states


def keep_shrinking(suite: SuiteRun, vector_dir: Path) -> None:
    """After an interrupt: each test that was shrinking a counterexample ends as a failure
    with the counterexample found so far, saved as a vector in ``vector_dir``."""
    from resverify.properties.vectors import replay_command, save_vector
    from resverify.spec.codec import request_from_dict

    for nodeid, state in suite.shrinking.items():
        if nodeid not in suite.running:
            continue
        vector = replay = None
        if isinstance(state.get("request"), dict):
            path = save_vector(request_from_dict(state["request"]), vector_dir,
                               str(state["property"]), str(state["backend"]),
                               str(state["message"]), str(state["kind"]))
            runs = state.get("runs")
            vector, replay = str(path), replay_command(path, str(state["backend"]),
                                                       runs if isinstance(runs, int) else None)
        suite.results.append(interrupted_while_shrinking(suite.running.pop(nodeid), state,
                                                         vector, replay))


class SuiteChild:
    """The pytest child of one suite run, watched from the caller's own loop.

    ``with SuiteChild(cmd, ...) as child: while child.poll(): ...`` starts ``cmd`` (see
    :func:`pytest_command`) in a process group of its own; each :meth:`poll` reads into
    ``suite`` the records of ``report_log`` and the states of ``status_dir`` that came since
    the last one, and the caller does what it needs between polls (``resverify check``
    rewrites report.json on a timer). pytest's own output goes to ``log``, for people.

    However the block ends, the child's group is stopped (:func:`stop_group`), the last
    records are read and the status line is cleared. A KeyboardInterrupt (Ctrl-C, or a
    SIGTERM raised as :class:`Interrupted`) ends the block without propagating: the run is
    marked interrupted, and a test that was shrinking becomes a failure with its
    counterexample saved in ``vector_dir`` (:func:`keep_shrinking`).
    """

    def __init__(self, cmd: Sequence[str], *, report_log: Path, log: Path, progress: Progress,
                 suite: SuiteRun | None = None, status_dir: Path | None = None,
                 vector_dir: Path | None = None) -> None:
        self.cmd = list(cmd)
        self.log = log
        self.progress = progress
        self.suite = SuiteRun() if suite is None else suite
        self.status_dir = status_dir
        self.vector_dir = vector_dir
        self.report_log = report_log
        self._tail = RecordTail(report_log)
        self._child: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> SuiteChild:
        self.report_log.unlink(missing_ok=True)
        env = suite_environment()
        try:
            with open(self.log, "wb") as handle:  # the child keeps its own copy of it
                self._child = subprocess.Popen(self.cmd, stdout=handle,
                                               stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, env=env,
                                               process_group=0)
        except BaseException:
            self.progress.close()
            raise
        return self

    def poll(self) -> bool:
        """Read what the child reported since the last poll; whether it still runs."""
        assert self._child is not None, "poll() outside the with block"
        running = self._child.poll() is None
        self._drain()
        return running

    def _drain(self) -> None:
        for record in self._tail.read():
            self.progress.update(self.suite, record, self.suite.add(record))
        self.suite.shrinking = read_states(self.status_dir)
        self.progress.tick(self.suite)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: object) -> bool:
        stopped = isinstance(exc, KeyboardInterrupt)
        if isinstance(exc, KeyboardInterrupt):
            self.suite.interrupted = signal_name(exc)
        try:
            if self._child is not None:
                stop_group(self._child)
                self.suite.returncode = self._child.returncode
            self._drain()
            if self.suite.interrupted and self.vector_dir is not None:
                keep_shrinking(self.suite, self.vector_dir)
        finally:
            self.progress.close()
        return stopped


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
