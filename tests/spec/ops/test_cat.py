"""cat: two arrays joined along one axis; the gradient is the cotangent split back."""

from __future__ import annotations

import re

import numpy as np
import pytest

from resverify.spec.errors import ShapeMismatch
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.attributes import Params


def test_cat_joins_and_its_gradient_splits_where_the_first_ends() -> None:
    a, b = np.arange(2, dtype=object).reshape(2, 1), np.arange(2, 6, dtype=object).reshape(2, 2)
    k = Params({"axis": 1})
    y = OP_TABLE["cat"].exact([a, b], k)
    assert y.tolist() == [[0, 2, 3], [1, 4, 5]]
    ga, gb = OP_TABLE["cat"].exact_vjp(y, [a, b], y, k)
    assert ga.tolist() == a.tolist() and gb.tolist() == b.tolist()


@pytest.mark.parametrize(("a", "b", "axis"), [((2, 3), (2,), 0), ((2, 3), (3, 2), 0),
                                              ((2, 3), (2, 3), 2), ((), (), 0)])
def test_cat_refuses_other_ranks_other_axes_or_an_axis_out_of_range(
        a: tuple[int, ...], b: tuple[int, ...], axis: int) -> None:
    message = re.escape(f"cat: shape mismatch {list(a)} vs {list(b)}")
    with pytest.raises(ShapeMismatch, match=message):
        OP_TABLE["cat"].shape([a, b], Params({"axis": axis}))
