"""The budget's rounding helpers (:mod:`resverify.spec.rounding`): the unit roundoffs,
``up``, ``gamma``, ``inflate``, ``Ctx`` (``alpha``, ``done``), ``product`` and ``dot``.

All but the first test pin what mutation testing found unpinned (docs/strength.md, "The
mutation score of resverify's own code"): each kills mutants of ``tools/mutation.py`` that
survived the rest of the tests, a changed behaviour no test noticed (how far α may be off,
how a bound is rounded up, where a budget turns infinite, the second-order terms of
``product`` and ``dot``, ``dot``'s length taken from the right axis). Exact values are
compared exactly.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from resverify.spec.rounding import (
    TINY,
    UNIT_ROUNDOFF,
    Bound,
    Ctx,
    dot,
    gamma,
    inflate,
    product,
    up,
)

F = Fraction


# --- the unit roundoffs and gamma ---


def test_unit_roundoffs_and_gamma() -> None:
    expected = {"float64": F(1, 2**53), "float32": F(1, 2**24),
                "float16": F(1, 2**11), "bfloat16": F(1, 2**8)}
    assert dict(UNIT_ROUNDOFF) == expected
    assert F(gamma(8, "float32")) >= F(8, 2**24) / (1 - F(8, 2**24))
    assert gamma(0, "float64") == 0 and gamma(1 << 11, "float16") == np.inf


# --- pinned by mutation testing (docs/strength.md) ---


def _next_down(value: float) -> float:
    return math.nextafter(value, -math.inf)


@pytest.mark.parametrize("value", [Fraction(1, 4), Fraction(1, 3), Fraction(-1, 3),
                                   Fraction(2**53 + 1), Fraction(1, 2**1080), Fraction(0)])
def test_up_is_the_smallest_float_at_or_above(value: Fraction) -> None:
    got = up(value)
    assert Fraction(got) >= value > Fraction(_next_down(got)), (value, got)


def test_up_is_inf_beyond_the_float64_range() -> None:
    assert up(Fraction(2) ** 1024) == math.inf  # budgets are never negative
    assert up(Fraction(2) ** 1024 - Fraction(2) ** 970) == math.inf  # rounds past the largest


@pytest.mark.parametrize(("n", "dtype"), [(1, "float64"), (3, "float32"), (100, "float16"),
                                          (7, "bfloat16"), (2047, "float16")])
def test_gamma_is_n_u_over_one_minus_n_u_rounded_up(n: int, dtype: str) -> None:
    nu = n * UNIT_ROUNDOFF[dtype]
    assert gamma(n, dtype) == up(nu / (1 - nu)), (n, dtype, gamma(n, dtype))


@pytest.mark.parametrize(("n", "dtype"), [(2048, "float16"), (256, "bfloat16"), (-1, "float64")])
def test_gamma_outside_its_range(n: int, dtype: str) -> None:
    expected = 0.0 if n < 0 else math.inf
    assert gamma(n, dtype) == expected, (n, dtype, gamma(n, dtype))


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_alpha_bound_is_one_rounding_of_alpha(dtype: str) -> None:
    c = Ctx(dtype, float(UNIT_ROUNDOFF[dtype]), float(TINY[dtype]))
    alpha = Fraction(-1, 3)
    rel = UNIT_ROUNDOFF[dtype] + (0 if dtype == "float64" else Fraction(1, 2**53))
    assert c.alpha(alpha) == (up(Fraction(1, 3)), up(rel / 3 + TINY[dtype])), c.alpha(alpha)
    assert c.alpha(Fraction(2) ** 1100) == (math.inf, math.inf)


def test_inflate_rounds_up_by_a_relative_and_an_absolute_margin() -> None:
    x = np.array([0.0, 1.0, 2.0**-1074, np.nan, 3.0])
    got = inflate(x, 10)
    grown = x[:3] * (1 + 74 * 2.0**-50) + 74 * 2.0**-1074
    assert np.array_equal(got[:3], np.nextafter(grown, np.inf)), got
    assert got[3] == np.inf and got[4] > 3.0 * (1 + 74 * 2.0**-50), got


def test_done_is_infinite_from_the_largest_value() -> None:
    """Below the largest finite value nothing overflows (the bound stands, half of it
    included); from it on, by magnitude or by error, the bound is inf."""
    c = Ctx("float32", float(UNIT_ROUNDOFF["float32"]), float(TINY["float32"]))
    largest = float(np.finfo(np.float32).max)
    below = c.done(np.array([largest * (1 - 2.0**-20)]), np.array([0.0]))
    half = c.done(np.array([largest / 2]), np.array([0.0]))
    at = c.done(np.array([largest]), np.array([0.0]))
    by_error = c.done(np.array([1.0]), np.array([largest]))
    assert np.isfinite(below.err[0]) and np.isfinite(half.err[0]), (below, half)
    assert at.err[0] == by_error.err[0] == np.inf, (at, by_error)


def _ctx(dtype: str) -> Ctx:
    return Ctx(dtype, float(UNIT_ROUNDOFF[dtype]), float(TINY[dtype]))


def test_a_product_of_two_inexact_values_is_charged_its_second_order_error() -> None:
    """x = 2 known to ±1/2 and y = 3 known to ±1/4: the computed (2.5)(3.25) = 8.125 is
    2.125 from 6 = 1/2·3·... exactly x·e_y + y·e_x + e_x·e_y. Without the e_x·e_y term the
    bound (2 plus roundings) would not cover an error the inputs allow."""
    x = Bound(np.array([2.0]), np.array([0.5]))
    y = Bound(np.array([3.0]), np.array([0.25]))
    actual_error = Fraction(5, 2) * Fraction(13, 4) - 6
    _, err = product(_ctx("float64"), x, y)
    assert Fraction(float(err[0])) >= actual_error == Fraction(17, 8), (err, actual_error)


def test_a_dot_of_two_inexact_vectors_is_charged_its_second_order_error() -> None:
    x = Bound(np.array([[2.0, 2.0]]), np.array([[0.5, 0.5]]))
    w = Bound(np.array([[3.0], [3.0]]), np.array([[0.25], [0.25]]))
    actual_error = 2 * (Fraction(5, 2) * Fraction(13, 4) - 6)
    err = dot(_ctx("float64"), x, w).err
    assert Fraction(float(err[0, 0])) >= actual_error == Fraction(17, 4), (err, actual_error)


def test_a_dot_is_charged_gamma_of_its_length_not_of_its_row_count() -> None:
    """One row of 1000 values 1.5 summed left to right in float16: past 1024 the spacing
    is 1 and each tie rounds to even, so the sum drifts by hundreds, far beyond gamma_1 (the
    row count) of the sum but within gamma_1000 of it."""
    n, value = 1000, np.float16(1.5)
    total = np.float16(0)
    for _ in range(n):
        total = np.float16(total + value)
    actual_error = abs(Fraction(float(total)) - n * Fraction(float(value)))
    x = Bound(np.full((1, n), float(value)), np.zeros((1, n)))
    w = Bound(np.ones((n, 1)), np.zeros((n, 1)))
    err = dot(_ctx("float16"), x, w).err
    assert actual_error > Fraction(float(gamma(1, "float16") * n * float(value))), actual_error
    assert Fraction(float(err[0, 0])) >= actual_error, (err, actual_error)
