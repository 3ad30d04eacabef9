"""Run the property suite against mutants, one child pytest per mutant, several at once.

Each mutant is checked by the same child pytest as ``resverify check`` (the command line
of :func:`resverify.cli.runner.pytest_command`, records read back through
pytest-reportlog) with two additions: ``-x``, so a run stops at the suite's first
failure, and :mod:`tools.mutant_child`, which drops Hypothesis' shrink phase
(the examples generated, and so the verdict, are those of the profile; only the time
spent simplifying a counterexample nobody reads is saved). Tests run in the suite's
order, so "the property that killed it" and "examples until the kill" are the same on
every run with the same profile and seed.

A mutant is ``killed`` when a test failed (a crash of the worker counts), ``survived``
when the whole suite passed, ``error`` when the run ended without either (pytest refused
its command line, or stopped early): an error is not a kill. That verdict is
:func:`outcome`: it measures resverify itself, so it is not part of the installed package.

The children import ``tools.*`` (the child plugin) and ``tests.*`` (the mutant catalog,
the broken backends) from this checkout, whatever the working folder: the checkout's root
goes first on their ``PYTHONPATH``. ``tools/flakes.py`` runs its children through the same
:func:`run_children`.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from resverify.cli.runner import (
    RecordTail,
    SuiteRun,
    pytest_command,
    stop_group,
    suite_environment,
)

__all__ = ["MUTANT_MESSAGE_CHARS", "Command", "Job", "MutantRun", "SuiteResults", "mutant_command",
           "outcome", "run_children", "run_mutants"]

CHILD_PLUGIN = "tools.mutant_child"
ROOT = Path(__file__).resolve().parents[1]
"""The checkout holding ``tools/`` and ``tests/``."""


@dataclass(frozen=True)
class MutantRun:
    """What to run: profile, seed, processes at once, per-test time limit, pytest extras."""

    profile: str = "ci"
    seed: int = 0
    processes: int = 1
    timeout: float = 300.0
    extra: tuple[str, ...] = ()


Command = Callable[[Path], list[str]]
"""Makes a child's pytest command line given its private folder; the command must write its
pytest-reportlog records to ``folder / "report-log.jsonl"``."""


@dataclass
class Job:
    """One child pytest while it runs, and what it reported."""

    key: str
    workdir: Path
    suite: SuiteRun = field(default_factory=SuiteRun)
    child: subprocess.Popen[bytes] | None = None
    tail: RecordTail | None = None
    started: float = 0.0
    seconds: float = 0.0

    def start(self, command: Command) -> None:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {**suite_environment(), "PYTHONPATH": path}
        self.tail = RecordTail(self.workdir / "report-log.jsonl")
        self.started = time.monotonic()
        with open(self.workdir / "pytest.log", "wb") as out:
            self.child = subprocess.Popen(command(self.workdir), stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=env, process_group=0)

    def poll(self) -> bool:
        """Read new records; True once the child has exited and everything is read."""
        assert self.child is not None and self.tail is not None
        done = self.child.poll() is not None
        for record in self.tail.read():
            self.suite.add(record)
        if done:
            self.suite.returncode = self.child.returncode
            self.seconds = time.monotonic() - self.started
        return done

    def stop(self) -> None:
        if self.child is not None:
            stop_group(self.child)


def run_children(commands: Sequence[tuple[str, Command]], processes: int,
                 on_done: Callable[[Job], None] | None = None,
                 poll_seconds: float = 0.1) -> dict[str, Job]:
    """Run each ``(key, command)`` child, at most ``processes`` at a time, each in a
    scratch folder of its own; ``on_done(job)`` as each ends. On KeyboardInterrupt every
    running child's process group is stopped, and the interrupt goes on."""
    done: dict[str, Job] = {}
    pending = list(enumerate(commands))
    running: list[tuple[Job, Command]] = []
    with tempfile.TemporaryDirectory(prefix="resverify-children-") as scratch:
        try:
            while pending or running:
                while pending and len(running) < max(1, processes):
                    index, (key, command) = pending.pop(0)
                    job = Job(key, Path(scratch) / str(index))
                    job.workdir.mkdir()
                    job.start(command)
                    running.append((job, command))
                for job, command in [r for r in running if r[0].poll()]:
                    running.remove((job, command))
                    done[job.key] = job
                    if on_done is not None:
                        on_done(job)
                time.sleep(poll_seconds)
        finally:
            for job, _ in running:
                job.stop()
    return done


def mutant_command(target: str, settings: MutantRun) -> Command:
    """The child pytest checking backend ``target``, stopped at its first failure."""
    def command(folder: Path) -> list[str]:
        return pytest_command(report_log=folder / "report-log.jsonl", backends=[target],
                              profile=settings.profile, seed=settings.seed,
                              vector_dir=folder / "vectors", timeout=settings.timeout,
                              extra=["-x", "-p", CHILD_PLUGIN, *settings.extra])
    return command


MUTANT_MESSAGE_CHARS = 300
"""A kill's message is cut to this many characters."""
Record = Mapping[str, Any]


class SuiteResults(Protocol):
    """What a mutant's verdict reads of its suite run (:class:`resverify.cli.runner.SuiteRun`
    has it): the finished tests' results in order, and how the run ended."""

    @property
    def results(self) -> Sequence[Record]: ...
    @property
    def exitstatus(self) -> int | None: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def finished(self) -> bool: ...
    @property
    def refused(self) -> bool: ...


def outcome(suite: SuiteResults) -> dict[str, Any]:
    """The verdict on one mutant from its suite's results, in the order they finished.

    ``killed`` at the first failed test (property, dtype, kind, message), unless that
    failure is ``internal`` (resverify's own error: ``error``, no kill); ``survived`` when
    the whole suite finished and passed; else ``error`` (pytest refused its command line,
    or the run stopped early), which is not a kill. ``examples`` counts the examples run
    until the verdict (the failed test's included), ``tests_run`` the tests until then.
    """
    examples = 0
    for count, result in enumerate(suite.results, start=1):
        examples += int(result["properties"].get("examples") or 0)
        if result["outcome"] == "failed":
            return {**_first_failure(result), "examples": examples, "tests_run": count}
    survived = suite.exitstatus == 0 and suite.finished
    return {"status": "survived" if survived else "error", "property": None, "dtype": None,
            "kind": None, "examples": examples, "tests_run": len(suite.results),
            "message": None if survived else _ended(suite)}


def _first_failure(result: Record) -> dict[str, Any]:
    """The verdict a mutant's first failed test gives: a kill, or an error when the failure
    is resverify's own (``internal``)."""
    props = result["properties"]
    internal = props.get("failure_kind") == "internal"
    message = " ".join(str(result.get("message") or "").split())
    return {"status": "error" if internal else "killed",
            "property": props.get("property") or result["nodeid"], "dtype": props.get("dtype"),
            "kind": "internal" if internal else props.get("failure_kind") or "law",
            "message": message[:MUTANT_MESSAGE_CHARS]}


def _ended(suite: SuiteResults) -> str:
    """Why a suite run that neither killed nor passed gives no verdict."""
    if suite.refused:
        return "pytest refused its command line (see pytest.log)"
    return (f"the suite ended without a verdict (pytest exit {suite.exitstatus}, "
            f"process exit {suite.returncode}, {len(suite.results)} tests finished)")


def run_mutants(targets: Sequence[str], settings: MutantRun,
                on_done: Callable[[str, dict[str, Any]], None] | None = None
                ) -> dict[str, dict[str, Any]]:
    """Each target's outcome (plus ``seconds``), ``settings.processes`` children at a time;
    ``on_done(target, outcome)`` as each finishes."""
    results: dict[str, dict[str, Any]] = {}

    def finished(job: Job) -> None:
        results[job.key] = {**outcome(job.suite), "seconds": round(job.seconds, 2)}
        if on_done is not None:
            on_done(job.key, results[job.key])

    run_children([(t, mutant_command(t, settings)) for t in targets], settings.processes,
                 finished)
    return results
