"""``resverify check``: the main job. Claims, then the property suite, then the reports.

The claim checker runs in this process; the property suite runs under pytest in a child
process (see :mod:`resverify.cli.runner`), so pytest's own options keep working
(``-n``, ``--junitxml``, and anything after ``--``). The three report files are written
atomically, and they are written whatever happens: a failed, crashed or interrupted run
(Ctrl-C once or twice, SIGTERM) still leaves a valid report of what finished, with
``"complete": false``; report.json is also rewritten every few seconds while the suite
runs, so a long run can be followed.

The parts: the command line is checked once into a :class:`_Request` (backends resolved,
profile known, report folder writable); the claims and the suite's records gather in an
:class:`_Evidence`; :func:`document` makes the report from the two at any moment. Every
setting reaches pytest as one of its options, and pytest's records come back through
pytest-reportlog (:mod:`resverify.cli.runner`).

A verdict needs evidence: a backend on which no example ran is ``nothing checked``, never
``passed``, and the run exits 1 unless ``--allow-nothing-checked`` is given.

Known failures (:mod:`resverify.reports.known_failures`): the file is read and checked
with the command line, before anything runs; each entry's vector is judged on its backend
right after the claims, so the report says ``expected`` or ``fixed`` from its first write.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resverify.cli.claim_source import ClaimRun, run_claims
from resverify.cli.runner import (
    DEFAULT_TARGET,
    Interrupted,
    Progress,
    SuiteRun,
    pytest_command,
    run_suite,
    stop_group,
)
from resverify.impl import Backend, resolve_backend
from resverify.impl.registry import BUILTIN
from resverify.properties.profiles import PROFILES, shrink_limit
from resverify.reports import json_report, known_failures
from resverify.reports.atomic import write_bytes, write_text
from resverify.spec import UsageError

NAME = "check"
HELP = "check backends against the claims and the property suite, write the report"
DEFAULT_REPORT_DIR = Path("resverify-report")
_REWRITE_SECONDS = 2.0
DEFAULT_TIMEOUT_SECONDS = 600.0
_PLOTTING = threading.Lock()
_PLOT_STOP_SECONDS = 15.0
_PLOT_START_SECONDS = 60.0  # a plot process's imports (torch, jax) before its backend time
PLOT_WAIT_SECONDS = 300.0  # after the suite: a backend that hangs in a plot cannot hang the report
_REPLAYS_SHOWN = 5
_PYTEST_LOG = "pytest.log"
_PLOT_LOG = "plots.log"
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
                        "'resverify.properties' package); a suite of your own takes the "
                        "options --backend NAME and --vector-dir DIR")
    parser.add_argument("--no-claims", action="store_true",
                        help="skip the claim checker (the report says so)")
    parser.add_argument("--no-plots", action="store_true",
                        help="draw no plots: no backend is asked for plot data and report.html "
                        "has no plots (the report says so)")
    parser.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_SECONDS,
                        metavar="SECONDS",
                        help="time limit of one property test (pytest-timeout); a test that "
                        "passes it fails with kind 'timeout' and the run goes on (default "
                        f"{DEFAULT_TIMEOUT_SECONDS:g}; 0 for none)")
    parser.add_argument("--allow-nothing-checked", action="store_true",
                        help="exit 0 even when a backend had no example checked (its status "
                        "stays 'nothing checked'); by default that exits 1")
    parser.add_argument("--known-failures", type=Path, metavar="FILE",
                        help="known failures, each pinned to a saved vector (TOML, or JSON "
                        "when FILE ends in .json): a listed failure that reproduces is "
                        "'expected', a listed one that passes now is 'fixed' and fails the "
                        f"run (default: ./{known_failures.DEFAULT_FILE} when it exists)")
    parser.add_argument("--mutants", type=Path, metavar="FILE",
                        help="attach the score of `tools/mutants.py --out FILE` to the report "
                        "(report.json's mutants entry, a table in report.html)")
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                        help="extra pytest arguments after --, e.g. -- -k shape")


@dataclass(frozen=True)
class _Request:
    """What the command line asked for, checked once before anything runs."""

    named: dict[str, Backend]  # each backend as typed on the command line, resolved
    report_dir: Path
    seed: int
    profile: str
    pytest_args: tuple[str, ...]
    known_file: Path | None = None
    known: tuple[known_failures.KnownFailure, ...] = ()
    mutants: Mapping[str, Any] | None = None

    @property
    def backends(self) -> list[Backend]:
        return list(self.named.values())


@dataclass
class _Evidence:
    """What the run found so far: the claims, the suite, how long each took."""

    claims: ClaimRun = field(default_factory=ClaimRun)
    suite: SuiteRun = field(default_factory=SuiteRun)
    timings: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    known: list[dict[str, Any]] = field(default_factory=list)

    def complete(self) -> bool:
        return self.suite.finished and not self.suite.interrupted and not self.claims.broken


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
    """Draws the plots in a thread while the claims and the suite run. Each plot has one
    series per checked backend, computed in a process of its own per backend
    (:mod:`resverify.reports.plot_child`, one after the other), so a backend that crashes,
    exits or hangs leaves its series as gaps, never the report; the exact and reference
    curves are computed here (they ask no backend)."""

    def __init__(self, seed: int, named: Mapping[str, Backend], folder: Path,
                 enabled: bool = True) -> None:
        self.enabled = enabled
        self.plots: dict[str, bytes] = {}
        self.summary: dict[str, Any] | None = None
        self.error: str | None = None
        self.stop = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.thread = threading.Thread(target=self._draw, args=(seed, dict(named), folder),
                                       daemon=True)

    def start(self) -> None:
        if self.enabled:
            self.thread.start()

    def _draw(self, seed: int, named: dict[str, Backend], folder: Path) -> None:
        try:
            from resverify.reports.plots import add_series, plot_data, plot_summary, render_plots

            with tempfile.TemporaryDirectory(prefix="resverify-plots-") as scratch:
                series = [(b.name, *self._series(seed, typed, Path(scratch) / f"{i}.json",
                                                 folder / _PLOT_LOG))
                          for i, (typed, b) in enumerate(named.items())
                          if not self.stop.is_set()]
            with _PLOTTING:  # matplotlib is not thread-safe; a stopped run's job may linger
                data = plot_data(seed, [])
                for name, document, gap in series:
                    add_series(data, name, document, gap)
                if self.stop.is_set():
                    return
                self.plots = render_plots(seed, data=data)
            self.summary = plot_summary(data)
        except Exception as exc:  # plots are an extra: the report stands without them
            self.error = f"plots were not drawn: {type(exc).__name__}: {exc}"

    def _series(self, seed: int, typed: str, out: Path, log: Path
                ) -> tuple[dict[str, Any] | None, str | None]:
        """One backend's series document from its own process, or None and why not."""
        from resverify.reports.plots import SECONDS_PER_BACKEND

        cmd = [sys.executable, "-m", "resverify.reports.plot_child", "--seed", str(seed),
               "--backend", typed, "--out", str(out)]
        limit = SECONDS_PER_BACKEND + _PLOT_START_SECONDS
        with open(log, "ab") as handle:
            self.child = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, process_group=0)
            try:
                self.child.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                stop_group(self.child)
                return None, f"its plot process ran past {limit:g} s"
            finally:
                stop_group(self.child)
        code = self.child.returncode
        if code != 0 or not out.exists():
            return None, f"its plot process ended with exit code {code} (see {_PLOT_LOG})"
        return json.loads(out.read_text(encoding="utf-8"))["plots"], None

    def result(self, wait: float | None
               ) -> tuple[dict[str, bytes], list[str], dict[str, Any] | None]:
        """The plots, the warnings they leave (an error, or each backend's gaps) and their
        summary for report.json, waiting at most ``wait`` seconds (None: until drawn)."""
        if not self.enabled:
            return {}, ["plots were not drawn (--no-plots)"], None
        if self.thread.ident is None:
            return {}, ["plots were not drawn: the run stopped before they were started"], None
        self.thread.join(wait)
        if self.thread.is_alive():
            # a daemon thread inside C++ code (matplotlib) when Python exits aborts the
            # process: stop its plot process, ask it to stop, and give it a moment to
            self.stop.set()
            if self.child is not None:
                stop_group(self.child)
            self.thread.join(_PLOT_STOP_SECONDS)
            return {}, ["plots were not drawn: the run ended before they were ready"], None
        if self.error is not None:
            return self.plots, [self.error], None
        return self.plots, _gap_notes(self.summary or {}), self.summary


def _gap_notes(summary: Mapping[str, Any]) -> list[str]:
    """One warning per backend whose plot series have gaps: which plots, and the first
    reason."""
    gaps: dict[str, tuple[list[str], str]] = {}
    for plot, part in summary.items():
        for backend, reason in part["gaps"].items():
            gaps.setdefault(backend, ([], reason))[0].append(plot)
    return [f"plots: {backend} gave no data for part of {', '.join(plots)}: {reason}"
            for backend, (plots, reason) in gaps.items()]


def run(args: argparse.Namespace) -> int:
    profile = _check_profile(args.profile)  # the one check of the profile's name
    named = _backends(args.backends or ["numpy"])
    known_file = known_failures.find_file(args.known_failures)
    known = tuple(known_failures.load(known_file)) if known_file is not None else ()
    request = _Request(named=named, report_dir=_report_dir(args.report_dir), seed=args.seed,
                       profile=profile, pytest_args=tuple(_pytest_args(args)),
                       known_file=known_file, known=known,
                       mutants=None if args.mutants is None else load_mutants(args.mutants))
    (request.report_dir / _PLOT_LOG).unlink(missing_ok=True)
    plots = _PlotJob(request.seed, request.named, request.report_dir, not args.no_plots)
    plots.start()
    progress = Progress()
    found = _Evidence()
    with StopSignals() as signals:
        try:
            if args.no_claims:
                found.claims = ClaimRun(warnings=["claims were not checked (--no-claims)"])
            else:
                _run_claims(request, found, progress)
            _check_known(request, found, progress)
            _run_suite(args, request, found, progress)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM outside the suite
            found.suite.interrupted = getattr(exc, "signal_name", "SIGINT")
        except Exception:
            write_reports(request, found, plots, signals)  # leave a report of what
            raise  # finished, then let the bug show
        _usage_error_from_pytest(request, found.suite)
        doc = write_reports(request, found, plots, signals)
    progress.close()
    _print_summary(doc, request.report_dir, _stop_message(found.suite), found.suite.began)
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


def _stop_message(suite: SuiteRun) -> str | None:
    """The one line that says the run was stopped (also a report warning), or None."""
    if not suite.interrupted:
        return None
    kept = sum(bool(r["properties"].get("shrink_interrupted")) for r in suite.results)
    finished = len(suite.results) - kept
    said = (f"interrupted by {suite.interrupted}: the report holds the {finished} "
            f"test{'s' if finished != 1 else ''} that finished")
    if kept:
        said += (f" and {kept} stopped while shrinking, kept as failed with the "
                 "counterexample found so far")
    return said


def _run_claims(request: _Request, found: _Evidence, progress: Progress) -> None:
    began = time.monotonic()
    progress.show(f"checking claims on {', '.join(request.named)}")

    def counted(shown: str, k: int, total: int, claim: str) -> None:
        progress.show(f"checking claims on {shown} [{k}/{total}] {claim}")

    found.claims = run_claims({name: b.name for name, b in request.named.items()},
                              progress=counted)
    found.timings["claims_seconds"] = round(time.monotonic() - began, 3)
    _write_json(request, found)


def _check_known(request: _Request, found: _Evidence, progress: Progress) -> None:
    """Judge each known failure's vector on its backend (see known_failures)."""
    if not request.known:
        return
    began = time.monotonic()
    progress.show(f"checking {len(request.known)} known failures")
    found.known = known_failures.check_entries(request.known, request.named, Path.cwd())
    found.timings["known_failures_seconds"] = round(time.monotonic() - began, 3)


def _run_suite(args: argparse.Namespace, request: _Request, found: _Evidence,
               progress: Progress) -> None:
    report_dir = request.report_dir
    report_log = report_dir / "report-log.jsonl"
    status = Path(tempfile.mkdtemp(prefix="resverify-status-"))
    cmd = pytest_command(report_log=report_log, backends=list(request.named),
                         profile=request.profile, seed=request.seed,
                         vector_dir=report_dir / "vectors",
                         target=[args.suite] if args.suite else list(DEFAULT_TARGET),
                         numprocesses=args.numprocesses,
                         junitxml=None if args.junitxml is None else args.junitxml.resolve(),
                         timeout=args.timeout, status_dir=status, extra=request.pytest_args)
    written = [time.monotonic(), 0]

    def rewrite(suite: SuiteRun) -> None:
        """report.json follows the run: rewritten when tests finished, every few seconds."""
        if (len(suite.results) != written[1]
                and time.monotonic() - written[0] >= _REWRITE_SECONDS):
            written[:] = [time.monotonic(), len(suite.results)]
            _write_json(request, found)

    began = time.monotonic()
    try:
        run_suite(cmd, report_log=report_log, log=report_dir / _PYTEST_LOG,
                  progress=progress, suite=found.suite, on_tick=rewrite, status_dir=status,
                  vector_dir=report_dir / "vectors")
    finally:
        found.timings["properties_seconds"] = round(time.monotonic() - began, 3)
        shutil.rmtree(status, ignore_errors=True)


def _suite_warnings(suite: SuiteRun) -> list[str]:
    """What the report must say about how the suite ended (nothing while it runs)."""
    stop = _stop_message(suite)
    if stop is not None:
        return [stop, *(f"not counted, it was running when the run stopped: {nodeid}"
                        for nodeid in suite.running)]
    if suite.returncode is None:
        return []
    if suite.exitstatus is None:
        return [f"pytest stopped before the end of its session (exit code {suite.returncode}); "
                f"see {_PYTEST_LOG}"]
    if suite.exitstatus == 5:
        return ["pytest collected no property tests"]
    if suite.exitstatus not in (0, 1):
        what = _PYTEST_ENDINGS.get(suite.exitstatus, "pytest ended early")
        return [f"{what} (exit code {suite.exitstatus}); see {_PYTEST_LOG}"]
    if suite.collected is not None and len(suite.results) < suite.collected:
        return [f"only {len(suite.results)} of {suite.collected} property tests finished"]
    return []


def _usage_error_from_pytest(request: _Request, suite: SuiteRun) -> None:
    """pytest refusing its arguments (a usage error before its session began) is a usage
    error of ours; its message is all that pytest printed, on one line."""
    if not suite.refused:
        return
    (request.report_dir / "report.json").unlink(missing_ok=True)  # a refused run has no report
    log = request.report_dir / _PYTEST_LOG
    said = " ".join(log.read_text(errors="replace").split()) if log.exists() else ""
    raise UsageError(f"pytest refused the arguments: {said[:_SAID_LIMIT] or 'no message'}")


def document(request: _Request, found: _Evidence, notes: Sequence[str] = (),
             plots: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report of what ``found`` holds now; ``notes`` are further warnings, ``plots``
    the plots' series and gaps once they are drawn."""
    names = [b.name for b in request.backends]
    base = Path.cwd()
    default = names[0] if len(names) == 1 else None
    props = [json_report.property_entry(r, default, base) for r in found.suite.results]
    for prop in props:  # a suite may record the backend as typed on the command line
        if prop["backend"] in request.named:
            prop["backend"] = request.named[prop["backend"]].name
    timings = dict(found.timings, total_seconds=round(time.monotonic() - found.started, 3))
    return json_report.build_report(
        run={"seed": request.seed, "profile": request.profile, "backends": names,
             "pytest_args": list(request.pytest_args),
             "pytest_exit_code": found.suite.exitstatus},
        backends=request.backends, claims=found.claims.claims, properties=props,
        complete=found.complete(),
        warnings=[*found.claims.warnings, *_suite_warnings(found.suite), *notes],
        timings=timings, known=_known(request, found), mutants=request.mutants, plots=plots)


def load_mutants(path: Path) -> dict[str, Any]:
    """The JSON of ``tools/mutants.py --out``, checked against the report schema's part
    for it; an unreadable or foreign file is a one-line usage error."""
    import jsonschema

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read --mutants {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"--mutants {path} is not JSON: {exc}") from None
    schema = json_report.load_schema()
    part = dict(schema["properties"]["mutants"], **{"$defs": schema["$defs"]})
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(part).iter_errors(doc))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the document"
        raise UsageError(f"--mutants {path} is not a `tools/mutants.py --out` document: "
                         f"{where}: {error.message}")
    return dict(doc)


def _known(request: _Request, found: _Evidence) -> dict[str, Any]:
    shown = request.known_file
    if shown is not None and shown.resolve().is_relative_to(Path.cwd().resolve()):
        shown = shown.resolve().relative_to(Path.cwd().resolve())
    return {"file": None if shown is None else str(shown), "entries": found.known}


def _write_json(request: _Request, found: _Evidence, notes: Sequence[str] = (),
                plots: Mapping[str, Any] | None = None) -> dict[str, Any]:
    doc = document(request, found, notes, plots)
    json_report.write_report(request.report_dir / "report.json", doc)
    return doc


def write_reports(request: _Request, found: _Evidence, plots: _PlotJob,
                  signals: StopSignals) -> dict[str, Any]:
    """report.json first (cheapest, most important), then report.md, then report.html;
    no signal cuts them short (only the wait for the plots can be interrupted)."""
    with signals.held():
        doc = _write_json(request, found)
    wait = 0.0 if found.suite.interrupted else PLOT_WAIT_SECONDS
    try:
        drawn, notes, summary = plots.result(wait)
    except KeyboardInterrupt:
        drawn, summary = {}, None
        notes = ["plots were not drawn: interrupted while they were drawn"]
    with signals.held():
        if notes or summary:
            doc = _write_json(request, found, notes, summary)
        _write_rest(request.report_dir, doc, drawn)
    return doc


def _write_rest(report_dir: Path, doc: dict[str, Any], plots: dict[str, bytes]) -> None:
    from resverify.reports.html import render_html
    from resverify.reports.markdown import append_step_summary, render_markdown

    markdown = render_markdown(doc)
    write_text(report_dir / "report.md", markdown)
    append_step_summary(markdown)
    (report_dir / "plots").mkdir(exist_ok=True)
    for name, png in plots.items():
        write_bytes(report_dir / "plots" / f"{name}.png", png)
    write_text(report_dir / "report.html", render_html(doc, plots))


def _print_known(known: dict[str, Any], counts: dict[str, int]) -> None:
    """The known failures' tally, and one line per fixed entry (each fails the run)."""
    if known["file"] is None:
        return
    print(f"known failures ({known['file']}): {counts['expected']} expected, "
          f"{counts['fixed']} fixed, {counts['not_checked']} not checked")
    for entry in known["entries"]:
        if entry["status"] == "fixed":
            what = entry["property"] or f"claim {entry['claim']}"
            on = f" on {entry['vector']}" if entry["vector"] else ""
            print(f"fixed: entry {entry['entry']} ({entry['backend']}, {what}) passes now{on}: "
                  f"remove it from {known['file']}")


def shrink_summary(props: Sequence[Mapping[str, Any]], profile: str) -> str | None:
    """One line on the shrinking of the failed tests: how many, for how long, how many
    examples after their first counterexamples, and the profile's cap; None if none shrank."""
    shrunk = [p for p in props if p["status"] == "failed" and p.get("failed_after") is not None]
    if not shrunk:
        return None
    seconds = sum(float(p.get("shrink_seconds") or 0.0) for p in shrunk)
    examples = sum((p["examples"] or 0) - p["failed_after"] for p in shrunk)
    limit = shrink_limit(profile)
    one = len(shrunk) == 1
    cap = (f"at most {limit}{'' if one else ' each'}" if limit is not None
           else "not capped")
    return (f"shrinking: {len(shrunk)} failed test{'' if one else 's'} shrank for "
            f"{seconds:.1f} s ({examples} examples after {'its' if one else 'their'} first "
            f"counterexample{'' if one else 's'}; {cap} under profile {profile})")


def _print_summary(doc: dict[str, Any], report_dir: Path, stop: str | None,
                   suite_began: bool = True) -> None:
    props, claims = doc["summary"]["properties"], doc["summary"]["claims"]
    print(f"properties: {props['passed']} passed, {props['failed']} failed, "
          f"{props['expected']} expected, {props['skipped']} skipped; claims: "
          f"{claims['passed']} passed, {claims['failed']} failed, {claims['expected']} expected")
    shrinking = shrink_summary(doc["properties"], doc["run"]["profile"])
    if shrinking is not None:
        print(shrinking)
    _print_known(doc["known_failures"], doc["summary"]["known_failures"])
    for backend in doc["backends"]:
        if backend["status"] != "nothing checked":
            continue
        ran = any(p["backend"] == backend["name"] for p in doc["properties"])
        if stop and not suite_began:
            print(f"{backend['name']}: nothing checked: interrupted before any property ran")
        elif stop and not ran:
            print(f"{backend['name']}: nothing checked: interrupted before any of its "
                  "property tests finished")
        else:
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
