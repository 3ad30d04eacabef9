"""Forward values and gradients against the exact specification (properties 1 and 9).

Generated programs use only the ops the backend claims; add and mul are also checked
alone, broadcasting in every way NumPy allows, with random cotangents, so that a gradient
summed over the wrong axes shows.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties import pinned
from resverify.properties.cases import Case
from resverify.properties.laws_oracle import check_finite_differences, check_matches_spec
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import SMOOTH_FAMILIES, broadcast_cases, residual_cases
from resverify.spec.ir import DTYPES

DTYPE = pytest.mark.parametrize("dtype", DTYPES)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
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
