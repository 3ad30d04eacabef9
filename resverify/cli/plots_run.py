"""The plots of a check run, drawn by a process of their own while the claims and the suite run.

Each plot has one series per checked backend, and asking a backend can crash, exit or
hang; so each backend's series comes from a process of its own
(:mod:`resverify.reports.plot_child`, one after the other, each with a time limit), and a
backend that fails leaves its series as gaps with the reason, never the report. Those
processes are started and watched by one more, the drawing process (``python -m
resverify.cli.plots_run``), which then computes the curves that ask no backend and draws
the PNGs. ``resverify check`` only starts the drawing process (:class:`PlotProcess`) before
the claims and collects what it left after the suite.

Why a process and not a thread of the check process: the claims run in the check process
meanwhile, matplotlib is not thread-safe, and a thread left inside matplotlib's C++ code
when Python exits aborts the process. A process can be stopped at any moment (its group,
with :func:`resverify.cli.runner.stop_group`), needs no lock, and keeps matplotlib out of
the check process; while it is stopped it stops the backend's process it was watching.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resverify.cli.runner import stop_group
from resverify.impl import Backend

__all__ = []

PLOT_LOG = "plots.log"  # the output of the plot processes, in the report folder
WAIT_SECONDS = 300.0  # after the suite: a backend that hangs in a plot cannot hang the report
START_SECONDS = 60.0  # a plot process's imports (torch, jax) before its backend's time
STOP_SECONDS = 15.0  # for the drawing process to stop the backend's process it watches
_RESULT = "drawn.json"  # what the drawing process leaves beside its PNGs


@dataclass(frozen=True)
class Drawn:
    """What the plots leave for the report: the PNGs by plot name, the warnings, and
    report.json's ``plots`` entry (None when they were not drawn)."""

    pngs: Mapping[str, bytes] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    summary: Mapping[str, Any] | None = None


class PlotProcess:
    """The drawing process of one check run, for the backends ``named`` (as typed on the
    command line, resolved); its output goes to ``folder``/plots.log."""

    def __init__(self, seed: int, named: Mapping[str, Backend], folder: Path,
                 enabled: bool = True) -> None:
        self.seed = seed
        self.backends = [[typed, str(backend.name)] for typed, backend in named.items()]
        self.log = folder / PLOT_LOG
        self.enabled = enabled
        self._out: Path | None = None
        self._child: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.unlink(missing_ok=True)
        if not self.enabled:
            return
        self._out = Path(tempfile.mkdtemp(prefix="resverify-plots-"))
        cmd = [sys.executable, "-m", "resverify.cli.plots_run", "--seed", str(self.seed),
               "--backends", json.dumps(self.backends), "--out", str(self._out)]
        with open(self.log, "ab") as handle:
            self._child = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, process_group=0)

    def result(self, wait: float | None) -> Drawn:
        """What the drawing process left, waiting at most ``wait`` seconds for it (None:
        until it ends); one that is not done by then is stopped."""
        if not self.enabled:
            return Drawn(notes=("plots were not drawn (--no-plots)",))
        if self._child is None:
            return Drawn(notes=("plots were not drawn: the run stopped before they were started",))
        try:
            self._child.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.stop()
            return Drawn(notes=("plots were not drawn: the run ended before they were ready",))
        try:
            return self._read(self._child.returncode)
        finally:
            self.stop()

    def stop(self) -> None:
        """End the drawing process (and the backend's process it watches), if it still
        runs, and remove what it left."""
        if self._child is not None:
            stop_group(self._child, grace_seconds=STOP_SECONDS)
        if self._out is not None:
            shutil.rmtree(self._out, ignore_errors=True)

    def _read(self, code: int) -> Drawn:
        assert self._out is not None
        try:
            said = json.loads((self._out / _RESULT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            said = None
        if code != 0 or not isinstance(said, dict):
            return Drawn(notes=(f"plots were not drawn: the drawing process ended with exit "
                                f"code {code} (see {PLOT_LOG})",))
        if said.get("error"):
            return Drawn(notes=(f"plots were not drawn: {said['error']}",))
        pngs = {name: (self._out / f"{name}.png").read_bytes() for name in said["pngs"]}
        return Drawn(pngs, tuple(gap_notes(said["summary"])), said["summary"])


def gap_notes(summary: Mapping[str, Any]) -> list[str]:
    """One warning per backend whose plot series have gaps: which plots, and the first
    reason."""
    gaps: dict[str, tuple[list[str], str]] = {}
    for plot, part in summary.items():
        for backend, reason in part["gaps"].items():
            gaps.setdefault(backend, ([], reason))[0].append(plot)
    return [f"plots: {backend} gave no data for part of {', '.join(plots)}: {reason}"
            for backend, (plots, reason) in gaps.items()]


# The drawing process.

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m resverify.cli.plots_run")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--backends", type=json.loads, required=True,
                        help="JSON list of [name as typed for check, the backend's name]")
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNGs")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _end_on_sigterm)
    try:
        said = _draw(args.seed, args.backends, args.out)
    except Exception as exc:  # plots are an extra: the report stands without them
        said = {"error": f"{type(exc).__name__}: {exc}"}
    partial = args.out / f"{_RESULT}.tmp"
    partial.write_text(json.dumps(said), encoding="utf-8")
    partial.replace(args.out / _RESULT)
    return 0


def _end_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM (the check process gives up on the plots) ends this process through its
    ``finally`` blocks, so the backend's process it watches is stopped too."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def _draw(seed: int, backends: Sequence[Sequence[str]], out: Path) -> dict[str, Any]:
    """Every plot with one series per backend: the PNGs in ``out``, and what
    :class:`PlotProcess` reads back."""
    from resverify.reports.plots import (
        SECONDS_PER_BACKEND,
        add_series,
        plot_data,
        plot_summary,
        render_plots,
    )

    limit = SECONDS_PER_BACKEND + START_SECONDS
    series = [(name, *_series(seed, typed, out / f"series-{i}.json", limit))
              for i, (typed, name) in enumerate(backends)]
    data = plot_data(seed, [])  # the exact and reference curves: they ask no backend
    for name, document, gap in series:
        add_series(data, name, document, gap)
    pngs = render_plots(seed, data=data)
    for name, png in pngs.items():
        (out / f"{name}.png").write_bytes(png)
    return {"pngs": list(pngs), "summary": plot_summary(data)}


def _series(seed: int, typed: str, out: Path, limit: float
            ) -> tuple[dict[str, Any] | None, str | None]:
    """One backend's series document from a process of its own, or None and why not."""
    cmd = [sys.executable, "-m", "resverify.reports.plot_child", "--seed", str(seed),
           "--backend", typed, "--out", str(out)]
    # its output goes where this process's goes (plots.log)
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, process_group=0)
    try:
        child.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        return None, f"its plot process ran past {limit:g} s"
    finally:
        stop_group(child)
    if child.returncode != 0 or not out.exists():
        return None, f"its plot process ended with exit code {child.returncode} (see {PLOT_LOG})"
    return json.loads(out.read_text(encoding="utf-8"))["plots"], None


if __name__ == "__main__":
    raise SystemExit(main())
