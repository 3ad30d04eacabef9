"""expand: broadcasting copies; the gradient sums them, the one layout rule that rounds."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.spec.errors import ShapeMismatch
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.attributes import Params
from resverify.spec.ops.base import Site
from resverify.spec.rounding import Bound
from tests.spec.ops.test_budget_rules import _ctx


def test_expand_gradient_sums_the_copies() -> None:
    x = np.array([Fraction(1), Fraction(2)], dtype=object).reshape(2, 1)
    k = Params({"shape": (3, 2, 4)})
    y = OP_TABLE["expand"].exact([x], k)
    assert y.shape == (3, 2, 4) and y[2, 1, 3] == 2
    g = np.full((3, 2, 4), Fraction(1, 2), dtype=object)
    (back,) = OP_TABLE["expand"].exact_vjp(g, [x], y, k)
    assert back.tolist() == [[6], [6]], f"vjp={back.tolist()}, but should be [[6], [6]]"


def test_expand_gradient_budget_is_a_sum_of_copies_and_its_value_budget_is_none() -> None:
    c, k = _ctx("float32"), Params({"shape": (4, 2)})
    at = Site(k, [np.ones(2, dtype=object)], [Fraction(0)], np.ones((4, 2), dtype=object),
              Fraction(0))
    x = Bound(np.ones(2), np.zeros(2))
    y = OP_TABLE["expand"].budget(c, at, [x])
    assert not y.err.any() and y.mag.shape == (4, 2), y
    (g,) = OP_TABLE["expand"].budget_vjp(c, at, [x], y, Bound(np.ones((4, 2)),
                                                              np.zeros((4, 2))))
    assert np.all(g.err >= 3 * c.u * 4), f"grad err={g.err.tolist()}, but should be >= 3u·4"


@pytest.mark.parametrize(("shape", "target"), [((2, 3), (3,)), ((2,), (3,)), ((2,), (2, 3))])
def test_expand_refuses_what_broadcasting_does_not_give(
        shape: tuple[int, ...], target: tuple[int, ...]) -> None:
    with pytest.raises(ShapeMismatch, match=r"expand: shape mismatch"):
        OP_TABLE["expand"].shape([shape], Params({"shape": target}))
