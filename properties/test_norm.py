"""Normalization in residual streams: pre-norm, post-norm, the norm's laws, projections.

Where the norm sits changes the recurrence (seed fact S29): a pre-norm stack with its
branches off is the identity, a post-norm stack is N applied once per block; width
changes need an explicit projection; against depth, a pre-norm stack's gradient keeps the
identity highway's share of ȳ while a post-norm stack's passes through every norm. Each
property here has a broken backend it catches
(tests/mutants/foils_norm.py, checked by tests/meta/test_meta_norm.py).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties import floors
from resverify.properties.cases import Case
from resverify.properties.laws_norm import (
    check_gradient_orthogonal_to_constants,
    check_norm_statistics,
    check_post_norm_gradient_passes_through_norms,
    check_post_norm_stream_stays_normalized,
    check_post_norm_zero_branch,
    check_pre_norm_gradient_highway,
    check_pre_norm_zero_branch_identity,
    check_projection_gradient_splits,
    check_scale_moves_into_eps,
    check_shift_invariance,
    check_width_change_refused,
    norm_depth_case,
)
from resverify.properties.laws_oracle import check_matches_spec
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import (
    alphas,
    dyadic_arrays,
    epsilons,
    norm_block_case,
    norm_cases,
    norm_stack_cases,
    projection_cases,
    shifted_norm_cases,
    single_norm_case,
    width_change_cases,
    zero_alphas,
)
from resverify.spec.ir import DTYPES

DTYPE = pytest.mark.parametrize("dtype", DTYPES)
NORMED = pytest.mark.needs("layer_norm", "rms_norm", "residual_add", "scale")

W = np.array([[0.5, -1.0, 0.25], [1.0, 0.5, -0.5], [-0.25, 0.75, 1.0]])
X = np.array([1.0, -2.0, 3.5])
ROWS = np.array([[1.0, -2.0, 3.5, 0.5], [3.0, 3.0, 3.0, 3.25]])  # the second row nearly constant
NEAR_NINE = np.array([9.01, 9.02, 9.015, 9.03])  # shifted by 1 exactly, squares round
LAYER_NORM_STACK = pytest.mark.needs("layer_norm", "linear", "scale", "residual_add")
DEEP = 4  # the deepest stack of the gradient-against-depth laws


@st.composite
def layer_norm_depth_cases(draw: Callable[[st.SearchStrategy[Any]], Any],
                           placement: str) -> list[Case]:
    """The layer_norm stacks of depth 1..L (L <= DEEP) over the same draws: x of shape
    (rows, d), one square weight and one α per block, ε, and a cotangent."""
    rows, width, depth = (draw(st.integers(1, 2)), draw(st.integers(2, 5)),
                          draw(st.integers(1, DEEP)))
    x, cot = (draw(dyadic_arrays((rows, width))) for _ in range(2))
    weights = [draw(dyadic_arrays((width, width), bits=3)) for _ in range(depth)]
    scales, eps = [draw(alphas()) for _ in range(depth)], draw(epsilons())
    return _depths(placement, x, weights, scales, eps, cot)


def _depths(placement: str, x: np.ndarray, weights: list[np.ndarray], scales: list[Fraction],
            eps: Fraction, cot: np.ndarray) -> list[Case]:
    return [norm_depth_case(placement, "layer_norm", x, weights, scales[:depth], eps, cot)
            for depth in range(1, len(scales) + 1)]


STACK_ROWS = np.array([[1.0, -2.0, 3.5], [0.5, 0.25, -1.0]])
STACK_COT = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]])


@DTYPE
@NORMED
@pytest.mark.reaches(*floors.NORM_STACKS)
@given(case=norm_stack_cases())
@example(case=norm_block_case("pre", "layer_norm", X, W, Fraction(1, 2), depth=2))
@example(case=norm_block_case("post", "rms_norm", X, W, Fraction(-3, 4), Fraction(1, 16)))
def test_norm_stacks_match_spec_within_budget(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    """Pre-norm and post-norm stacks: output and every gradient within budget."""
    check_matches_spec(backend, prop.request(case, dtype))


@DTYPE
@NORMED
@given(case=norm_stack_cases(placement="pre").map(zero_alphas))
@example(case=norm_block_case("pre", "layer_norm", X, W, Fraction(0), depth=3))
def test_pre_norm_zero_branch_stack_is_exact_identity(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_pre_norm_zero_branch_identity(backend, prop.request(case, dtype))


@DTYPE
@NORMED
@given(case=norm_stack_cases(placement="post").map(zero_alphas))
@example(case=norm_block_case("post", "layer_norm", X, W, Fraction(0), depth=2))
@example(case=norm_block_case("post", "rms_norm", X, W, Fraction(0), Fraction(1, 16)))
def test_post_norm_zero_branch_stack_is_the_normalization(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_post_norm_zero_branch(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("layer_norm", "rms_norm")
@given(case=norm_cases())
@example(case=single_norm_case("layer_norm", ROWS))
@example(case=single_norm_case("rms_norm", ROWS, Fraction(1, 16)))
def test_norm_output_has_mean_zero_and_mean_square_one_up_to_eps(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_norm_statistics(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("layer_norm")
@given(shifted=shifted_norm_cases())
@example(shifted=(single_norm_case("layer_norm", ROWS), Fraction(4)))
@example(shifted=(single_norm_case("layer_norm", NEAR_NINE), Fraction(1)))
def test_layer_norm_is_invariant_to_shifting_its_input(
        backend: Backend, dtype: str, prop: PropertyRun, shifted: tuple[Case, Fraction]) -> None:
    case, shift = shifted
    check_shift_invariance(backend, prop.request(case, dtype), shift)


@DTYPE
@pytest.mark.needs("layer_norm", "rms_norm")
@given(case=norm_cases(), power=st.integers(-3, 3).filter(bool))
@example(case=single_norm_case("layer_norm", ROWS, Fraction(1, 16)), power=2)
@example(case=single_norm_case("rms_norm", ROWS, Fraction(1, 16)), power=-2)
def test_scaling_the_input_moves_into_eps(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case, power: int) -> None:
    """``N_ε(2^p x) = N_{ε/4^p}(x)``: positive scaling is invariance with ε rescaled."""
    check_scale_moves_into_eps(backend, prop.request(case, dtype), power)


@DTYPE
@pytest.mark.needs("layer_norm")
@given(case=norm_cases(ops=("layer_norm",)))
@example(case=single_norm_case("layer_norm", ROWS))
def test_layer_norm_gradient_is_orthogonal_to_constants(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_gradient_orthogonal_to_constants(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "linear", "add")
@given(case=width_change_cases())
def test_residual_add_refuses_a_width_change_even_where_add_broadcasts(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_width_change_refused(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "linear", "scale")
@given(case=projection_cases())
def test_projection_shortcut_gradient_is_both_paths(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_projection_gradient_splits(backend, prop.request(case, dtype))


@DTYPE
@NORMED
@pytest.mark.reaches(*floors.NORM_STACKS)
@given(case=norm_stack_cases(placement="post"))
@example(case=norm_block_case("post", "layer_norm", X, W, Fraction(1), depth=3))
def test_post_norm_stream_stays_normalized_at_every_depth(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_post_norm_stream_stays_normalized(backend, prop.request(case, dtype))


@DTYPE
@LAYER_NORM_STACK
@given(cases=layer_norm_depth_cases("pre"))
@example(cases=_depths("pre", STACK_ROWS, [W] * DEEP, [Fraction(1)] * DEEP, Fraction(1, 16),
                       STACK_COT))
def test_pre_norm_gradient_keeps_the_identity_highway_at_every_depth(
        backend: Backend, dtype: str, prop: PropertyRun, cases: list[Case]) -> None:
    check_pre_norm_gradient_highway(backend, [prop.request(c, dtype) for c in cases])


@DTYPE
@LAYER_NORM_STACK
@given(cases=layer_norm_depth_cases("post"))
@example(cases=_depths("post", STACK_ROWS, [W] * DEEP, [Fraction(1)] * DEEP, Fraction(1, 16),
                       STACK_COT))
def test_post_norm_gradient_passes_through_every_norm_at_every_depth(
        backend: Backend, dtype: str, prop: PropertyRun, cases: list[Case]) -> None:
    check_post_norm_gradient_passes_through_norms(
        backend, [prop.request(c, dtype) for c in cases])
