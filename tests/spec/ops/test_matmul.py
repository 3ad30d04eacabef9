"""matmul: each batch is its own matrix product, the VJP transposes the other operand, and
a wrong transpose or a wrong reference gradient is caught by the generic table tests."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec.ball import Ball
from resverify.spec.errors import ShapeMismatch
from resverify.spec.ops import OP_TABLE, Matmul
from resverify.spec.ops.base import ArrayNamespace, Pullback
from tests.spec.ops.op_checks import budget_check_catches, derivative_check_catches

BATCHED = ((2, 2, 3), (2, 3, 2))


class TransposesTheWrongOperand(Matmul):
    """matmul whose VJP for ``a`` is ``ḡ b``, b not transposed (right in shape when b is
    square, wrong in value)."""

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        a, b = args
        return xp.matmul(g, b), xp.matmul(a.swapaxes(-1, -2), g)


class WrongReferenceGradient(Matmul):
    """matmul whose exact rules are right but whose reference gives every batch the first
    batch's ``b̄``."""

    def numpy(self, args: Sequence[np.ndarray], alpha: Any) -> tuple[np.ndarray, Pullback]:
        value, vjp = super().numpy(args, alpha)

        def wrong(g: np.ndarray) -> tuple[np.ndarray, ...]:
            ga, gb = vjp(g)
            return ga, np.broadcast_to(gb[:1], gb.shape).copy()

        return value, wrong


def fractions(shape: tuple[int, ...], start: int) -> np.ndarray:
    count = int(np.prod(shape))
    return np.array([Fraction(start + i, 3) for i in range(count)], dtype=object).reshape(shape)


def test_each_batch_is_its_own_matrix_product() -> None:
    a, b = fractions((2, 2, 3), 1), fractions((2, 3, 2), -4)
    y = OP_TABLE["matmul"].exact([a, b], None)
    for i in range(2):
        assert np.array_equal(y[i], a[i] @ b[i]), \
            f"matmul(a, b)[{i}]={y[i].tolist()}, but should be {(a[i] @ b[i]).tolist()}"


def test_the_vjp_is_g_bT_and_aT_g_batch_by_batch() -> None:
    a, b = fractions((2, 2, 3), 1), fractions((2, 3, 2), -4)
    g = fractions((2, 2, 2), 5)
    ga, gb = OP_TABLE["matmul"].exact_vjp(g, [a, b], g, None)
    for i in range(2):
        assert np.array_equal(ga[i], g[i] @ b[i].T), f"ā[{i}]={ga[i].tolist()}"
        assert np.array_equal(gb[i], a[i].T @ g[i]), f"b̄[{i}]={gb[i].tolist()}"


@pytest.mark.parametrize(("a", "b"), [((2, 3), (2, 3)), ((2, 2, 3), (3, 3, 2)),
                                      ((2, 3), (1, 3, 2)), ((3,), (3, 2))])
def test_matmul_refuses_unequal_batches_and_mismatched_inner_dims(
        a: tuple[int, ...], b: tuple[int, ...]) -> None:
    with pytest.raises(ShapeMismatch, match="matmul: shape mismatch"):
        OP_TABLE["matmul"].shape([a, b])


def test_a_wrong_operand_transposed_is_caught_by_the_sympy_derivative() -> None:
    case = ((2, 3), (3, 3))  # square b: the wrong VJP still has the right shape
    derivative_check_catches("matmul", case, TransposesTheWrongOperand())


def test_a_wrong_reference_gradient_is_caught_by_the_budget() -> None:
    budget_check_catches("matmul", BATCHED, WrongReferenceGradient())


@pytest.mark.parametrize("shapes", [BATCHED, ((0, 2, 3), (0, 3, 1)), ((1, 2, 20), (1, 20, 9))])
def test_a_matmul_ball_holds_the_exact_value_and_vjp(shapes: tuple[tuple[int, ...], ...]
                                                      ) -> None:
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal(s) for s in shapes)
    radius = 2.0**-30
    balls = [Ball.of(v, np.full(v.shape, radius)) for v in (a, b)]
    op = OP_TABLE["matmul"]
    out = op.enclose(balls, None)
    g = rng.standard_normal(out.mid.shape)
    grads = op.enclose_vjp(Ball.exact(g), balls, out, None)
    exact = [np.array([Fraction(x) for x in v.reshape(-1)], dtype=object).reshape(v.shape)
             for v in (a, b, g)]
    for name, got, want in [("y", out, op.exact(exact[:2], None)),
                            *zip(("ā", "b̄"), grads, op.exact_vjp(exact[2], exact[:2],
                                                                    exact[2], None), strict=True)]:
        assert got.mid.shape == want.shape, f"{name} shape {got.mid.shape} != {want.shape}"
        gap = [abs(w - Fraction(m) - Fraction(lo)) - Fraction(r) for w, m, lo, r in
               zip(want.reshape(-1), got.mid.reshape(-1), got.lo.reshape(-1),
                   got.rad.reshape(-1), strict=True)]
        assert all(d <= 0 for d in gap), f"{name}: the ball misses the exact value by {max(gap)}"
        assert all(r >= 2.0**-40 for r in got.rad.reshape(-1)), \
            f"{name}: a radius {got.rad.min()} ignores the arguments' radius {radius}"
