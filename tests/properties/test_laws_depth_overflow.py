"""The unrolled-sum law ``x_L = x_0 + Σ a_l x_l`` on states whose budget is infinite (a
float16 value that may round past 65504): such an element claims nothing and is not compared,
as in every other law, while the other elements still are. Found by a 200-seed flake run
(seed 2041: the law raised on a correct backend instead of judging it)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties.assertions import PropertyFailure
from resverify.properties.laws_depth import check_unrolled_sum, scale_chain
from resverify.spec.budget import error_budget
from resverify.spec.request import Request, Result, Value

FACTORS = [Fraction(1, 2)]


def _requests(x: list[float]) -> list[Request]:
    values = np.array(x, dtype=np.float16)
    return [Request(scale_chain(values.shape, FACTORS[:depth], True), {"x": values}, "float16",
                    np.ones_like(values)) for depth in range(len(FACTORS) + 1)]


class _OffByHalf(NumpyBackend):
    """Adds 1/2 to every output: x_1 + 1/2 differs from (x_0 + 1/2)(1 + a) by a/2."""

    name = "off-by-half"

    def run(self, request: Request) -> Result:
        result = super().run(request)
        assert isinstance(result, Value)
        return Value(result.output + np.float16(0.5), result.grads)


def test_unrolled_sum_skips_elements_whose_budget_is_infinite() -> None:
    """1.5 x overflows float16 for x = 50000 (75000 > 65504): that element is not judged."""
    requests = _requests([50000.0, 1.0])
    budget = error_budget(requests[-1]).output
    assert np.isinf(budget[0]) and np.isfinite(budget[1]), budget
    check_unrolled_sum(NumpyBackend(), requests, FACTORS)  # raised InvalidRequest before


def test_unrolled_sum_still_judges_the_elements_with_a_finite_budget() -> None:
    with pytest.raises(PropertyFailure, match=r"output\[1\]"):
        check_unrolled_sum(_OffByHalf(), _requests([50000.0, 1.0]), FACTORS)
