"""One comparison: the suite, the budget object and replay judge an element the same way.

The table below is the rule of :func:`spec.compare.within`, one named case a row; every
consumer (``Context.within``, ``Budget.misses``, ``resverify replay``) must follow it.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties.assertions import Context, PropertyFailure
from reports.cmd_replay import compare_array
from spec.budget import Budget
from spec.compare import within
from spec.exact import ExactResult
from spec.fixtures import linear_block_request

INF, NAN = float("inf"), float("nan")
F = Fraction
TINY = 5e-324

# name: (actual, exact, bound, within?)
TABLE: dict[str, tuple[float, Fraction, float, bool]] = {
    "equal": (0.5, F(1, 2), 0.0, True),
    "inside the bound": (0.5, F(1, 2) + F(1, 2**60), 2.0**-60, True),
    "on the bound": (0.5, F(1, 2) + F(1, 2**60), 2.0**-60, True),
    "just beyond the bound": (0.5, F(1, 2) + F(1, 2**60) + F(1, 2**200), 2.0**-60, False),
    "exact value between floats, bound 0": (1 / 3, F(1, 3), 0.0, False),
    "negative zero equals zero": (-0.0, F(0), 0.0, True),
    "positive zero equals zero": (0.0, F(0), 0.0, True),
    "negative zero against a subnormal, bound one subnormal": (-0.0, F(TINY), TINY, True),
    "negative zero against a subnormal, bound 0": (-0.0, F(TINY), 0.0, False),
    "NaN, finite bound": (NAN, F(1), 1e300, False),
    "inf, finite bound": (INF, F(1), 1e300, False),
    "-inf, finite bound": (-INF, F(-1), 1e300, False),
    "NaN, infinite bound (overflow allowed)": (NAN, F(1), INF, True),
    "inf, infinite bound": (INF, F(10) ** 400, INF, True),
    "-inf, infinite bound": (-INF, F(1), INF, True),
    "finite, infinite bound": (-1e308, F(10) ** 400, INF, True),
    "NaN bound, exact answer": (1.0, F(1), NAN, False),
    "NaN bound, NaN answer": (NAN, F(1), NAN, False),
    "-inf bound": (1.0, F(1), -INF, False),
    "exact value beyond float64, finite bound": (1e308, F(10) ** 400, 1e308, False),
}


@pytest.mark.parametrize("case", sorted(TABLE))
def test_within_follows_the_table(case: str) -> None:
    actual, exact, bound, expected = TABLE[case]
    assert within(actual, exact, bound) is expected, (
        f"within({actual!r}, {exact}, {bound!r}) is {not expected}, table says {expected} "
        f"[{case}]")


def suite_accepts(actual: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> bool:
    try:
        Context("b", linear_block_request()).within("output", actual, exact, bound)
    except PropertyFailure:
        return False
    return True


def budget_accepts(actual: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> bool:
    budget = Budget(output=bound, grads={})
    return not budget.misses(ExactResult(exact, {}, F(0)), actual, {})


def replay_accepts(actual: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> bool:
    return all(row.ok for row in compare_array("output", actual, exact, bound))


CONSUMERS = {"suite": suite_accepts, "budget": budget_accepts, "replay": replay_accepts}


def _one(case: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    actual, exact, bound, expected = TABLE[case]
    return (np.array([actual]), np.array([exact], dtype=object), np.array([bound]), expected)


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("case", sorted(TABLE))
def test_suite_budget_and_replay_follow_the_table(consumer: str, case: str) -> None:
    actual, exact, bound, expected = _one(case)
    verdict = CONSUMERS[consumer](actual, exact, bound)
    assert verdict is expected, (
        f"{consumer} {'accepts' if verdict else 'rejects'} actual={actual[0]!r} "
        f"exact={exact[0]} bound={bound[0]!r}, table says within={expected} [{case}]")
