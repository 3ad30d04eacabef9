"""permute: the inverse permutation carries the cotangent back, and a wrong transpose is
caught by the generic table tests (SymPy against the hand VJP; the budget against a
reference whose gradient is wrong)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from resverify.spec.errors import ShapeMismatch
from resverify.spec.ops import OP_TABLE, Permute, Sample
from resverify.spec.ops.attributes import Params
from resverify.spec.ops.base import ArrayNamespace, Pullback
from tests.spec.ops.op_checks import budget_check_catches, derivative_check_catches

ROTATE = Sample(((2, 2, 2),), perm=(2, 0, 1))  # its inverse is (1, 2, 0)


class ForwardPermutationBack(Permute):
    """permute whose transpose permutes by ``perm`` again, not by its inverse."""

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        return (np.transpose(g, k.ints("perm")),)


class WrongReferenceGradient(Permute):
    """permute whose exact rules are right but whose reference gradient is
    :class:`ForwardPermutationBack`'s."""

    def numpy(self, args: Sequence[np.ndarray], alpha: Any) -> tuple[np.ndarray, Pullback]:
        value, _ = super().numpy(args, alpha)
        return value, lambda g: (np.transpose(g, alpha.ints("perm")),)


def test_permute_gradient_goes_back_through_the_inverse_permutation() -> None:
    x = np.arange(6, dtype=object).reshape(2, 1, 3)
    k = Params({"perm": (2, 0, 1)})
    y = OP_TABLE["permute"].exact([x], k)
    assert y.shape == (3, 2, 1) and y[2, 1, 0] == x[1, 0, 2]
    (back,) = OP_TABLE["permute"].exact_vjp(y, [x], y, k)
    assert np.array_equal(back, x), f"vjp(y)={back.tolist()}, but should be {x.tolist()}"


@pytest.mark.parametrize("perm", [(0, 0), (0,), (1, 2)])
def test_permute_refuses_what_is_not_a_permutation_of_the_axes(perm: tuple[int, ...]) -> None:
    with pytest.raises(ShapeMismatch, match=r"permute: shape mismatch \[2, 3\]"):
        OP_TABLE["permute"].shape([(2, 3)], Params({"perm": perm}))


def test_a_wrong_transpose_entry_is_caught_by_the_sympy_derivative() -> None:
    derivative_check_catches("permute", ROTATE, ForwardPermutationBack())


def test_a_wrong_reference_gradient_is_caught_by_the_budget() -> None:
    budget_check_catches("permute", ROTATE, WrongReferenceGradient())
