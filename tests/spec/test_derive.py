"""The hand-written VJP rules of resverify.spec.ops equal the derivatives SymPy derives."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy

from resverify.spec.derive import (
    ALPHA,
    RELU_DERIVATIVE_AT_ZERO,
    derived,
    derived_vjp,
    local_jacobian,
    relu_derivative,
)
from resverify.spec.errors import InvalidProgram, Shape
from resverify.spec.ops import OP_TABLE

SMOOTH_CASES: list[tuple[str, tuple[Shape, ...]]] = [
    ("add", ((2, 3), (2, 3))), ("add", ((2, 1), (3,))), ("add", ((), (2,))),
    ("add", ((1,), (2, 2))), ("add", ((0, 2), (2,))),
    ("mul", ((2, 3), (2, 3))), ("mul", ((2, 1), (1, 3))), ("mul", ((3,), ())),
    ("residual_add", ((2,), (2,))), ("residual_add", ((), ())), ("residual_add", ((2, 2), (2, 2))),
    ("scale", ((2, 2),)), ("scale", ((),)),
    ("linear", ((3,), (3, 2))), ("linear", ((2, 3), (3, 2))), ("linear", ((2, 1, 2), (2, 3))),
    ("linear", ((0, 2), (2, 3))),
    ("sum", ((2, 3),)), ("sum", ((),)), ("sum", ((0, 2),)),
    ("tanh", ((3,),)), ("tanh", ((),)),
]


def hand_vjp(op: str, shapes: tuple[Shape, ...]) -> tuple[np.ndarray, ...]:
    """The op entry's exact rule, run on the same symbols (alpha as a symbol, tanh's output
    symbolic)."""
    case = derived(op, shapes)
    alpha = ALPHA if op == "scale" else None
    return OP_TABLE[op].exact_vjp(case.cotangent, case.args, case.output, alpha)


def differences(left: np.ndarray, right: np.ndarray) -> list[sympy.Expr]:
    assert left.shape == right.shape, f"shape {left.shape}, but should be {right.shape}"
    return [d for d in (sympy.simplify(sympy.sympify(p) - q)
                        for p, q in zip(left.flat, right.flat, strict=True)) if d != 0]


@pytest.mark.parametrize(("op", "shapes"), SMOOTH_CASES)
def test_hand_vjp_equals_the_sympy_derivative(op: str, shapes: tuple[Shape, ...]) -> None:
    for i, (hand, sym) in enumerate(zip(hand_vjp(op, shapes), derived_vjp(op, shapes),
                                        strict=True)):
        wrong = differences(hand, sym)
        assert not wrong, f"{op}{shapes} arg {i}: hand - derived = {wrong[:3]}"


@pytest.mark.parametrize(("op", "shapes"), [c for c in SMOOTH_CASES if c[0] != "tanh"])
def test_hand_forward_equals_the_symbolic_forward(op: str, shapes: tuple[Shape, ...]) -> None:
    case = derived(op, shapes)
    alpha = ALPHA if op == "scale" else None
    hand = OP_TABLE[op].exact(case.args, alpha)
    wrong = differences(np.asarray(hand, dtype=object).reshape(case.output.shape), case.output)
    assert not wrong, f"{op}{shapes}: hand - symbolic forward = {wrong[:3]}"


def test_a_wrong_rule_is_caught() -> None:
    """The comparison can fail: mul's VJP with the factors swapped differs from SymPy's."""
    case = derived("mul", ((2,), (2,)))
    a, b = case.args
    swapped = (case.cotangent * a, case.cotangent * b)
    assert differences(swapped[0], derived_vjp("mul", ((2,), (2,)))[0])


def test_jacobians_have_one_column_per_argument_element() -> None:
    jx, jw = local_jacobian("linear", ((2, 3), (3, 4)))
    assert jx.shape == (8, 6) and jw.shape == (8, 12)
    (jt,) = local_jacobian("tanh", ((2,),))
    t = sympy.tanh(sympy.Symbol("a_0", real=True))
    assert sympy.simplify(jt[0, 0] - (1 - t**2)) == 0 and jt[0, 1] == 0


def test_derivations_are_cached() -> None:
    assert derived("linear", ((2, 3), (3, 2))) is derived("linear", ((2, 3), (3, 2)))


@pytest.mark.parametrize("point", [Fraction(-3), Fraction(-1, 7), Fraction(1, 9), Fraction(5, 2)])
def test_relu_hand_rule_equals_the_derived_heaviside_away_from_zero(point: Fraction) -> None:
    g = np.array([Fraction(3, 2)], dtype=object)
    (hand,) = OP_TABLE["relu"].exact_vjp(g, [np.array([point], dtype=object)], g, None)
    case = derived("relu", ((1,),))
    symbolic = case.vjp[0][0].subs({case.args[0][0]: sympy.Rational(point.numerator,
                                                                    point.denominator),
                                    case.cotangent[0]: sympy.Rational(3, 2)})
    assert hand[0] == symbolic, f"relu vjp at {point}: hand {hand[0]}, derived {symbolic}"
    assert symbolic == sympy.Rational(3, 2) * relu_derivative(point)


def test_relu_derivative_at_zero_is_the_declared_zero_not_sympys_half() -> None:
    a = sympy.Symbol("a", real=True)
    assert sympy.diff(sympy.Max(a, 0), a).subs(a, 0) == sympy.Rational(1, 2)
    assert relu_derivative(0) == RELU_DERIVATIVE_AT_ZERO == 0
    g = np.array([Fraction(7)], dtype=object)
    (hand,) = OP_TABLE["relu"].exact_vjp(g, [np.array([Fraction(0)], dtype=object)], g, None)
    assert hand[0] == 0, f"relu vjp at 0 = {hand[0]}, but the declared convention says 0"


def test_unknown_op_or_arity_is_refused() -> None:
    with pytest.raises(InvalidProgram, match="not an op"):
        derived("conv2d", ((2,),))
    with pytest.raises(InvalidProgram, match="not an op"):
        derived("add", ((2,),))
