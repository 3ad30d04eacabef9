"""Timings as ratios: every candidate is timed interleaved with its baseline, in one run.

Why: resverify's benchmarks run on shared, loaded machines where an absolute time means
little (another process can halve the speed for a second). A ratio of two timings taken
alternately, round after round, with the median of each kept, cancels most of that:
both sides see the same load. Every figure ``tools/bench.py`` prints is
such a ratio; the absolute medians are printed beside it for orientation only.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Timing", "calibrate", "interleaved"]


@dataclass(frozen=True)
class Timing:
    """Median seconds per call of each named candidate, over ``rounds`` interleaved rounds."""

    seconds: dict[str, float]
    rounds: int

    def ratio(self, slow: str, fast: str) -> float:
        """How many times faster ``fast`` is than ``slow`` (``slow / fast``)."""
        return self.seconds[slow] / max(self.seconds[fast], 1e-12)


def calibrate(fn: Callable[[], object], target: float) -> int:
    """How many calls of ``fn`` take about ``target`` seconds (at least 1)."""
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    return max(1, int(target / once))


def per_call(fn: Callable[[], object], calls: int) -> float:
    """Seconds per call of ``fn``, over ``calls`` calls in a row."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def interleaved(candidates: Mapping[str, Callable[[], object]], rounds: int = 5,
                target: float = 0.02) -> Timing:
    """Time each candidate ``rounds`` times, alternating A, B, A, B, …; medians per call.

    Each candidate is warmed up and calibrated once to about ``target`` seconds per round.
    """
    numbers = {name: calibrate(fn, target) for name, fn in candidates.items()}
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for _ in range(numbers[name]):
                fn()
            samples[name].append((time.perf_counter() - start) / numbers[name])
    return Timing({name: statistics.median(s) for name, s in samples.items()}, rounds)


@dataclass(frozen=True)
class Row:
    """One line of the bench table: ``candidate`` against ``baseline``, timed in one run.

    ``ratio`` is ``baseline / candidate`` (how many times faster the candidate is) when
    ``unit`` is ``"x faster"``, and ``candidate / baseline`` (what the candidate costs in
    baseline times) when it is ``"x baseline"``; ``met`` is None when the row has no
    target or was skipped, with ``note`` saying why.
    """

    section: str
    case: str
    baseline: str
    candidate: str
    baseline_s: float | None
    candidate_s: float | None
    ratio: float | None
    target: str = ""
    met: bool | None = None
    note: str = ""
    unit: str = "x faster"


def skipped(section: str, case: str, reason: str) -> Row:
    """A row that could not be measured here, with the reason."""
    return Row(section, case, "-", "-", None, None, None, met=None, note=f"skipped: {reason}")
