"""The failing element a failure message names, for the report's failure card.

A saved vector holds the request, not the backend's answer, so the card reads the backend's
value, the expected value, ``|diff|`` and the budget from the suite's own one-line message
(:class:`resverify.properties.assertions.Context` writes it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from resverify.properties.assertions import num
from resverify.spec.compare import Cell

__all__ = ["FailedElement", "failed_element"]


@dataclass(frozen=True)
class FailedElement:
    """The first failing element a failure message names, as the message prints it: the
    element, the backend's value, the expected value (its side named when it is not the
    spec), ``|diff|`` and the budget. What the report's failure card shows inline."""

    element: str
    backend: str
    expected: str
    diff: str
    budget: str


_NUMBER = r"[^\s,]+"
_ELEMENT = re.compile(
    rf"(?P<element>[^\n:]*?\]): backend [^\n]* = (?P<backend>{_NUMBER}), "
    rf"(?P<side>[^\n=]+?) = (?P<expected>{_NUMBER})"
    rf"(?:, \|diff\| = (?P<diff>\S+) > budget (?P<budget>\S+)"
    rf"|, \|diff\| > tolerance (?P<tolerance>\S+)"
    rf"| \(must be equal, budget (?P<zero>0)\))")
"""The element messages of :class:`resverify.properties.assertions.Context` (``within``
and ``equal``) and of the central-difference check."""


def failed_element(message: str | None) -> FailedElement | None:
    """The element a failure message names first, or None when it names none.

    The vector holds the request, not the backend's answer, so the backend's value comes
    from the message; where the message prints no ``|diff|`` (an equality, a tolerance)
    it is computed by the rule of :attr:`resverify.spec.compare.Cell.abs_diff`.

    >>> failed_element("output[0]: backend b = nan, spec = 1/2, |diff| = nan > budget 0.25")
    FailedElement(element='output[0]', backend='nan', expected='1/2', diff='nan', budget='0.25')
    """
    found = _ELEMENT.search(message or "")
    if found is None:
        return None
    side, expected = found["side"], found["expected"]
    budget = found["budget"] or found["tolerance"] or found["zero"]
    diff = found["diff"] or _diff(found["backend"], expected)
    shown = expected if side == "spec" else f"{expected} ({side})"
    return FailedElement(found["element"].strip(), found["backend"], shown, diff, budget)


def _diff(actual: str, expected: str) -> str:
    """``|actual - expected|`` of two printed numbers ('' when one does not parse)."""
    try:
        cell = Cell((), float(actual), Fraction(expected), 0.0, False)
    except (ValueError, ZeroDivisionError):
        return ""
    return num(cell.abs_diff)
