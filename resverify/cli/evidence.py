"""What a check run has found so far, and the one function that makes the report of it.

``resverify check`` must leave a valid report whatever happens: after a failure, a crash,
an interrupt, and while the suite still runs (report.json follows a long run). So the
report is never assembled along the way: :func:`document` is a pure function of the
run's records (the :class:`~resverify.cli.request.Request`, the claims, the suite's
records, the known failures' verdicts, the timings), called on a timer while the suite
runs and once at the end. It starts no process, reads no clock and writes no file; the
same records give the same document, which is what lets a test check it with records
made by hand.

What a verdict is (a backend's status, the run's) is decided in :mod:`resverify.reports`,
behind :func:`~resverify.reports.json_report.build_report`; this module only says what
the run's records are: which backend each property ran on, whether the run is complete,
and what the report must warn about how the suite ended.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resverify.cli.claim_source import ClaimRun
from resverify.cli.request import Request
from resverify.cli.runner import SuiteRun
from resverify.reports import json_report

__all__ = []

PYTEST_LOG = "pytest.log"  # pytest's own output, in the report folder
_PYTEST_ENDINGS = {2: "the property suite was interrupted", 3: "pytest hit an internal error",
                   4: "pytest refused its arguments"}


@dataclass
class Evidence:
    """What the run found so far: the claims, the suite, the known failures' verdicts,
    how long each part took, and when the run began (``time.monotonic``)."""

    claims: ClaimRun = field(default_factory=ClaimRun)
    suite: SuiteRun = field(default_factory=SuiteRun)
    known: list[dict[str, Any]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def complete(self) -> bool:
        """The suite reached its end, no signal stopped it and the claim checker worked."""
        return self.suite.finished and not self.suite.interrupted and not self.claims.broken


def document(request: Request, found: Evidence, *, elapsed: float, base: Path,
             notes: Sequence[str] = (), plots: Mapping[str, Any] | None = None
             ) -> dict[str, Any]:
    """The report of what ``found`` holds: ``elapsed`` seconds since the run began,
    vector paths under ``base`` (the working directory) written relative to it, ``notes``
    as further warnings, ``plots`` the plots' series and gaps once they are drawn."""
    names = [b.name for b in request.backends]
    return json_report.build_report(
        run={"seed": request.seed, "profile": request.profile, "backends": names,
             "pytest_args": list(request.pytest_args),
             "pytest_exit_code": found.suite.exitstatus},
        backends=request.backends, claims=found.claims.claims,
        properties=_properties(request, found.suite, base), complete=found.complete(),
        warnings=[*found.claims.warnings, *suite_warnings(found.suite), *notes],
        timings=dict(found.timings, total_seconds=round(elapsed, 3)),
        known=_known(request, found, base), plots=plots)


def _properties(request: Request, suite: SuiteRun, base: Path) -> list[dict[str, Any]]:
    """The finished tests as report entries, each under its backend's own name."""
    default = request.backends[0].name if len(request.named) == 1 else None
    props = [json_report.property_entry(r, default, base) for r in suite.results]
    for prop in props:  # a suite may record the backend as typed on the command line
        if prop["backend"] in request.named:
            prop["backend"] = request.named[prop["backend"]].name
    return props


def _known(request: Request, found: Evidence, base: Path) -> dict[str, Any]:
    """The known-failures file, shown relative to ``base`` when it is under it, and the
    verdict on each of its entries."""
    shown = request.known_file
    if shown is not None and shown.resolve().is_relative_to(base.resolve()):
        shown = shown.resolve().relative_to(base.resolve())
    return {"file": None if shown is None else str(shown), "entries": found.known}


def stop_message(suite: SuiteRun) -> str | None:
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


def suite_warnings(suite: SuiteRun) -> list[str]:
    """What the report must say about how the suite ended (nothing while it runs)."""
    stop = stop_message(suite)
    if stop is not None:
        return [stop, *(f"not counted, it was running when the run stopped: {nodeid}"
                        for nodeid in suite.running)]
    if suite.returncode is None:
        return []
    if suite.exitstatus is None:
        return [f"pytest stopped before the end of its session (exit code {suite.returncode}); "
                f"see {PYTEST_LOG}"]
    return _ending_warnings(suite.exitstatus, suite)


def _ending_warnings(exitstatus: int, suite: SuiteRun) -> list[str]:
    """What the report must say about a session that pytest ended with ``exitstatus``."""
    if exitstatus == 5:
        return ["pytest collected no property tests"]
    if exitstatus not in (0, 1):
        what = _PYTEST_ENDINGS.get(exitstatus, "pytest ended early")
        return [f"{what} (exit code {exitstatus}); see {PYTEST_LOG}"]
    if suite.collected is not None and len(suite.results) < suite.collected:
        return [f"only {len(suite.results)} of {suite.collected} property tests finished"]
    return []
