"""The forward-mode laws' own arithmetic: the exact inner products and the duality's bound,
the linearity factors, and the scaled tangents.

The duality's bound is pinned on a request whose float64 answer is exact (short dyadic
values: every product and sum is exact), so ⟨ȳ, J t⟩ = ⟨Jᵀȳ, t⟩ holds bit for bit on the
reference and a tangent moved by a known amount lands exactly just inside or just
outside the bound.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np
import pytest

from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties.assertions import PropertyFailure
from resverify.properties.laws_jvp import (
    check_duality,
    linearity_factors,
    pairing,
    scaled_tangents,
)
from resverify.properties.test_jvp import S06_T
from resverify.spec.budget import error_budget
from resverify.spec.ir import DTYPES
from resverify.spec.request import Request, Result, Value

INF, NAN = float("inf"), float("nan")


def test_pairing_sums_weights_times_values_exactly_with_the_budgets_as_slack() -> None:
    found = pairing([("a", np.array([0.5, -3.0]), np.array([0.1, 2.0]), np.array([1e-3, 0.25]))])
    assert found.total == Fraction(1, 2) * Fraction(0.1) - 6, found.total
    assert found.slack == Fraction(1, 2) * Fraction(1e-3) + 3 * Fraction(0.25), found.slack
    assert (found.unbounded, found.broken) == (None, None)


def test_pairing_skips_zero_weights_whatever_their_value_and_budget() -> None:
    found = pairing([("a", np.array([0.0, -0.0, 1.0]), np.array([NAN, INF, 2.0]),
                      np.array([INF, 0.0, 0.0]))])
    assert (found.total, found.slack, found.unbounded, found.broken) == (2, 0, None, None)


def test_pairing_names_an_unbounded_term_and_a_non_finite_value() -> None:
    found = pairing([("t", np.array([[1.0, 2.0]]), np.array([[1.0, NAN]]), np.array([INF, 1.0]))])
    assert found.unbounded == "t[0, 0]" and found.broken == "t[0, 1] = nan", vars(found)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linearity_factors_are_minus_one_always_and_two_only_where_the_range_is_wide(
        dtype: str) -> None:
    wide = dtype != "float16"
    assert linearity_factors(dtype, extremes=True) == (-1,)
    assert linearity_factors(dtype, extremes=False) == ((-1, 2, -2) if wide else (-1,))


def test_scaled_tangents_scale_every_tangent_exactly_and_keep_the_rest() -> None:
    request = S06_T.request("float16")
    scaled = scaled_tangents(request, Fraction(-2))
    assert scaled.tangents is not None and request.tangents is not None
    for name, tangent in request.tangents.items():
        assert scaled.tangents[name].dtype == tangent.dtype
        assert np.array_equal(scaled.tangents[name], -2 * tangent.astype(np.float64)), name
    assert scaled.program == request.program
    assert np.array_equal(scaled.cotangent, request.cotangent)


class MovesTangent(NumpyBackend):
    """The reference, with element 0 of the output tangent moved by ``delta``."""

    name = "moved-tangent"

    def __init__(self, delta: Fraction) -> None:
        self.delta = delta

    def run(self, request: Request) -> Result:
        value = super().run(request)
        assert isinstance(value, Value) and value.tangent is not None
        tangent = value.tangent.copy()
        tangent[0] = float(Fraction(tangent[0]) + self.delta)
        return dataclasses.replace(value, tangent=tangent)


def _duality_bound(request: Request) -> Fraction:
    budget = error_budget(request)
    assert budget.tangent is not None and request.tangents is not None
    left = pairing([("tangent", request.cotangent, np.zeros(2), budget.tangent)]).slack
    return left + pairing((n, request.tangents[n], np.zeros_like(request.tangents[n]),
                           budget.grads[n]) for n in request.inputs).slack


def test_duality_bound_is_the_budgets_weighted_by_the_cotangent_and_the_tangents() -> None:
    """ȳ = [1, 1] and J t = [-2, -4.5] exactly: moving tangent[0] up by k steps of 2**-52
    (exact floats just above -2) moves ⟨ȳ, J t⟩ by exactly k·2**-52."""
    request = S06_T.request("float64")
    bound = _duality_bound(request)
    steps = math.floor(bound * 2**52)
    assert 1 <= steps < 2**20, bound  # a few ulps: the budgets of an exact float64 answer
    check_duality(NumpyBackend(), request)
    check_duality(MovesTangent(Fraction(steps, 2**52)), request)
    moved = r"duality ⟨ȳ, J t⟩ − ⟨Jᵀȳ, t⟩: backend moved-tangent .* > bound"
    with pytest.raises(PropertyFailure, match=moved):
        check_duality(MovesTangent(Fraction(steps + 1, 2**52)), request)
