"""Determinism and hygiene: bitwise repeatability, untouched inputs, declared form (property 8).

Repeatability is asked of every request, refused ones included. Untouched inputs are
asked here of the valid requests: a refused merge that writes into its inputs is the law
``test_refused_merge_leaves_its_inputs_untouched`` of ``test_structure.py`` states, so
each of the two laws has a foil of its own.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties import floors, pinned
from resverify.properties.cases import Case
from resverify.properties.laws_structure import (
    check_bitwise_deterministic,
    check_declared_form,
    check_inputs_unchanged,
)
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import mismatch_cases, residual_cases
from resverify.spec.ir import DTYPES

DTYPE = pytest.mark.parametrize("dtype", DTYPES)
ANY_CASE = st.one_of(residual_cases(), mismatch_cases())


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.RESIDUAL)
@given(case=ANY_CASE)
@example(case=pinned.S11_RESIDUAL)  # S12
def test_same_request_gives_bitwise_identical_results(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_bitwise_deterministic(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.RESIDUAL)
@given(case=residual_cases())
@example(case=pinned.S06)
def test_backend_never_mutates_inputs(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_inputs_unchanged(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.RESIDUAL)
@given(case=residual_cases())
@example(case=pinned.S06)
def test_results_have_declared_shapes_and_dtype(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_declared_form(backend, prop.request(case, dtype))
