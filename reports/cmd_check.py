"""``resverify check``: the main job. Claims, then the property suite, then the reports.

The claim checker runs in this process; the property suite runs under pytest in a child
process (see :mod:`resverify.reports.runner`), so pytest's own options keep working
(``-n``, ``--junitxml``, and anything after ``--``). The three report files are written
atomically, and they are written whatever happens: a failed, crashed or interrupted run
(Ctrl-C once or twice, SIGTERM) still leaves a valid report of what finished, with
``"complete": false``; report.json is also rewritten every few seconds while the suite
runs, so a long run can be followed.

A verdict needs evidence: a backend on which no example ran is ``nothing checked``, never
``passed``, and the run exits 1 unless ``--allow-nothing-checked`` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resverify.impl import Backend, resolve_backend
from resverify.impl.registry import BUILTIN
from resverify.properties.profiles import PROFILES
from resverify.reports import json_report
from resverify.reports.atomic import write_bytes, write_text
from resverify.reports.claim_source import ClaimRun, run_claims
from resverify.reports.runner import (
    DEFAULT_TARGET,
    Interrupted,
    Progress,
    SuiteRun,
    pytest_command,
    run_suite,
)
from resverify.spec import UsageError

NAME = "check"
HELP = "check backends against the claims and the property suite, write the report"
DEFAULT_REPORT_DIR = Path("resverify-report")
_REWRITE_SECONDS = 2.0
DEFAULT_TIMEOUT_SECONDS = 600.0
_PLOTTING = threading.Lock()
_REPLAYS_SHOWN = 5
_SAID_LIMIT = 1000
_PYTEST_ENDINGS = {2: "the property suite was interrupted", 3: "pytest hit an internal error",
                   4: "pytest refused its arguments"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                        help="backend to check, repeatable: a built-in name "
                        f"({', '.join(BUILTIN)}; default numpy), module:attr for an adapter "
                        "of your own, or cmd:COMMAND for an engine in another process")
    parser.add_argument("--profile", default="ci",
                        help="Hypothesis profile: dev, ci (default; seeded, so reproducible), "
                             "thorough, extremes")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis and plot seed (default 0)")
    parser.add_argument("--report-dir", type=Path, default=DEFAULT_REPORT_DIR,
                        help="folder for report.json/.md/.html (default ./resverify-report)")
    parser.add_argument("-n", "--numprocesses", metavar="N",
                        help="run the suite in N processes (pytest-xdist), or 'auto'")
    parser.add_argument("--junitxml", type=Path, metavar="PATH", help="also write JUnit XML")
    parser.add_argument("--suite", metavar="TARGET",
                        help="pytest target of the property suite (default: the installed "
                        "'resverify.properties' package)")
    parser.add_argument("--no-claims", action="store_true",
                        help="skip the claim checker (the report says so)")
    parser.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_SECONDS,
                        metavar="SECONDS",
                        help="time limit of one property test (pytest-timeout); a test that "
                        "passes it fails with kind 'timeout' and the run goes on (default "
                        f"{DEFAULT_TIMEOUT_SECONDS:g}; 0 for none)")
    parser.add_argument("--allow-nothing-checked", action="store_true",
                        help="exit 0 even when a backend had no example checked (its status "
                        "stays 'nothing checked'); by default that exits 1")
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                        help="extra pytest arguments after --, e.g. -- -k shape")


@dataclass
class _Run:
    """Everything a report is built from; filled in as the run goes."""

    args: argparse.Namespace
    named: dict[str, Backend]
    report_dir: Path
    claims: ClaimRun = field(default_factory=ClaimRun)
    suite: SuiteRun = field(default_factory=SuiteRun)
    warnings: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    timings: dict[str, Any] = field(default_factory=dict)
    suite_ran: bool = False
    plot_job: _PlotJob | None = None
    progress: Progress = field(default_factory=Progress)

    @property
    def backends(self) -> list[Backend]:
        return list(self.named.values())

    def complete(self) -> bool:
        return (self.suite_ran and self.suite.finished and not self.suite.interrupted
                and not self.claims.broken)

    def document(self) -> dict[str, Any]:
        names = [b.name for b in self.backends]
        base = Path.cwd()
        default = names[0] if len(names) == 1 else None
        props = [json_report.property_entry(r, default, base) for r in self.suite.results]
        for prop in props:  # a suite may record the backend as typed on the command line
            if prop["backend"] in self.named:
                prop["backend"] = self.named[prop["backend"]].name
        timings = dict(self.timings, total_seconds=round(time.monotonic() - self.started, 3))
        return json_report.build_report(
            run={"seed": self.args.seed, "profile": self.args.profile, "backends": names,
                 "pytest_args": list(self.args.pytest_args),
                 "pytest_exit_code": self.suite.exitstatus},
            backends=self.backends, claims=self.claims.claims, properties=props,
            complete=self.complete(), warnings=self.claims.warnings + self.warnings,
            timings=timings)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"seconds must be finite and >= 0, got {text!r}")
    return value


def _report_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"cannot write to report folder {str(path)!r}: "
                         f"{exc.strerror or exc}") from None
    return path.resolve()


def _check_profile(name: str) -> str:
    known = tuple(PROFILES)
    if name not in known:
        raise UsageError(f"unknown profile {name!r}; use one of {list(known)}")
    return name


def _backends(names: list[str]) -> dict[str, Backend]:
    """Each backend named on the command line (as typed) with its resolved object."""
    return {name: resolve_backend(name) for name in dict.fromkeys(names)}


def _pytest_args(args: argparse.Namespace) -> list[str]:
    extra = list(args.pytest_args)
    return extra[1:] if extra[:1] == ["--"] else extra


class _PlotJob:
    """Draws the plots in a thread while the claims and the suite run (they need only the
    seed), so the report costs no extra wall time on a machine with a spare core."""

    def __init__(self, seed: int) -> None:
        self.plots: dict[str, bytes] = {}
        self.error: str | None = None
        self.thread = threading.Thread(target=self._draw, args=(seed,), daemon=True)
        self.thread.start()

    def _draw(self, seed: int) -> None:
        try:
            from resverify.reports.plots import render_plots

            with _PLOTTING:  # matplotlib is not thread-safe; a stopped run's job may linger
                self.plots = render_plots(seed)
        except Exception as exc:  # plots are an extra: the report stands without them
            self.error = f"plots were not drawn: {type(exc).__name__}: {exc}"

    def result(self, wait: float | None) -> tuple[dict[str, bytes], str | None]:
        """The plots, waiting at most ``wait`` seconds for them (None: until drawn)."""
        self.thread.join(wait)
        if self.thread.is_alive():
            return {}, "plots were not drawn: the run ended before they were ready"
        return self.plots, self.error


def run(args: argparse.Namespace) -> int:
    args.pytest_args = _pytest_args(args)
    _check_profile(args.profile)
    state = _Run(args, _backends(args.backends or ["numpy"]), _report_dir(args.report_dir))
    state.plot_job = _PlotJob(args.seed)
    with StopSignals() as signals:
        try:
            _run_claims(state)
            _run_suite(state)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM outside the suite
            state.suite.interrupted = getattr(exc, "signal_name", "SIGINT")
        except Exception:
            write_reports(state, signals)  # leave a report of what finished, then let the
            raise  # bug show
        stop = _stop_message(state)
        _usage_error_from_pytest(state)
        doc = write_reports(state, signals)
    state.progress.close()
    _print_summary(doc, state.report_dir, stop)
    allowed = ("passed", "nothing checked") if args.allow_nothing_checked else ("passed",)
    return 0 if doc["status"] in allowed else 1


class StopSignals:
    """Ctrl-C (SIGINT) and SIGTERM (CI runners, ``timeout``) end a run the same way.

    The first one raises :class:`Interrupted` (a KeyboardInterrupt) while the run goes on;
    a later one, or one that comes while the reports are written, is recorded and changes
    nothing: the reports are always written whole. When a signal arrived, both are ignored
    from then on (the process is ending; Python restores the default handlers while it
    shuts down, so a late Ctrl-C would otherwise kill it); otherwise the previous handlers
    are restored.
    """

    STOP = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.received: str | None = None
        self.raising = True
        self.previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self.previous = {sig: signal.signal(sig, self._handle) for sig in self.STOP}
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.raising = False
        for sig, handler in self.previous.items():
            signal.signal(sig, handler if self.received is None else signal.SIG_IGN)

    def _handle(self, signum: int, frame: object) -> None:
        first = self.received is None
        self.received = self.received or signal.Signals(signum).name
        if first and self.raising:
            raise Interrupted(self.received)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """No signal interrupts what runs inside (it is still recorded)."""
        raising, self.raising = self.raising, False
        try:
            yield
        finally:
            self.raising = raising


def _stop_message(state: _Run) -> str | None:
    """The one line that says the run was stopped (also a report warning), or None."""
    if not state.suite.interrupted:
        return None
    finished = len(state.suite.results)
    message = (f"interrupted by {state.suite.interrupted}: the report holds the {finished} "
               f"test{'s' if finished != 1 else ''} that finished")
    state.warnings.append(message)
    state.warnings += [f"not counted, it was running when the run stopped: {nodeid}"
                       for nodeid in state.suite.running]
    return message


def _run_claims(state: _Run) -> None:
    if state.args.no_claims:
        state.claims = ClaimRun(warnings=["claims were not checked (--no-claims)"])
        return
    began = time.monotonic()
    state.progress.show(f"checking claims on {', '.join(state.named)}")
    state.claims = run_claims({name: b.name for name, b in state.named.items()})
    state.timings["claims_seconds"] = round(time.monotonic() - began, 3)
    _write_json(state)


def _run_suite(state: _Run) -> None:
    args, report_dir = state.args, state.report_dir
    report_log = report_dir / "report-log.jsonl"
    target = [args.suite] if args.suite else list(DEFAULT_TARGET)
    junit = None if args.junitxml is None else args.junitxml.resolve()
    cmd = pytest_command(report_log=report_log, backends=list(state.named),
                         profile=args.profile, seed=args.seed, vector_dir=report_dir / "vectors",
                         target=target, numprocesses=args.numprocesses, junitxml=junit,
                         timeout=args.timeout, extra=args.pytest_args)
    written = [time.monotonic(), 0]

    def rewrite(suite: SuiteRun) -> None:
        """report.json follows the run: rewritten when tests finished, every few seconds."""
        if (len(suite.results) != written[1]
                and time.monotonic() - written[0] >= _REWRITE_SECONDS):
            written[:] = [time.monotonic(), len(suite.results)]
            _write_json(state)

    began = time.monotonic()
    state.suite_ran = True
    try:
        run_suite(cmd, report_log=report_log, log=report_dir / "pytest.log",
                  progress=state.progress, suite=state.suite, on_tick=rewrite)
    finally:
        state.timings["properties_seconds"] = round(time.monotonic() - began, 3)
    state.warnings.extend(_suite_warnings(state.suite, report_dir / "pytest.log"))


def _suite_warnings(suite: SuiteRun, log: Path) -> list[str]:
    if suite.interrupted:
        return []  # said once, by the stop message
    if suite.exitstatus is None:
        return [f"pytest stopped before the end of its session (exit code {suite.returncode}); "
                f"see {log.name}"]
    if suite.exitstatus == 5:
        return ["pytest collected no property tests"]
    if suite.exitstatus not in (0, 1):
        what = _PYTEST_ENDINGS.get(suite.exitstatus, "pytest ended early")
        return [f"{what} (exit code {suite.exitstatus}); see {log.name}"]
    if suite.collected is not None and len(suite.results) < suite.collected:
        return [f"only {len(suite.results)} of {suite.collected} property tests finished"]
    return []


def _usage_error_from_pytest(state: _Run) -> None:
    """pytest refusing its arguments (a usage error before its session began) is a usage
    error of ours; its message is all that pytest printed, on one line."""
    if not state.suite.refused:
        return
    (state.report_dir / "report.json").unlink(missing_ok=True)  # a refused run has no report
    log = state.report_dir / "pytest.log"
    said = " ".join(log.read_text(errors="replace").split()) if log.exists() else ""
    raise UsageError(f"pytest refused the arguments: {said[:_SAID_LIMIT] or 'no message'}")


def _write_json(state: _Run) -> dict[str, Any]:
    doc = state.document()
    json_report.write_report(state.report_dir / "report.json", doc)
    return doc


def write_reports(state: _Run, signals: StopSignals | None = None) -> dict[str, Any]:
    """report.json first (cheapest, most important), then report.md, then report.html;
    no signal cuts them short (only the wait for the plots can be interrupted)."""
    signals = StopSignals() if signals is None else signals
    with signals.held():
        doc = _write_json(state)
    wait = 0.0 if state.suite.interrupted else None
    try:
        plots, error = (state.plot_job.result(wait) if state.plot_job
                        else ({}, "plots were not drawn"))
    except KeyboardInterrupt:
        plots, error = {}, "plots were not drawn: interrupted while they were drawn"
    with signals.held():
        return _write_rest(state, doc, plots, error)


def _write_rest(state: _Run, doc: dict[str, Any], plots: dict[str, bytes],
                error: str | None) -> dict[str, Any]:
    from resverify.reports.html import render_html
    from resverify.reports.markdown import append_step_summary, render_markdown

    if error:
        state.warnings.append(error)
        doc = _write_json(state)
    markdown = render_markdown(doc)
    write_text(state.report_dir / "report.md", markdown)
    append_step_summary(markdown)
    (state.report_dir / "plots").mkdir(exist_ok=True)
    for name, png in plots.items():
        write_bytes(state.report_dir / "plots" / f"{name}.png", png)
    write_text(state.report_dir / "report.html", render_html(doc, plots))
    return doc


def _print_summary(doc: dict[str, Any], report_dir: Path, stop: str | None) -> None:
    props, claims = doc["summary"]["properties"], doc["summary"]["claims"]
    print(f"properties: {props['passed']} passed, {props['failed']} failed, "
          f"{props['skipped']} skipped; claims: {claims['passed']} passed, "
          f"{claims['failed']} failed")
    for backend in doc["backends"]:
        if backend["status"] == "nothing checked":
            count = len(backend["not_run"])
            print(f"{backend['name']}: nothing checked ({count} test{'s' if count != 1 else ''}"
                  " could not run on it; see report.md)")
    for warning in doc["warnings"]:
        if warning != stop and not warning.startswith("not counted, it was running"):
            print(f"warning: {warning}", file=sys.stderr)
    replays = [p["replay"] for p in doc["properties"] if p["status"] == "failed" and p["replay"]]
    for command in replays[:_REPLAYS_SHOWN]:
        print(f"replay: {command}")
    if len(replays) > _REPLAYS_SHOWN:
        print(f"... and {len(replays) - _REPLAYS_SHOWN} more replay commands in report.md")
    shown = os.path.relpath(report_dir) if report_dir.is_relative_to(Path.cwd()) else report_dir
    print(f"{doc['status']} (report in {shown}/report.html)")
    if stop:
        print(f"resverify: {stop} ({shown}/report.html)", file=sys.stderr)
