"""The one comparison: is a backend's value within its error budget of the exact value?

The property suite (``Context.within``), the budget object (``Budget.misses``) and
``resverify replay`` all call :func:`within`, so a vector the suite accepted replays as
accepted and one it rejected replays as rejected. The rule, element by element, for a
backend value ``actual`` (a float), the exact value ``exact`` (a rational: the spec never
produces NaN or infinities) and a ``bound`` (a float; budgets are >= 0, rounded up):

============================  ==============================================================
bound                         actual is within when
============================  ==============================================================
``+inf``                      always, NaN and ±inf included: the error analysis gives no
                              bound there because the dtype may overflow, and overflowed
                              arithmetic legitimately yields ±inf and NaN (``inf - inf``,
                              ``0 · inf``)
finite                        actual is finite and ``|actual - exact| <= bound``, compared
                              exactly in rationals; NaN and ±inf are never within
NaN (or ``-inf``)             never: such a bound bounds nothing, so no value is accepted
                              on its evidence (:func:`resverify.spec.budget.error_budget` never
                              produces one; a hand-made budget that does fails, not crashes)
============================  ==============================================================

Signed zeros: ``-0.0`` and ``+0.0`` are both the rational 0; the sign of a zero is not
judged here (structural laws that care about it say so themselves).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np

from resverify.spec.errors import BadResult

__all__ = ["Cell", "cells", "decimal"]

INF = float("inf")


def within(actual: float, exact: Fraction, bound: float) -> bool:
    """True when ``actual`` is within ``bound`` of ``exact`` (the rule in the module docstring).

    >>> within(-0.0, Fraction(0), 0.0), within(float("nan"), Fraction(1), float("inf"))
    (True, True)
    """
    if bound == INF:
        return True
    if not (math.isfinite(bound) and math.isfinite(actual)):
        return False
    return abs(Fraction(actual) - exact) <= Fraction(bound)


@dataclass(frozen=True)
class Cell:
    """One element compared: where, the three numbers, and the verdict of :func:`within`."""

    index: tuple[int, ...]
    actual: float
    exact: Fraction
    bound: float
    ok: bool

    @property
    def diff(self) -> Fraction | None:
        """``|actual - exact|``, exactly; None when ``actual`` is NaN or infinite."""
        return abs(Fraction(self.actual) - self.exact) if math.isfinite(self.actual) else None

    @property
    def abs_diff(self) -> Fraction | float:
        """``|actual - exact|`` as printed everywhere (the suite's messages, ``resverify
        replay``, the report): exactly when ``actual`` is finite, else what IEEE arithmetic
        gives, ``nan`` for NaN (``|NaN - x|`` is NaN) and ``inf`` for ±inf.

        >>> Cell((), float("nan"), Fraction(1), 0.5, False).abs_diff
        nan
        """
        return self.diff if self.diff is not None else abs(self.actual)


def cells(actual: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> Iterator[Cell]:
    """Every element of ``actual`` against ``exact`` (same shape) and ``bound`` (broadcast).

    ``exact`` holds rationals (Fractions, ints or finite floats, converted exactly).
    """
    actual = np.asarray(actual)
    exact = np.asarray(exact, dtype=object)
    if actual.shape != exact.shape:
        raise BadResult(f"shapes differ: actual {list(actual.shape)}, exact {list(exact.shape)}")
    limits = np.broadcast_to(np.asarray(bound, dtype=np.float64), actual.shape)
    flat = zip(np.ndindex(*actual.shape), actual.reshape(-1).tolist(),
               exact.reshape(-1).tolist(), limits.reshape(-1).tolist(), strict=True)
    for index, value, want, limit in flat:
        value, want = float(value), Fraction(want)
        yield Cell(index, value, want, limit, within(value, want, limit))


def decimal(value: Fraction | float, digits: int = 17) -> str:
    """A number as decimal text, even beyond the float64 range (no OverflowError).

    >>> decimal(Fraction(1, 4)), decimal(Fraction(10) ** 400, 3)
    ('0.25', '1.0e+400')
    """
    try:
        return repr(float(value))
    except OverflowError:
        exact = Fraction(value)
        with mpmath.workdps(digits + 3):
            return str(mpmath.nstr(mpmath.mpf(exact.numerator) / exact.denominator, digits))
