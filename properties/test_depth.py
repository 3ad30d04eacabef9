"""Depth laws for F = a·x: (1+a)^L, a^L, the unrolled sum, exact cancellation (property 6)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties import floors
from resverify.properties.cases import Case
from resverify.properties.laws_depth import (
    check_cancellation_is_exact,
    check_plain_depth_law,
    check_residual_depth_law,
    check_unrolled_sum,
    scale_chain,
)
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import alphas, depth_factors, scalar_branch_inputs
from resverify.spec.ir import DTYPES
from resverify.spec.request import Request

DTYPE = pytest.mark.parametrize("dtype", DTYPES)
Inputs = tuple[np.ndarray, np.ndarray]
SCALAR_ONE = (np.array(1.0), np.array(1.0))  # S30: x = 1, ȳ = 1


def _chain(prop: PropertyRun, data: Inputs, factors: list[Fraction], residual: bool,
           dtype: str) -> Request:
    x, cot = data
    case = Case(scale_chain(x.shape, factors, residual), {"x": x}, cot)
    return prop.request(case, dtype)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.UNROLLED)
@given(data=scalar_branch_inputs(), a=alphas(-2, 1), depth=st.integers(1, 8))
@example(data=SCALAR_ONE, a=Fraction(-1, 2), depth=3)  # S25: 0.125
@example(data=SCALAR_ONE, a=Fraction(1), depth=3)  # S25: 8
@example(data=SCALAR_ONE, a=Fraction(1, 10), depth=3)  # S30: 1.331, inexact in floats
def test_residual_stack_gradient_is_one_plus_a_to_the_depth(
        backend: Backend, dtype: str, prop: PropertyRun, data: Inputs, a: Fraction,
        depth: int) -> None:
    check_residual_depth_law(backend, _chain(prop, data, [a] * depth, True, dtype), a, depth)


@DTYPE
@pytest.mark.needs("scale")
@given(data=scalar_branch_inputs(), a=alphas(-2, 2), depth=st.integers(1, 8))
@example(data=SCALAR_ONE, a=Fraction(-1, 4), depth=4)  # S11 plain: (-0.25)^4
def test_plain_stack_gradient_is_a_to_the_depth(
        backend: Backend, dtype: str, prop: PropertyRun, data: Inputs, a: Fraction,
        depth: int) -> None:
    check_plain_depth_law(backend, _chain(prop, data, [a] * depth, False, dtype), a, depth)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(data=scalar_branch_inputs(), factors=depth_factors())
@example(data=SCALAR_ONE, factors=[Fraction(-1, 4)] * 4)  # S11 residual stack
def test_stack_output_is_input_plus_sum_of_branches(
        backend: Backend, dtype: str, prop: PropertyRun, data: Inputs,
        factors: list[Fraction]) -> None:
    requests = [_chain(prop, data, factors[:depth], True, dtype)
                for depth in range(len(factors) + 1)]
    check_unrolled_sum(backend, requests, factors)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(data=scalar_branch_inputs(), factors=depth_factors(6), where=st.integers(0, 6))
@example(data=SCALAR_ONE, factors=[Fraction(1)], where=0)
def test_block_with_a_minus_one_cancels_gradient_exactly(
        backend: Backend, dtype: str, prop: PropertyRun, data: Inputs,
        factors: list[Fraction], where: int) -> None:
    factors = list(factors)
    factors.insert(where % (len(factors) + 1), Fraction(-1))
    check_cancellation_is_exact(backend, _chain(prop, data, factors, True, dtype))
