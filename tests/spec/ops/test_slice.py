"""slice: Python's slicing along one axis; the gradient puts the cotangent back, zeros
elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from resverify.spec.errors import ShapeMismatch
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.attributes import Params


def _k(axis: int, start: int, stop: int, step: int) -> Params:
    return Params({"axis": axis, "start": start, "stop": stop, "step": step})


@pytest.mark.parametrize(("start", "stop", "step"), [(0, 9, 2), (1, 3, 1), (4, 2, 1), (7, 9, 1)])
def test_slice_takes_what_python_slicing_takes(start: int, stop: int, step: int) -> None:
    x = np.arange(10, dtype=object).reshape(2, 5)
    k = _k(1, start, stop, step)
    want = [row[start:stop:step] for row in x.tolist()]
    y = OP_TABLE["slice"].exact([x], k)
    assert y.tolist() == want and OP_TABLE["slice"].shape([(2, 5)], k) == y.shape


def test_slice_gradient_is_the_cotangent_where_taken_and_zero_elsewhere() -> None:
    x = np.zeros((2, 5), dtype=object)
    g = np.array([[1, 2, 3], [4, 5, 6]], dtype=object)
    (back,) = OP_TABLE["slice"].exact_vjp(g, [x], g, _k(1, 0, 5, 2))
    assert back.tolist() == [[1, 0, 2, 0, 3], [4, 0, 5, 0, 6]]


@pytest.mark.parametrize("k", [_k(2, 0, 1, 1), _k(0, 0, 1, 0)])
def test_slice_refuses_an_axis_out_of_range_or_a_zero_step(k: Params) -> None:
    with pytest.raises(ShapeMismatch, match=r"slice: shape mismatch \[2, 5\]"):
        OP_TABLE["slice"].shape([(2, 5)], k)
