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
:func:`resverify.reports.verdicts.mutant_outcome`, beside the report's other verdicts.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resverify.cli.runner import (
    RecordTail,
    SuiteRun,
    pytest_command,
    stop_group,
    suite_environment,
)
from resverify.reports.verdicts import mutant_outcome

__all__ = ["Command", "Job", "MutantRun", "mutant_command", "outcome", "run_children",
           "run_mutants"]

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


def outcome(suite: SuiteRun) -> dict[str, Any]:
    """The verdict on one mutant from its suite's results
    (:func:`resverify.reports.verdicts.mutant_outcome`: ``killed``, ``survived`` or
    ``error``, with the first failed test, the examples run until then and how many tests
    ran)."""
    return mutant_outcome(suite)


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
