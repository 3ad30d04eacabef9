"""Tests that pin what mutation testing found unpinned in the spec's comparison and budget.

Each test here kills mutants of ``tools/mutation.py`` that survived the rest of the tests:
a changed behaviour no test noticed. Exact values are compared exactly.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from resverify.spec.budget import error_budget
from resverify.spec.compare import cells, decimal
from resverify.spec.errors import BadResult, InvalidRequest
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request
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


@pytest.mark.parametrize(("value", "digits", "text"), [
    (0.1, 17, "0.1"),  # within float range: repr, the shortest round-trip text
    (Fraction(-7, 2), 17, "-3.5"),
    (Fraction(1, 3) * 10**400, 17, "3.3333333333333333e+399"),  # 17 digits by default
    (-Fraction(10**400, 7), 5, "-1.4286e+399"),
    (Fraction(2**1100) + 1, 20, "1.3582985290493858493e+331"),  # every digit asked is right
])
def test_decimal_writes_numbers_beyond_float64_to_the_digits_asked(
        value: Fraction | float, digits: int, text: str) -> None:
    got = decimal(value) if digits == 17 else decimal(value, digits)
    assert got == text, f"decimal({value!r}, {digits}) = {got!r}, expected {text!r}"


def test_cells_refuses_unequal_shapes_naming_both() -> None:
    with pytest.raises(BadResult) as caught:
        list(cells(np.zeros((2, 3)), np.zeros(6, dtype=object), np.zeros(6)))
    assert str(caught.value) == "shapes differ: actual [2, 3], exact [6]", caught.value


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


def _pair_request(cotangent: tuple[float, float] = (0.5, 0.25)) -> Request:
    """``y = residual_add(x, x)`` with an unused input u: x gets two gradient parts."""
    program = Program((Input("x", (2,)), Input("u", (3,))),
                      (Node("y", "residual_add", ("x", "x")),), "y")
    return Request(program, {"x": np.array([1.0, -3.0]), "u": np.array([1.0, 2.0, 4.0])},
                   "float64", np.array(cotangent))


def test_an_unused_input_has_a_zero_budget_of_its_shape() -> None:
    budget = error_budget(_pair_request())
    assert np.array_equal(budget.grads["u"], np.zeros(3)), budget.grads["u"]


def test_misses_names_a_wrong_shape_and_every_missing_gradient() -> None:
    request = _pair_request()
    exact, budget = evaluate(request), error_budget(request)
    found = budget.misses(exact, np.zeros(3), {})
    assert [(m.where, m.index, m.expected, m.bound) for m in found] == [
        ("output.shape[3]", (), Fraction(0), 0.0), ("grad[x] missing", (), Fraction(0), 0.0),
        ("grad[u] missing", (), Fraction(0), 0.0)], found
    assert all(math.isnan(m.actual) for m in found), found


def test_misses_reports_each_element_beyond_its_budget() -> None:
    request = _pair_request()
    exact, budget = evaluate(request), error_budget(request)
    assert exact.output is not None and exact.grads is not None
    grads = {"x": np.array([1.0, 0.5]), "u": np.zeros(3)}
    found = budget.misses(exact, np.array([2.0, -6.5]), grads)
    assert [(m.where, m.index, m.actual, m.expected) for m in found] == [
        ("output", (1,), -6.5, Fraction(-6))], found
    assert found[0].bound == budget.output[1], found


def test_misses_needs_an_exact_output_and_gradients() -> None:
    request = _pair_request()
    exact = evaluate(request)
    half = dataclasses.replace(exact, grads=None)
    with pytest.raises(InvalidRequest, match="an exact result with an output and gradients"):
        error_budget(request).misses(half, np.zeros(2), {})


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


def test_two_gradient_parts_are_charged_gamma_1() -> None:
    c = Ctx("float64", float(UNIT_ROUNDOFF["float64"]), float(TINY["float64"]))
    request = _pair_request()
    assert request.cotangent is not None
    cot = np.abs(request.cotangent)
    expected = c.done(2 * cot, gamma(1, "float64") * (2 * cot), 2).err
    final = np.nextafter(expected * (1 + 2.0**-50), np.inf)  # the last addition, rounded up
    got = error_budget(request).grads["x"]
    assert np.array_equal(got, final), (got, final)


def test_a_narrower_dtype_charges_one_rounding_of_the_cotangent() -> None:
    """Judged in float32, the float64 cotangent is first rounded to float32: one rounding
    of ``|ȳ|`` plus a subnormal (all there is where ȳ = 0), then the two parts of x's
    gradient are summed."""
    c = Ctx("float32", float(UNIT_ROUNDOFF["float32"]), float(TINY["float32"]))
    request = _pair_request((0.5, 0.0))
    assert request.cotangent is not None
    cot = np.abs(request.cotangent)
    leaf = c.done(cot, c.u * cot + c.tiny)
    total = c.done(2 * leaf.mag, 2 * leaf.err + gamma(1, "float32") * (2 * leaf.hat), 2).err
    final = np.nextafter(total * (1 + 2.0**-50), np.inf)
    got = error_budget(request, "float32").grads["x"]
    assert np.array_equal(got, final), (got, final)


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


def test_a_node_that_feeds_nothing_does_not_stop_the_backward_budget() -> None:
    """The last node in order is dead (nothing reads it): the backward budget skips it and
    still charges x's gradient, which is 1 + 1/2 per element, not zero."""
    program = Program((Input("x", (2,)),), (
        Node("f", "scale", ("x",), alpha=Fraction(1, 2)),
        Node("y", "residual_add", ("x", "f")),
        Node("dead", "scale", ("x",), alpha=Fraction(3))), "y")
    request = Request(program, {"x": np.array([0.75, 3.0])}, "float32",
                      np.array([1.0, -1.0]))
    got = error_budget(request).grads["x"]
    assert np.all(got > 0), f"error_budget(...).grads['x'] = {got}, expected > 0 everywhere"
