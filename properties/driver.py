"""The one driver of a Hypothesis law: examples counted, shrinking capped, the failure kept.

Why one module: an IR law runs under pytest (the plugin's ``prop`` fixture,
:class:`resverify.properties.plugin.PropertyRun`) and a block law runs from a function
(:func:`resverify.blocks.check.run_law`), yet both need the same three things around every
example Hypothesis runs: the count of examples run, the shrink cap of the profile
(:data:`resverify.properties.profiles.SHRINK_LIMITS`) and the failing example Hypothesis
raises at the end. :class:`ExampleRun` does them once; the plugin's run is one, and
:func:`drive` runs a block law's ``@given`` property under it, so a block law's record shows
the same example count and shrink cap as an IR law's.
"""

from __future__ import annotations

import functools
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Phase, is_hypothesis_test, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import HypothesisException

__all__ = ["ExampleRun", "drive"]

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # an object's address: not part of an example


def example_key(args: Any, kwargs: Any) -> str:
    """An example's arguments as text, every float of an array in full (two examples
    Hypothesis drew alike read alike; an object's address is left out)."""
    with np.printoptions(threshold=sys.maxsize, floatmode="unique"):
        return _ADDRESS.sub("", repr((args, sorted(kwargs.items()))))


@contextmanager
def around_each_example(test: Any, around: Callable[[Any, Any, Any], Any]) -> Iterator[bool]:
    """Within the block, each example of the Hypothesis test ``test`` runs as
    ``around(inner, args, kwargs)``, ``inner`` being the function Hypothesis calls once per
    example; yields False (and changes nothing) for a test that is not a Hypothesis test.

    Why this hook: the example count, the first counterexample and the shrink cap need code
    around every example, and Hypothesis has no other public way in. The ``prop`` fixture is
    set up once per test, not per example; ``settings`` caps examples but not shrinking (its
    ``phases`` can only leave shrinking out). ``test.hypothesis.inner_test`` is the one
    attribute Hypothesis hands plugins for this: its ``HypothesisHandle`` says downstream
    users may reassign it "to insert custom logic into the execution of each case"
    (pytest-trio and pytest-asyncio do), checked on Hypothesis 6.170.17. It is reassigned
    here only, and put back when the block ends.
    """
    handle = getattr(test, "hypothesis", None) if is_hypothesis_test(test) else None
    if handle is None:
        yield False
        return
    inner = handle.inner_test

    @functools.wraps(inner)
    def each(*args: Any, **kwargs: Any) -> Any:
        return around(inner, args, kwargs)

    handle.inner_test = each
    try:
        yield True
    finally:
        handle.inner_test = inner


class ExampleRun:
    """The examples of one run of a Hypothesis law, counted in one place.

    Every example the test runs passes through :meth:`counting` (:func:`around_each_example`):
    a law's body never counts its own. ``max_examples`` is the test's own setting, read from
    Hypothesis's ``settings()`` while an example runs (the given one until one has). There
    too the first counterexample is noticed: ``failed_after`` is the number of examples run
    up to and including it (None while none failed), every example after it is one
    Hypothesis runs to shrink it (``shrink_examples``, over ``shrink_seconds``), and
    ``shrink_limit`` caps those. The last failing example's arguments are kept with its
    exception (:meth:`failing_example`): Hypothesis runs the shrunk example last, so the
    exception it raises at the end is that example's.
    """

    failures: tuple[type[BaseException], ...] = (Exception,)
    """What an example raises when it is a counterexample (to count and shrink)."""

    def __init__(self, *, shrink_limit: int | None = None,
                 max_examples: int | None = None) -> None:
        self.shrink_limit, self.max_examples = shrink_limit, max_examples
        self.examples = 0
        self.failed_after: int | None = None
        self.shrink_seconds: float | None = None
        self._shrink_began = self._found_at = 0.0
        self._failing: set[str] = set()
        self._last: tuple[BaseException, Any, Any] | None = None

    @property
    def shrink_examples(self) -> int:
        """Examples run after the first counterexample (0 while none failed)."""
        return 0 if self.failed_after is None else self.examples - self.failed_after

    def failing_example(self, exc: BaseException) -> tuple[Any, Any] | None:
        """``(args, kwargs)`` of the example that raised ``exc``, when it is the last
        failing one; else None (not known)."""
        last = self._last
        return (last[1], last[2]) if last is not None and last[0] is exc else None

    def found(self, exc: BaseException) -> None:
        """Called with each counterexample's exception as it is raised (nothing here; the
        plugin leaves it for ``resverify check``'s status line)."""

    def _example(self, inner: Any, args: Any, kwargs: Any) -> Any:
        """Run one example of ``inner``, noting a counterexample; past the shrink cap, an
        example that is not one of the counterexamples already seen is rejected unrun, so
        Hypothesis stops shrinking and reports the smallest counterexample it has (it runs
        that one again, which runs, and fails, as before)."""
        if (self.failed_after is not None and self.shrink_limit is not None
                and self.shrink_examples >= self.shrink_limit
                and example_key(args, kwargs) not in self._failing):  # keyed only when
            reject()  # shrinking: a passing test never prints its examples
        self.max_examples = settings().max_examples  # the test's own, while it runs
        self.examples += 1
        try:
            return inner(*args, **kwargs)
        except HypothesisException:
            raise
        except self.failures as exc:  # a counterexample, to shrink
            self._failing.add(example_key(args, kwargs))
            self._last = (exc, args, kwargs)
            if self.failed_after is None:
                self.failed_after, self._shrink_began = self.examples, time.monotonic()
                self._found_at = time.time()
            self.found(exc)
            raise
        finally:
            if self.failed_after is not None:
                self.shrink_seconds = round(time.monotonic() - self._shrink_began, 3)

    @contextmanager
    def counting(self, test: Any) -> Iterator[None]:
        """Within the block, every example the Hypothesis test ``test`` runs is counted
        (:func:`around_each_example`); a plain test counts as one example."""
        with around_each_example(test, self._example) as wrapped:
            if not wrapped:
                self.examples += 1
            yield


def drawn(max_examples: int, shrink: bool = True) -> settings:
    """The settings of a law run outside pytest (a block law): ``max_examples`` examples,
    shrinking unless ``shrink`` is False, no deadline and no health check (nothing depends
    on machine speed), no example database (the same run for the same seed)."""
    phases = [Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if shrink else [])]
    return settings(max_examples=max_examples, deadline=None, database=None,
                    derandomize=False, phases=phases, suppress_health_check=list(HealthCheck))


def drive(test: Any, run: ExampleRun, *, seed: int, shrink: bool = True) -> None:
    """Run the ``@given`` law ``test`` under :func:`drawn` settings for ``run``'s
    ``max_examples`` and seeded by ``seed``, every example counted and its shrinking capped
    by ``run`` (:meth:`ExampleRun.counting`); a counterexample's exception propagates, its
    example known to :meth:`ExampleRun.failing_example`.

    >>> run = ExampleRun(shrink_limit=50, max_examples=25)  # doctest: +SKIP
    >>> drive(given(draws())(law), run, seed=0)  # doctest: +SKIP
    """
    __tracebackhide__ = True
    assert run.max_examples is not None, "drive needs the run's max_examples"
    seeded = hypothesis_seed(seed)(drawn(run.max_examples, shrink)(test))
    with run.counting(seeded):
        seeded()
