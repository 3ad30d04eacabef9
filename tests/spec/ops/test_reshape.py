"""reshape: the elements in row-major order, the count kept."""

from __future__ import annotations

import re

import numpy as np
import pytest

from resverify.spec.errors import ShapeMismatch
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.attributes import Params


def test_reshape_keeps_row_major_order_both_ways() -> None:
    x = np.arange(6, dtype=object).reshape(2, 3)
    k = Params({"shape": (3, 2)})
    y = OP_TABLE["reshape"].exact([x], k)
    assert y.tolist() == [[0, 1], [2, 3], [4, 5]]
    (back,) = OP_TABLE["reshape"].exact_vjp(y, [x], y, k)
    assert back.tolist() == x.tolist()


@pytest.mark.parametrize(("shape", "target"), [((2, 3), (4,)), ((0,), (1,)), ((), (0,))])
def test_reshape_refuses_a_shape_of_another_element_count(
        shape: tuple[int, ...], target: tuple[int, ...]) -> None:
    with pytest.raises(ShapeMismatch, match=re.escape(f"reshape: shape mismatch {list(shape)}")):
        OP_TABLE["reshape"].shape([shape], Params({"shape": target}))
