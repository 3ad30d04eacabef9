"""``resverify.spec.unbounded.origins``: the nodes where a budget first turns infinite."""

from __future__ import annotations

import numpy as np

from resverify.spec.budget import error_budget
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request
from resverify.spec.unbounded import origins


def _square_twice(x: list[float]) -> Request:
    """``x·x + x·x`` in float16."""
    program = Program((Input("x", (len(x),)),),
                      (Node("y", "mul", ("x", "x")), Node("z", "add", ("y", "y"))), "z")
    values = np.array(x)
    return Request(program, {"x": values}, "float16", np.ones_like(values))


def test_an_overflowing_product_is_the_origin_of_the_infinite_bounds_after_it() -> None:
    """400² = 160000 is past float16's largest value 65504: the product is named, with the
    reason, and the sum it feeds (infinite too) is not."""
    request = _square_twice([400.0, 1.0])
    assert np.isinf(error_budget(request).output[0])
    found = origins(request)
    forward = [o for o in found if o.where == "forward"]
    assert [(o.node, o.op, o.count, o.size) for o in forward] == [("y", "mul", 1, 2)], found
    assert "largest finite value" in forward[0].reason, forward[0]
    assert str(forward[0]).startswith("forward: y (mul, float16): 1 of 2 elements"), forward[0]


def test_a_sum_reaching_the_largest_value_is_named_where_its_arguments_are_finite() -> None:
    request = _square_twice([200.0, 1.0])  # 40000 + 40000 rounds past 65504
    found = [o for o in origins(request) if o.where == "forward"]
    assert [(o.node, o.count) for o in found] == [("z", 1)], found


def test_a_budget_finite_everywhere_has_no_origin() -> None:
    request = _square_twice([3.0, -1.5])
    assert np.isfinite(error_budget(request).output).all()
    assert [o for o in origins(request) if o.where != "loose"] == []
