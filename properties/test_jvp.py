"""Forward mode: the output tangent ``J·t`` against the exact spec, its duality with the
gradients, and the reverse-mode laws mirrored for tangents (:mod:`laws_jvp`), the
hygiene law among them: a forward-mode run leaves the inputs, the cotangent and the input
tangents it was given untouched.

Every test here is marked ``jvp``: the plugin skips it, in the backend's own words
("mode jvp not claimed"), on a backend that does not claim forward mode, and the report
shows it in the matrix's jvp group. The duality runs in the default suite like every
property here: one forward-mode answer gives the tangent and the gradients it is checked on.
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
from resverify.properties.laws_jvp import (
    check_alpha_zero_tangent_is_input_tangent,
    check_duality,
    check_shared_operand_tangent,
    check_tangent_is_linear,
    check_tangent_matches_spec,
    linearity_factors,
)
from resverify.properties.laws_structure import check_inputs_unchanged
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.profiles import share
from resverify.properties.strategies import (
    FAMILIES,
    drawn_range,
    dyadic_arrays,
    norm_block_case,
    norm_stack_cases,
    residual_cases,
    shared_cases,
    with_tangents,
    zero_alphas,
)
from resverify.spec.ir import DTYPES

pytestmark = pytest.mark.jvp
DTYPE = pytest.mark.parametrize("dtype", DTYPES)
NORMED = pytest.mark.needs("layer_norm", "rms_norm", "residual_add", "scale")

# the seed fixtures with tangents: w non-symmetric and t_x not an eigenvector of it, so a
# tangent pushed through wᵀ instead of w shows; relu once on each side of 0, once at 0
S06_T = pinned.S06.with_tangents(x=np.array([1.0, -2.0]),
                                 w=np.array([[0.25, 0.0], [0.0, 1.0]]))
S17_T = pinned.S17.with_tangents(x=np.array([1.0, -1.5]))
S17_AT_ZERO_T = pinned.S17_AT_ZERO.with_tangents(x=np.array([1.0, 1.0]))
# a pre-norm and a post-norm block, the tangent not parallel to x, so the norm's centring
# and its projection off the output both matter
_W = np.array([[0.5, -1.0, 0.25], [1.0, 0.5, -0.5], [-0.25, 0.75, 1.0]])
_X, _T = np.array([1.0, -2.0, 3.5]), np.array([0.5, 1.0, -0.25])
PRE_NORM_T = norm_block_case("pre", "layer_norm", _X, _W, Fraction(1, 2)).with_tangents(
    x=_T, w=_W / 2)
POST_NORM_T = norm_block_case("post", "rms_norm", _X, _W, Fraction(-3, 4),
                              Fraction(1, 16)).with_tangents(x=_T, w=np.eye(3) / 4)
S11_T = pinned.S11_RESIDUAL.with_tangents(
    **{k: np.full(v.shape, 0.5) for k, v in pinned.S11_RESIDUAL.values.items()})


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.families(*FAMILIES)
@share(len(FAMILIES))
@pytest.mark.reaches(*floors.TANGENT)
@given(case=with_tangents(residual_cases()))
@example(case=S06_T)
@example(case=S17_T)
@example(case=S17_AT_ZERO_T)
@example(case=S11_T)
def test_tangent_matches_spec_within_budget(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_tangent_matches_spec(backend, prop.request(case, dtype))


@DTYPE
@NORMED
@given(case=with_tangents(norm_stack_cases()))
@example(case=PRE_NORM_T)
@example(case=POST_NORM_T)
def test_norm_stack_tangent_matches_spec_within_budget(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_tangent_matches_spec(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.FORWARD)
@given(case=with_tangents(residual_cases()))
@example(case=S06_T)
@example(case=S17_T)
def test_tangent_and_gradients_satisfy_duality(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_duality(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.FORWARD)
@given(case=with_tangents(residual_cases()))
@example(case=S17_T)
def test_tangent_is_linear_in_the_input_tangents(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    factors = linearity_factors(dtype, drawn_range().extremes)
    check_tangent_is_linear(backend, prop.request(case, dtype), factors)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(case=with_tangents(residual_cases(projections=False, allow_sum=False).map(zero_alphas)))
@example(case=zero_alphas(S17_T))
def test_alpha_zero_passes_the_input_tangent_unchanged(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_alpha_zero_tangent_is_input_tangent(backend, prop.request(case, dtype))


def _with_dyadic_tangent(shared: tuple[Case, int]) -> st.SearchStrategy[tuple[Case, int]]:
    case, uses = shared
    shape = case.values["x"].shape
    return dyadic_arrays(shape).map(lambda t: (case.with_tangents(x=t), uses))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(shared=shared_cases().flatmap(_with_dyadic_tangent))
@example(shared=(pinned.S10.with_tangents(x=np.array([0.5, 3.0])), 2))
def test_shared_operand_tangent_is_k_times_the_input_tangent(
        backend: Backend, dtype: str, prop: PropertyRun, shared: tuple[Case, int]) -> None:
    case, uses = shared
    check_shared_operand_tangent(backend, prop.request(case, dtype), uses)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@pytest.mark.reaches(*floors.FORWARD)
@given(case=with_tangents(residual_cases()))
@example(case=S06_T)
def test_forward_mode_leaves_inputs_and_tangents_unchanged(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_inputs_unchanged(backend, prop.request(case, dtype))
