"""What a backend did in one property test besides answering: its calls and its warnings.

Two decisions rest on it.

* **A warning from a backend is a note, never a verdict.** Whatever warning a backend
  raises while it runs a request (NumPy's "Mean of empty slice" on a zero-width row, a
  library's deprecation or performance advice), the laws judge the values it returned,
  and the warning is recorded with the test (``backend_warnings`` in report.json, with how
  many calls raised it). The rule holds under every pytest configuration:
  :func:`resverify.properties.assertions.send` hears the warnings itself, so pytest's
  ``filterwarnings = error`` or ``-W error`` in a project's configuration cannot turn them
  into failures, and a configuration that hides warnings cannot hide them from the report.
* **A difference between two runs of one request replays with as many runs as it took.**
  A backend that is wrong one call in ten shows it only after several calls; the number
  of calls the test had made when the difference first showed is kept
  (:meth:`Traffic.first_difference`) and goes into the printed replay command as
  ``--runs N``.

The plugin opens one :class:`Traffic` per property test (:func:`watching`); outside one,
:func:`current` gives a throwaway record, so the laws work the same when called alone.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = []

WARNING_LIMIT = 300
"""The characters of a warning's message kept in the record."""


@dataclass
class Traffic:
    """The calls of one test to its backend, and the warnings they raised (text: count)."""

    calls: int = 0
    warnings: Counter[str] = field(default_factory=Counter)
    differed_at: int | None = None

    def first_difference(self) -> int:
        """The calls made when two runs of one request first differed in this test (kept
        from the first time it is asked; a difference needs at least two calls)."""
        if self.differed_at is None:
            self.differed_at = max(self.calls, 2)
        return self.differed_at

    def heard(self) -> list[str]:
        """Each distinct warning with how many calls raised it, most frequent first."""
        return [f"{text} ({count} call{'s' if count > 1 else ''})"
                for text, count in sorted(self.warnings.items(), key=lambda kv: (-kv[1], kv[0]))]


_CURRENT: ContextVar[Traffic | None] = ContextVar("resverify_traffic", default=None)


def current() -> Traffic:
    """The traffic of the test that is running, or a fresh record outside one."""
    return _CURRENT.get() or Traffic()


@contextmanager
def watching() -> Iterator[Traffic]:
    """Within the block, every call through ``send`` is counted in the Traffic yielded."""
    traffic = Traffic()
    token = _CURRENT.set(traffic)
    try:
        yield traffic
    finally:
        _CURRENT.reset(token)


@contextmanager
def hearing(traffic: Traffic) -> Iterator[None]:
    """One backend call: counted, and every warning it raises recorded in ``traffic``
    instead of going to pytest's filters (see the module docstring)."""
    traffic.calls += 1
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for each in {f"{w.category.__name__}: {w.message}"[:WARNING_LIMIT]
                         for w in heard}:
                traffic.warnings[each] += 1
