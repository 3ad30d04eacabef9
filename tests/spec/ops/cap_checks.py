"""What the size-cap tests of the norms share: the largest ``|error| / bound`` of a torch run
measured exactly, and the rows that push a norm's computed ``1/sqrt`` to ``1/sqrt(ε)``.

Each cap's own test module gives the rule, torch's run and the exact value; these measure
and draw the same way for each.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

FLOOR = Fraction(1, 2**170)
"""Added to every miss, so an element whose bound is 0 can never pass unseen (its ratio is
a division by zero, not 0)."""


def worst_ratio(actual: np.ndarray, true: Any, bound: np.ndarray,
                floor: Fraction = FLOOR) -> tuple[Fraction, tuple[int, int]]:
    """The largest ``(|actual - true| + floor) / bound`` over a 2-D run, exactly, and where
    (``true[i][j]`` Fractions, as a list of rows or an object array)."""
    used, where = Fraction(0), (0, 0)
    for i, j in np.ndindex(*actual.shape):
        row: Sequence[Fraction] = true[i]
        miss = abs(Fraction(float(actual[i, j])) - row[j]) + floor
        ratio = miss / Fraction(float(bound[i, j]))
        if ratio > used:
            used, where = ratio, (i, j)
    return used, where


def spike(x: np.ndarray, scale: float) -> np.ndarray:
    """One element per row at ``scale`` against its largest value's sign, the rest 0: the
    computed ``1/sqrt`` near ``1/sqrt(ε)`` where ``scale² / n`` is small against ε."""
    out = np.zeros_like(x)
    for i, j in enumerate(np.argmax(np.abs(x), axis=-1)):
        out[i, j] = -np.sign(x[i, j]) * scale
    return out
