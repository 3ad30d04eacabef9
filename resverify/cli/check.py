"""``resverify check``: the main job. Claims, then the property suite, then the reports.

The claim checker runs in this process; the property suite runs under pytest in a child
process (:mod:`resverify.cli.runner`), so pytest's own options keep working (``-n``,
``--junitxml``, and anything after ``--``); the plots are drawn by a process of their own
meanwhile (:mod:`resverify.cli.plots_run`). The three report files are written atomically,
and they are written whatever happens: a failed, crashed or interrupted run (Ctrl-C once
or twice, SIGTERM) still leaves a valid report of what finished, with
``"complete": false``.

The request goes one way. The command line is checked once into a
:class:`~resverify.cli.request.Request`; each part of the run adds its records to one
:class:`~resverify.cli.evidence.Evidence` (the claims, then the known failures, judged
before the suite so that the report says ``expected`` or ``fixed`` from its first write,
then the suite's records as they come); and the report is always
:func:`resverify.cli.evidence.document` of the two, a pure function written out by this
module: every few seconds while the suite runs (so a long run can be followed), and at
the end. The one loop that watches the pytest child is here, in :func:`_run_suite`; no
thread is needed.

A verdict needs evidence: a backend on which no example ran is ``unjudged`` (nothing
checked), never ``pass``, and the run exits 1 unless ``--allow-nothing-checked`` is given.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from resverify.cli.claim_source import ClaimRun, run_claims
from resverify.cli.evidence import PYTEST_LOG, Evidence, document, stop_message
from resverify.cli.plots_run import WAIT_SECONDS, Drawn, PlotProcess
from resverify.cli.request import Request, read_request
from resverify.cli.runner import (
    DEFAULT_TARGET,
    Progress,
    SuiteChild,
    SuiteRun,
    pytest_command,
    signal_name,
)
from resverify.cli.stop_signals import StopSignals
from resverify.cli.summary import print_summary
from resverify.impl.registry import BUILTIN
from resverify.properties import known_failures
from resverify.reports import json_report
from resverify.spec import UsageError

NAME = "check"
HELP = "check backends against the claims and the property suite, write the report"
DEFAULT_REPORT_DIR = Path("resverify-report")
DEFAULT_TIMEOUT_SECONDS = 600.0
_REWRITE_SECONDS = 2.0  # report.json follows the suite at most this often
_POLL_SECONDS = 0.1  # how often the pytest child's records are read
_REPORT_LOG = "report-log.jsonl"
_SAID_LIMIT = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", action="append", dest="backends", metavar="NAME",
                        help="backend to check, repeatable: a built-in name "
                        f"({', '.join(BUILTIN)}; default numpy), module:attr for an adapter "
                        "of your own, or cmd:COMMAND for an engine in another process")
    parser.add_argument("--profile", default="ci",
                        help="Hypothesis profile: dev, ci (default; seeded, so reproducible), "
                             "thorough, extremes, generated (ci without pinned examples)")
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
                        "stays 'unjudged'); by default that exits 1")
    parser.add_argument("--known-failures", type=Path, metavar="FILE",
                        help="known failures, each pinned to a saved vector (TOML, or JSON "
                        "when FILE ends in .json): a listed failure that reproduces is "
                        "'expected', a listed one that passes now is 'fixed' and fails the "
                        f"run (default: ./{known_failures.DEFAULT_FILE} when it exists)")
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS",
                        help="extra pytest arguments after --, e.g. -- -k shape")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"seconds must be finite and >= 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    request = read_request(args)
    plots = PlotProcess(request.seed, request.named, request.report_dir, request.plots)
    plots.start()
    progress, found = Progress(), Evidence()
    with StopSignals() as signals:
        try:
            _gather(request, found, progress)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM outside the suite
            found.suite.interrupted = signal_name(exc)
        except Exception:
            _write_reports(request, found, plots, signals)  # leave a report of what
            raise  # finished, then let the bug show
        _usage_error_from_pytest(request, found.suite, plots)
        doc = _write_reports(request, found, plots, signals)
    progress.close()
    print_summary(doc, request.report_dir, stop_message(found.suite), found.suite.began)
    allowed = ("pass", "unjudged") if request.allow_nothing_checked else ("pass",)
    return 0 if doc["status"] in allowed else 1


def _gather(request: Request, found: Evidence, progress: Progress) -> None:
    """Each part of the run, in order, adding its records to ``found``."""
    if request.claims:
        _run_claims(request, found, progress)
    else:
        found.claims = ClaimRun(warnings=["claims were not checked (--no-claims)"])
    _check_known(request, found, progress)
    _run_suite(request, found, progress)


def _run_claims(request: Request, found: Evidence, progress: Progress) -> None:
    began = time.monotonic()
    progress.show(f"checking claims on {', '.join(request.named)}")

    def counted(shown: str, k: int, total: int, claim: str) -> None:
        progress.show(f"checking claims on {shown} [{k}/{total}] {claim}")

    found.claims = run_claims({name: b.name for name, b in request.named.items()},
                              progress=counted)
    found.timings["claims_seconds"] = round(time.monotonic() - began, 3)
    _write_json(request, found)


def _check_known(request: Request, found: Evidence, progress: Progress) -> None:
    """Judge each known failure's vector on its backend (see known_failures)."""
    if not request.known:
        return
    began = time.monotonic()
    progress.show(f"checking {len(request.known)} known failures")
    found.known = json_report.known_entries(
        known_failures.judge_entries(request.known, request.named), Path.cwd())
    found.timings["known_failures_seconds"] = round(time.monotonic() - began, 3)


def _run_suite(request: Request, found: Evidence, progress: Progress) -> None:
    """The property suite in its pytest child, watched from here: its records go into
    ``found`` as they come, and report.json is rewritten when tests finished, at most
    every ``_REWRITE_SECONDS``. An interrupt ends the watch (see SuiteChild)."""
    folder = request.report_dir
    status = Path(tempfile.mkdtemp(prefix="resverify-status-"))
    began = time.monotonic()
    written = (began, 0)  # when report.json was written, and how many results it held
    try:
        with SuiteChild(_pytest_command(request, status), report_log=folder / _REPORT_LOG,
                        log=folder / PYTEST_LOG, progress=progress, suite=found.suite,
                        status_dir=status, vector_dir=folder / "vectors") as child:
            while child.poll():
                count, now = len(found.suite.results), time.monotonic()
                if count != written[1] and now - written[0] >= _REWRITE_SECONDS:
                    _write_json(request, found)
                    written = (now, count)
                time.sleep(_POLL_SECONDS)
    finally:
        found.timings["properties_seconds"] = round(time.monotonic() - began, 3)
        shutil.rmtree(status, ignore_errors=True)


def _pytest_command(request: Request, status: Path) -> list[str]:
    folder = request.report_dir
    return pytest_command(report_log=folder / _REPORT_LOG, backends=list(request.named),
                          profile=request.profile, seed=request.seed,
                          vector_dir=folder / "vectors",
                          target=[request.suite] if request.suite else list(DEFAULT_TARGET),
                          numprocesses=request.numprocesses, junitxml=request.junitxml,
                          timeout=request.timeout, status_dir=status,
                          extra=request.pytest_args)


def _usage_error_from_pytest(request: Request, suite: SuiteRun, plots: PlotProcess) -> None:
    """pytest refusing its arguments (a usage error before its session began) is a usage
    error of ours; its message is all that pytest printed, on one line."""
    if not suite.refused:
        return
    plots.stop()
    (request.report_dir / "report.json").unlink(missing_ok=True)  # a refused run has no report
    log = request.report_dir / PYTEST_LOG
    said = " ".join(log.read_text(errors="replace").split()) if log.exists() else ""
    raise UsageError(f"pytest refused the arguments: {said[:_SAID_LIMIT] or 'no message'}")


def _write_json(request: Request, found: Evidence, drawn: Drawn | None = None
                ) -> dict[str, Any]:
    """report.json of what ``found`` holds now (with the plots' notes and summary once
    they are drawn)."""
    doc = document(request, found, elapsed=time.monotonic() - found.started, base=Path.cwd(),
                   notes=() if drawn is None else drawn.notes,
                   plots=None if drawn is None else drawn.summary)
    json_report.write_report(request.report_dir / "report.json", doc)
    return doc


def _write_reports(request: Request, found: Evidence, plots: PlotProcess,
                   signals: StopSignals) -> dict[str, Any]:
    """report.json first (cheapest, most important), then report.md, then report.html;
    no signal cuts them short (only the wait for the plots can be interrupted)."""
    with signals.held():
        doc = _write_json(request, found)
    try:
        drawn = plots.result(0.0 if found.suite.interrupted else WAIT_SECONDS)
    except KeyboardInterrupt:
        plots.stop()
        drawn = Drawn(notes=("plots were not drawn: interrupted while they were drawn",))
    with signals.held():
        if drawn.notes or drawn.summary:
            doc = _write_json(request, found, drawn)
        _write_rest(request.report_dir, doc, drawn)
    return doc


def _write_rest(report_dir: Path, doc: dict[str, Any], drawn: Drawn) -> None:
    """report.md (also the CI job summary), the plots and report.html, by the one writer
    of every report (report.json is written as the run goes)."""
    from resverify.reports.writer import PLOTS_DIR, write_files

    write_files(doc, json_path=None, md_path=report_dir / "report.md",
                html_path=report_dir / "report.html", plots_dir=report_dir / PLOTS_DIR,
                plots=drawn.pngs, step_summary=True)
