"""sum_axes: a sum over the chosen axes (kept as 1 with keepdim), the cotangent copied back
over them; a wrong transpose or reference gradient is caught by the generic table tests."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec.ball import Ball
from resverify.spec.errors import InvalidProgram, ShapeMismatch
from resverify.spec.ir import Node
from resverify.spec.ops import OP_TABLE, Sample, SumAxes
from resverify.spec.ops.attributes import IntValue, Params
from resverify.spec.ops.base import ArrayNamespace, Pullback
from tests.spec.ops.op_checks import budget_check_catches, derivative_check_catches


def _k(axes: tuple[int, ...], keepdim: bool) -> Params:
    items: dict[str, IntValue] = {"axes": axes, "keepdim": keepdim}
    return Params(items)


OUTER = Sample(((2, 1, 3),), axes=(0, 2), keepdim=True)


class CopiesToTheFirstOnly(SumAxes):
    """sum_axes whose transpose gives the cotangent to the first element of each sum only."""

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        (full,) = super().transpose(xp, g, args, k)
        out = np.zeros_like(full)
        out[(0,) * full.ndim] = full[(0,) * full.ndim]
        return (out,)


class WrongReferenceGradient(SumAxes):
    """sum_axes whose reference gradient is :class:`CopiesToTheFirstOnly`'s."""

    def numpy(self, args: Sequence[np.ndarray], alpha: Any) -> tuple[np.ndarray, Pullback]:
        value, _ = super().numpy(args, alpha)
        return value, lambda g: CopiesToTheFirstOnly().transpose(
            ArrayNamespace(np), g, args, alpha)


def test_sum_axes_sums_the_chosen_axes_and_keeps_them_when_asked() -> None:
    x = np.array([Fraction(i, 7) for i in range(12)], dtype=object).reshape(2, 3, 2)
    op = OP_TABLE["sum_axes"]
    for keepdim in (False, True):
        k = _k((0, 2), keepdim)
        y = op.exact([x], k)
        want = x.sum(axis=(0, 2), keepdims=keepdim)
        assert y.shape == want.shape == op.shape([x.shape], k)
        assert np.array_equal(y, want), f"sum_axes={y.tolist()}, but should be {want.tolist()}"
        (back,) = op.exact_vjp(y, [x], y, k)
        assert np.array_equal(back, np.broadcast_to(want.reshape(1, 3, 1), x.shape))


@pytest.mark.parametrize("axes", [(2,), (1, 0), (0, 0)])
def test_sum_axes_refuses_axes_out_of_range_unsorted_or_repeated(axes: tuple[int, ...]) -> None:
    with pytest.raises(ShapeMismatch, match="sum_axes: shape mismatch"):
        OP_TABLE["sum_axes"].shape([(2, 3)], _k(axes, False))


@pytest.mark.parametrize("keepdim", [1, 0, "true"])
def test_keepdim_must_be_a_boolean(keepdim: object) -> None:
    with pytest.raises(InvalidProgram, match="keepdim must be a boolean"):
        Node("s", "sum_axes", ("x",), params={"axes": [0], "keepdim": keepdim})


def test_a_wrong_transpose_is_caught_by_the_sympy_derivative() -> None:
    derivative_check_catches("sum_axes", OUTER, CopiesToTheFirstOnly())


def test_a_wrong_reference_gradient_is_caught_by_the_budget() -> None:
    budget_check_catches("sum_axes", OUTER, WrongReferenceGradient())


def test_a_sum_axes_ball_holds_the_exact_sum_and_copies_the_cotangent() -> None:
    rng = np.random.default_rng(2)
    mid = rng.standard_normal((3, 4, 2))
    k = _k((1,), True)
    op = OP_TABLE["sum_axes"]
    out = op.enclose([Ball.of(mid, np.full(mid.shape, 2.0**-30))], k)
    exact = op.exact([np.array([Fraction(v) for v in mid.reshape(-1)], dtype=object)
                      .reshape(mid.shape)], k)
    assert out.mid.shape == exact.shape == (3, 1, 2)
    gap = [abs(w - Fraction(m) - Fraction(lo)) - Fraction(r) for w, m, lo, r in
           zip(exact.reshape(-1), out.mid.reshape(-1), out.lo.reshape(-1),
               out.rad.reshape(-1), strict=True)]
    assert max(gap) <= 0, f"the ball misses the exact sum by {float(max(gap))}"
    assert (out.rad >= 4 * 2.0**-30).all(), f"radius {out.rad.min()} ignores the radii"
    (back,) = op.enclose_vjp(out, [Ball.exact(mid)], out, k)
    assert np.array_equal(back.mid, np.broadcast_to(out.mid, mid.shape))
