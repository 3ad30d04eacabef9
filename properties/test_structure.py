"""Shape rejection, shared operands, zero branches and α (properties 2 to 5).

A refused merge states five laws, one test each, all over the same drawn unequal pairs and
the same pinned ones: the state law comes first in this file, so that on a backend shared
by the whole run it meets the first refusal of this module, and the rest follow.

The refusal itself has a second property over its hardest cases, last in this file: shape
pairs of equal size. ``residual_add`` accepts exactly equal shapes; a pair with the same
number of elements, ``[2, 3]`` and ``[3, 2]`` or ``[6]`` and ``[2, 3]``, is the one an engine
can silently accept by reshaping or transposing the branch, and the general mismatch
strategy draws such a pair only by chance: there every pair is one (a permutation of the
axes, or another factorization of the same size). Written when the mutant catalog's
``TransposingMerge`` (``tests/mutants/``) survived the rest of the suite.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given

from resverify.impl.backend import Backend
from resverify.properties import floors, pinned
from resverify.properties.cases import Case
from resverify.properties.laws_depth import check_output_affine_in_alpha
from resverify.properties.laws_structure import (
    check_add_accepts_what_the_merge_refuses,
    check_alpha_zero_is_identity,
    check_mismatch_names_both_shapes,
    check_null_space_branch_keeps_gradient,
    check_refusal_leaves_inputs_unchanged,
    check_refusal_leaves_state_unchanged,
    check_refuses_mismatch,
    check_shared_operand_gradient,
    check_zero_branch,
)
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import (
    alphas,
    equal_size_mismatch_cases,
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


MISMATCHES = [
    ((2, 2), (2,)),  # S02: broadcasts, yet the merge refuses it
    ((2,), (2, 2)),
    ((), (1,)),
    ((0, 2), (2,)),
    ((2,), (3,)),
]
"""The pinned unequal pairs every law of a refused merge is checked on first."""


def pinned_mismatches(test: Callable[..., None]) -> Callable[..., None]:
    """``test`` with one explicit example per pair of :data:`MISMATCHES`, in that order."""
    for left, right in reversed(MISMATCHES):
        test = example(case=mismatch_case(left, right))(test)
    return test


@DTYPE
@pytest.mark.needs("residual_add")
@given(case=mismatch_cases())
@pinned_mismatches
def test_refusal_leaves_the_backend_state_unchanged(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_refusal_leaves_state_unchanged(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add")
@given(case=mismatch_cases())
@pinned_mismatches
def test_residual_add_rejects_every_shape_mismatch(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_refuses_mismatch(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add")
@given(case=mismatch_cases())
@pinned_mismatches
def test_shape_mismatch_names_both_shapes_in_order(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_mismatch_names_both_shapes(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add")
@given(case=mismatch_cases())
@pinned_mismatches
def test_refused_merge_leaves_its_inputs_untouched(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_refusal_leaves_inputs_unchanged(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "add")
@given(case=mismatch_cases())
@pinned_mismatches
def test_add_accepts_every_broadcastable_pair_residual_add_refuses(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_add_accepts_what_the_merge_refuses(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.SHARED)
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
@pytest.mark.reaches(*floors.RESIDUAL)
@given(case=residual_cases(), a=alphas())
@example(case=pinned.S17, a=Fraction(1, 2))
def test_output_and_gradients_are_affine_in_alpha(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case, a: Fraction) -> None:
    prop.request(case, dtype)
    check_output_affine_in_alpha(backend, case, dtype, a)


@DTYPE
@pytest.mark.needs("residual_add")
@given(case=equal_size_mismatch_cases())
@example(case=mismatch_case((2, 3), (3, 2)))  # a transposed branch
@example(case=mismatch_case((2, 3), (6,)))  # a flattened branch
@example(case=mismatch_case((3,), (1, 3)))  # an added axis, which add would broadcast
@example(case=mismatch_case((1, 3), (3,)))  # a lost axis, which broadcasts into the identity
def test_residual_add_rejects_equal_size_shape_pairs(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_refuses_mismatch(backend, prop.request(case, dtype))
