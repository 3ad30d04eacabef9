"""The merge refuses shape pairs of equal size (property 2, its hardest cases).

``residual_add`` accepts exactly equal shapes. A pair with the same number of elements,
``[2, 3]`` and ``[3, 2]`` or ``[6]`` and ``[2, 3]``, is the one an engine can silently
accept by reshaping or transposing the branch, and the general mismatch strategy draws
such a pair only by chance: here every pair is one (a permutation of the axes, or
another factorization of the same size). Found by the mutant catalog:
:class:`tests.mutants.TransposingMerge` survived the rest of the suite. The law is the
refusal itself (:func:`~resverify.properties.laws_structure.check_refuses_mismatch`); the
other laws of a refused merge are checked on the general pairs in ``test_structure.py``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resverify.impl.backend import Backend
from resverify.properties.cases import Case
from resverify.properties.laws_structure import check_refuses_mismatch
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import merge_case, mismatch_case, values
from resverify.spec.errors import Shape
from resverify.spec.ir import DTYPES

DTYPE = pytest.mark.parametrize("dtype", DTYPES)


def _factorizations(size: int, rank: int) -> list[Shape]:
    """Every shape of ``rank`` axes (sides >= 1) holding ``size`` elements."""
    if rank == 1:
        return [(size,)]
    return [(d, *rest) for d in range(1, size + 1) if size % d == 0
            for rest in _factorizations(size // d, rank - 1)]


@st.composite
def equal_size_pairs(draw: st.DrawFn) -> tuple[Shape, Shape]:
    """Two unequal shapes of the same size: the axes permuted, or refactored."""
    left: Shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    permuted = tuple(draw(st.permutations(left)))
    rank = draw(st.integers(1, 3))
    refactored = _factorizations(math.prod(left), rank)
    candidates = [s for s in [permuted, left[::-1], *refactored] if s != left]
    if not candidates:
        return left, (*left, 1)  # a single element or one axis: add an axis of size 1
    return left, draw(st.sampled_from(candidates))


@st.composite
def equal_size_mismatch_cases(draw: st.DrawFn) -> Case:
    """``residual_add(a, b)`` over an :func:`equal_size_pairs` pair, random values."""
    left, right = draw(equal_size_pairs())
    return merge_case("residual_add", draw(values(left)), draw(values(right)), None)


@DTYPE
@pytest.mark.needs("residual_add")
@given(case=equal_size_mismatch_cases())
@example(case=mismatch_case((2, 3), (3, 2)))  # a transposed branch
@example(case=mismatch_case((2, 3), (6,)))  # a flattened branch
@example(case=mismatch_case((3,), (1, 3)))  # an added axis, which add would broadcast
def test_residual_add_rejects_equal_size_shape_pairs(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_refuses_mismatch(backend, prop.request(case, dtype))
