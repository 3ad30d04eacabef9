"""Variance laws: the exact sample identity and chi-square laws on random streams (property 7).

The random streams come from a numpy Generator seeded by Hypothesis; every statistical
check has a false-alarm probability of at most 1e-9 per example (see
:mod:`resverify.properties.laws_variance` and :mod:`resverify.properties.stats`).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties.cases import Case
from resverify.properties.laws_variance import (
    check_dependent_branch_variance,
    check_independent_updates_variance,
    check_sample_variance_identity,
)
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import sample_block_cases
from resverify.spec.ir import DTYPES

DTYPE = pytest.mark.parametrize("dtype", DTYPES)
SEEDS = st.integers(0, 2**32 - 1)
# branch factors whose naive variance 1 + a² is provably told apart from (1+a)² at n = 4096
COUPLINGS = st.sampled_from([Fraction(v) for v in
                             ("-2", "-3/2", "-3/4", "-1/2", "-1/4", "1/4", "1/2", "1", "2")])


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(case=sample_block_cases())
def test_sample_variance_of_merge_is_sum_plus_twice_covariance(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_sample_variance_identity(backend, prop.request(case, dtype))


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(seed=SEEDS, root=st.integers(1, 5))
@example(seed=0, root=10)  # S26: 100 layers of N(0, 1) noise: variance 100
def test_independent_updates_add_their_variances(
        backend: Backend, dtype: str, prop: PropertyRun, seed: int, root: int) -> None:
    check_independent_updates_variance(backend, dtype, seed, root, rescale=False)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(seed=SEEDS, root=st.integers(1, 5))
@example(seed=0, root=10)  # S27: scaled by 1/√100 = 0.1, variance 1
def test_inverse_sqrt_depth_scaling_keeps_unit_variance(
        backend: Backend, dtype: str, prop: PropertyRun, seed: int, root: int) -> None:
    check_independent_updates_variance(backend, dtype, seed, root, rescale=True)


@DTYPE
@pytest.mark.needs("residual_add", "scale")
@given(seed=SEEDS, a=COUPLINGS)
def test_branch_depending_on_input_breaks_naive_variance_sum(
        backend: Backend, dtype: str, prop: PropertyRun, seed: int, a: Fraction) -> None:
    check_dependent_branch_variance(backend, dtype, seed, a)
