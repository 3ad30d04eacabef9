"""Forward values and gradients against the exact specification (properties 1 and 9).

Generated programs use only the ops the backend claims; add and mul are also checked
alone, broadcasting in every way NumPy allows, with random cotangents, so that a gradient
summed over the wrong axes shows.

Two inputs the general strategies reach only by chance get a property of their own, each
written when a mutant of the catalog (``tests/mutants/``) survived the rest of the suite:

* relu's gradient near zero, where engines put thresholds and guards
  (``ReluGradThreshold``): the general strategies draw elements from 2^-10 up to 8, so a
  relu whose derivative is wrong only for tiny positive inputs (a ``x > eps`` guard) meets
  such an input by chance only; here every element of x lies within a few powers of two of
  zero, of either sign, zero included.
* stacks whose blocks all use one branch family (``SharedTanhBuffer``): an engine that pools
  buffers by shape, caches per op, or keeps one saved activation per op type is right with
  a single block of each kind and wrong as soon as two same-shaped blocks of one family
  share it; the general strategy mixes families, so here every block of the stack uses one
  elementwise family the backend claims, 2 to 5 blocks deep.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties import floors, pinned
from resverify.properties.cases import Case
from resverify.properties.laws_oracle import check_finite_differences, check_matches_spec
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.profiles import share
from resverify.properties.strategies import (
    ELEMENTWISE_FAMILIES,
    FAMILIES,
    SMOOTH_FAMILIES,
    broadcast_cases,
    near_zero_relu_cases,
    one_family_stacks,
    relu_block,
    residual_cases,
    tanh_stack,
)
from resverify.spec.ir import DTYPES

DTYPE = pytest.mark.parametrize("dtype", DTYPES)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.families(*FAMILIES)
@share(len(FAMILIES))
@pytest.mark.reaches(*floors.ORACLE)
@given(case=residual_cases())
@example(case=pinned.S06)
@example(case=pinned.S07)
@example(case=pinned.S10)
@example(case=pinned.S11_PLAIN)
@example(case=pinned.S11_RESIDUAL)
@example(case=pinned.S17)
@example(case=pinned.S17_AT_ZERO)
def test_forward_and_gradients_match_spec_within_budget(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_matches_spec(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.SMOOTH_DIFFERENCES)
@given(case=residual_cases(SMOOTH_FAMILIES, max_depth=2),
       picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=3))
@example(case=pinned.S06, picks=[0, 1, 2, 3, 4, 5])
def test_gradient_matches_central_differences(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case, picks: list[int]) -> None:
    request = prop.request(case, dtype)
    cells = [(name, i) for name, v in request.inputs.items() for i in range(v.size)]
    if cells:
        check_finite_differences(backend, request, [cells[p % len(cells)] for p in picks])


@DTYPE
@pytest.mark.needs("add")
@given(case=broadcast_cases("add"))
@example(case=pinned.ALONG_ROWS["add"])
def test_add_broadcasts_and_sums_gradients_over_broadcast_axes(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_matches_spec(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("mul")
@given(case=broadcast_cases("mul"))
@example(case=pinned.ALONG_ROWS["mul"])
def test_mul_broadcasts_and_sums_gradients_over_broadcast_axes(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_matches_spec(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale", "relu")
@given(case=near_zero_relu_cases())
@example(case=relu_block(np.array([0.0, 2.0**-10, -(2.0**-10), 2.0**-6]), Fraction(1),
                         np.array([1.0, 1.0, 1.0, 1.0])))  # relu'(0) = 0, relu'(2^-10) = 1
def test_relu_gradient_is_exact_near_zero(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_matches_spec(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.families(*ELEMENTWISE_FAMILIES)
@share(len(ELEMENTWISE_FAMILIES))
@pytest.mark.reaches(*floors.STACKS)
@given(case=one_family_stacks())
@example(case=tanh_stack(np.array([0.5, -1.0, 0.25]), [Fraction(1, 2), Fraction(1, 2)]))
def test_stack_of_one_branch_family_matches_spec(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_matches_spec(backend, prop.request(case, dtype))
