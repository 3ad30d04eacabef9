"""The checks every gated activation's tests share (``a · gate(a)``: silu and both GELUs).

Each op's own test module gives its entry, its true value in mpmath, its libraries and a
wrong formula; these helpers measure and judge them the same way for each.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np

from resverify.spec.ball import Ball
from resverify.spec.budget import Budget, error_budget
from resverify.spec.exact import ExactResult, evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.gated import Gated
from resverify.spec.rational import objects
from resverify.spec.request import Request


def entry(name: str) -> Gated:
    found = OP_TABLE[name]
    assert isinstance(found, Gated), found
    return found


def mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def spec_values(op: Gated, xs: list[Fraction]) -> list[Fraction]:
    return op.exact([objects(xs, (len(xs),))], None).tolist()


def check_stated_error(op: Gated, x: Fraction, true: Callable[[mpmath.mpf], mpmath.mpf]
                       ) -> Fraction:
    """The spec's value at ``x`` is within its own error bound of ``true`` (800 bits); the
    bound."""
    (v,) = spec_values(op, [x])
    bound = op.error([objects([x], (1,))], [Fraction(0)], objects([v], (1,)), None)
    with mpmath.workprec(800):
        miss = abs(mp(v) - true(mp(x)))
        assert miss <= mp(bound), f"{op.name}({x}): {v} ± {bound} misses by {miss}"
    return bound


def units(op: Gated, got: np.ndarray, x: np.ndarray) -> float:
    """The largest error of ``got`` in units of ``u|x|`` (of twice the smallest normal,
    counted as the op's allowance, where that is larger)."""
    info = np.finfo(x.dtype)
    u, floor = Fraction(float(info.eps)) / 2, Fraction(float(info.tiny)) * 2
    spec = spec_values(op, [Fraction(v) for v in x.tolist()])
    worst = 0.0
    for v, g, s in zip(x.tolist(), np.asarray(got, dtype=np.float64).tolist(), spec,
                       strict=True):
        miss = abs(Fraction(g) - s)
        worst = max(worst, float(miss / (u * abs(Fraction(v))) if miss > floor else
                                 miss / floor * op.ulps))
    return worst


def check_allowance(op: Gated, library: str, got: np.ndarray, x: np.ndarray) -> None:
    """``got``, a library's ``op`` on ``x``, is within the op's allowance."""
    worst = units(op, got, x)
    assert worst <= op.ulps, f"{library} {op.name} in {x.dtype}: {worst} units of u|x|"


def check_allowance_refuses(op: Gated, x: np.ndarray, wrong: dict[str, np.ndarray],
                            factor: int) -> None:
    """Each ``wrong`` value of ``op`` on ``x`` is more than ``factor`` allowances off."""
    for what, got in wrong.items():
        worst = units(op, got, x)
        assert worst > factor * op.ulps, f"{op.name} with {what} is only {worst} units off"


def one_op_budget(op: Gated, x: np.ndarray) -> tuple[Budget, ExactResult]:
    """The budget and exact result of ``op`` alone on ``x`` (in its dtype), cotangent 1."""
    program = Program((Input("x", x.shape),), (Node("y", op.name, ("x",)),), "y")
    request = Request(program, {"x": x.astype(np.float64)}, x.dtype.name, np.ones(x.shape))
    exact = evaluate(request)
    return error_budget(request, exact=exact), exact


def check_budget_holds_the_reference(op: Gated, x: np.ndarray) -> None:
    """The reference's value and slope are inside the budget of ``op`` on ``x``, and the
    gate alone given as the slope (``Φ`` for ``Φ + aφ``) is not."""
    budget, exact = one_op_budget(op, x)
    with np.errstate(over="ignore"):
        right = op.numpy_value(x)
        slope = op.numpy_slope(x, right)
        gate = op.numpy_gate(x)
    missed = budget.misses(exact, right, {"x": slope})
    assert not missed, f"{op.name} reference in {x.dtype}: {[str(m) for m in missed[:3]]}"
    assert budget.misses(exact, right, {"x": gate}), f"{op.name}: the gate as the slope passes"


def check_budget_refuses(op: Gated, x: np.ndarray, wrong: Callable[[np.ndarray], np.ndarray],
                         what: str) -> None:
    """``wrong`` (computed in float64, rounded to ``x``'s dtype) as the value of ``op`` on
    ``x`` is outside the budget somewhere."""
    budget, exact = one_op_budget(op, x)
    with np.errstate(over="ignore"):
        slope = op.numpy_slope(x, op.numpy_value(x))
        got = wrong(x.astype(np.float64)).astype(x.dtype)
    assert budget.misses(exact, got, {"x": slope}), f"{op.name} with {what} in {x.dtype} passes"


def check_balls(op: Gated, mid: np.ndarray, rad: np.ndarray) -> None:
    """At both ends of each argument ball (``mid ± rad``, exactly), the spec's value is in
    the value ball and its slope in the gradient ball of a unit cotangent (each ball's
    centre ``mid + lo``, read exactly)."""
    arg = Ball.of(mid, rad)
    out = op.enclose([arg], None)
    (grad,) = op.enclose_vjp(Ball.exact(np.ones_like(mid)), [arg], out, None)
    for i, (m, r) in enumerate(zip(mid.tolist(), rad.tolist(), strict=True)):
        for end in (Fraction(m) - Fraction(r), Fraction(m) + Fraction(r)):
            (v,) = spec_values(op, [end])
            (s,) = op.exact_slope([objects([end], (1,))], objects([v], (1,))).tolist()
            for name, ball, want in (("value", out, v), ("slope", grad, s)):
                centre = Fraction(ball.mid[i]) + Fraction(ball.lo[i])
                assert abs(want - centre) <= Fraction(ball.rad[i]), (
                    f"{op.name} {name} ball [{i}] = {ball.mid[i]!r} + {ball.lo[i]!r} ± "
                    f"{ball.rad[i]!r} misses "
                    f"{float(want)!r} at {float(end)}")
