"""Shape rejection, shared operands, zero branches and α (properties 2 to 5)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given

from resverify.impl.backend import Backend
from resverify.properties import pinned
from resverify.properties.cases import Case
from resverify.properties.laws_depth import check_output_affine_in_alpha
from resverify.properties.laws_structure import (
    check_alpha_zero_is_identity,
    check_null_space_branch_keeps_gradient,
    check_rejects_mismatch,
    check_shared_operand_gradient,
    check_zero_branch,
)
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import (
    alphas,
    mismatch_case,
    mismatch_cases,
    null_space_cases,
    residual_cases,
    shared_cases,
    zero_alphas,
    zero_branch_cases,
)
from resverify.spec.ir import DTYPES

DTYPE = pytest.mark.parametrize("dtype", DTYPES)


@DTYPE
@pytest.mark.needs("residual_add", "add")
@given(case=mismatch_cases())
@example(case=mismatch_case((2, 2), (2,)))  # S02: broadcasts, yet the merge refuses it
@example(case=mismatch_case((2,), (2, 2)))
@example(case=mismatch_case((), (1,)))
@example(case=mismatch_case((0, 2), (2,)))
@example(case=mismatch_case((2,), (3,)))
def test_residual_add_rejects_every_shape_mismatch(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_rejects_mismatch(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(shared=shared_cases())
@example(shared=(pinned.S10, 2))
def test_shared_operand_receives_k_times_the_cotangent(
        backend: Backend, dtype: str, prop: PropertyRun, shared: tuple[Case, int]) -> None:
    case, uses = shared
    check_shared_operand_gradient(backend, prop.request(case, dtype), uses)


@DTYPE
@pytest.mark.needs("residual_add", "linear")
@given(case=zero_branch_cases())
@example(case=pinned.S07)
def test_zero_branch_is_identity_and_still_learns(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_zero_branch(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "linear")
@given(case=null_space_cases())
@example(case=pinned.S06.with_values(w=np.array([[1.0, 1.0], [2.0, 2.0]])))  # S08: F(x)=0, J_F != 0
def test_branch_zero_at_one_input_still_passes_gradient(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_null_space_branch_keeps_gradient(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(case=residual_cases(projections=False, allow_sum=False).map(zero_alphas))
@example(case=zero_alphas(pinned.S17))
def test_alpha_zero_is_identity_and_branch_gets_no_gradient(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_alpha_zero_is_identity(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(case=residual_cases(), a=alphas())
@example(case=pinned.S17, a=Fraction(1, 2))
def test_output_and_gradients_are_affine_in_alpha(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case, a: Fraction) -> None:
    prop.request(case, dtype)
    check_output_affine_in_alpha(backend, case, dtype, a)
