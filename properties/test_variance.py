"""Variance laws: the exact sample identity and chi-square laws on random streams (property 7).

The random streams come from a numpy Generator seeded by Hypothesis; every statistical
check has a false-alarm probability of at most 1e-9 per example (see
:mod:`resverify.properties.laws_variance` and :mod:`resverify.properties.stats`). The last
two laws run the stream through the backend's own layer_norm and rms_norm: where the norm
sits decides whether the variance grows with depth (pre-norm) or stays put (post-norm).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties.cases import Case
from resverify.properties.laws_variance import (
    check_dependent_branch_variance,
    check_independent_updates_variance,
    check_post_norm_stream_variance,
    check_pre_norm_stream_variance,
    check_sample_variance_identity,
)
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import sample_block_cases
from resverify.spec.ir import DTYPES

DTYPE = pytest.mark.parametrize("dtype", DTYPES)
NORM_STREAM = pytest.mark.needs("layer_norm", "rms_norm", "linear", "scale", "residual_add")
NORMS = st.sampled_from(["layer_norm", "rms_norm"])
SPREADS = st.sampled_from([1, 2, 4])  # the input's standard deviation (a power of two)
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


@DTYPE
@NORM_STREAM
@given(seed=SEEDS, op=NORMS, depth=st.integers(1, 8), spread=SPREADS)
@example(seed=0, op="layer_norm", depth=8, spread=1)  # S26 through a norm: variance 1 + 8
def test_pre_norm_stream_variance_grows_linearly_with_depth(
        backend: Backend, dtype: str, prop: PropertyRun, seed: int, op: str, depth: int,
        spread: int) -> None:
    check_pre_norm_stream_variance(backend, dtype, seed, op, depth, spread)


@DTYPE
@NORM_STREAM
@given(seed=SEEDS, op=NORMS, depth=st.integers(2, 8), spread=SPREADS)
@example(seed=0, op="rms_norm", depth=8, spread=4)  # variance 2 entering block 8, not 16 + 8
def test_post_norm_block_keeps_stream_variance_constant_with_depth(
        backend: Backend, dtype: str, prop: PropertyRun, seed: int, op: str, depth: int,
        spread: int) -> None:
    check_post_norm_stream_variance(backend, dtype, seed, op, depth, spread)
