"""The silu entry's own promises: its exact enclosure, its library allowance, its balls.

The op table's tests check the entry on its sample shapes like any other. Here: ``a σ(a)``
through :func:`~resverify.spec.rational.exact_sigmoid` is within the error bound the entry
states of the true value (mpmath at 800 bits); ``SILU_ULPS`` covers the reference and the
installed libraries and still refuses ``a σ(1.702 a)`` (the sigmoid form of GELU, a
different activation), measured directly and through the generic budget; the fast oracle's
balls hold the spec's value and slope.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from resverify.spec.ball import Ball
from resverify.spec.budget import error_budget
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, SILU_ULPS
from resverify.spec.ops.elementwise import Elementwise
from resverify.spec.ops.sigmoid import stable_sigmoid
from resverify.spec.rational import objects
from resverify.spec.request import Request


def _entry() -> Elementwise:
    entry = OP_TABLE["silu"]
    assert isinstance(entry, Elementwise), entry
    return entry


SILU = _entry()
POINTS = [Fraction(0), Fraction(1, 3), Fraction(-7, 2), Fraction(1, 10**30), Fraction(-40),
          Fraction(36), Fraction(-745), Fraction(-1099), Fraction(-1100), Fraction(-10**6),
          Fraction(511), Fraction(512), Fraction(10**9), Fraction(-88, 1) - Fraction(3, 4)]


def _mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def _spec(xs: list[Fraction]) -> list[Fraction]:
    return SILU.exact([objects(xs, (len(xs),))], None).tolist()


@pytest.mark.parametrize("x", POINTS, ids=str)
def test_spec_silu_is_within_its_stated_error_of_the_true_value(x: Fraction) -> None:
    (v,) = _spec([x])
    bound = SILU.error([objects([x], (1,))], [Fraction(0)], objects([v], (1,)), None)
    with mpmath.workprec(800):
        true = _mp(x) / (1 + mpmath.exp(-_mp(x)))
        miss = abs(_mp(v) - true)
        assert miss <= _mp(bound), f"silu({x}): {v} ± {bound} misses by {miss}"
    assert bound <= abs(v) / 2**199 + abs(x) / 2**700, f"silu({x}): bound {bound} is wide"


def _units(got: np.ndarray, x: np.ndarray) -> float:
    """The largest error of ``got`` in units of ``u|x|`` (of twice the smallest normal,
    counted as ``SILU_ULPS``, where that is larger)."""
    info = np.finfo(x.dtype)
    u, floor = Fraction(float(info.eps)) / 2, Fraction(float(info.tiny)) * 2
    spec = _spec([Fraction(v) for v in x.tolist()])
    worst = 0.0
    for v, g, s in zip(x.tolist(), np.asarray(got, dtype=np.float64).tolist(), spec,
                       strict=True):
        miss = abs(Fraction(g) - s)
        worst = max(worst, float(miss / (u * abs(Fraction(v))) if miss > floor else
                                 miss / floor * SILU_ULPS))
    return worst


def _libraries() -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    found: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "numpy (reference)": lambda x: x * stable_sigmoid(x)}
    if importlib.util.find_spec("torch") is not None:
        import torch

        found["torch"] = lambda x: torch.nn.functional.silu(torch.from_numpy(x)).numpy()
    if importlib.util.find_spec("jax") is not None:
        import jax

        jax.config.update("jax_enable_x64", True)
        found["jax"] = lambda x: np.asarray(jax.nn.silu(x))
    return found


LOWEST = {"float64": -745.0, "float32": -104.0, "float16": -17.0}
"""Where each dtype's ``exp(-x)`` has long overflowed."""


@pytest.mark.parametrize("dtype", sorted(LOWEST))
@pytest.mark.parametrize("library", sorted(_libraries()))
def test_the_silu_allowance_covers_the_reference_and_the_libraries(
        library: str, dtype: str) -> None:
    x = np.concatenate([np.linspace(-12, 12, 601), np.linspace(LOWEST[dtype], -12, 200),
                        np.linspace(12, 50, 39)]).astype(dtype)
    with np.errstate(over="ignore"):
        worst = _units(_libraries()[library](x), x)
    assert worst <= SILU_ULPS, f"{library} silu in {dtype}: {worst} units of u|x|"


def _quick_gelu(x: np.ndarray) -> np.ndarray:
    return x * stable_sigmoid(x * x.dtype.type(1.702))


def test_the_allowance_refuses_the_sigmoid_form_of_gelu() -> None:
    x = np.linspace(-8, 8, 161)
    worst = _units(_quick_gelu(x), x)
    assert worst > 10**10 * SILU_ULPS, f"x σ(1.702 x) is only {worst} units of u|x| off"


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_the_budget_holds_the_reference_and_refuses_a_different_gate(dtype: str) -> None:
    x = np.array([-30.0, -3.5, -0.25, 0.0, 0.5, 2.25, 9.0], dtype=dtype)
    program = Program((Input("x", x.shape),), (Node("y", "silu", ("x",)),), "y")
    request = Request(program, {"x": x.astype(np.float64)}, dtype, np.ones(x.shape))
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    right = x * stable_sigmoid(x)
    slope = SILU.numpy_slope(x, right)
    assert not budget.misses(exact, right, {"x": slope}), budget.misses(exact, right,
                                                                          {"x": slope})
    assert budget.misses(exact, _quick_gelu(x), {"x": slope}), f"x σ(1.702 x) in {dtype}"
    assert budget.misses(exact, right, {"x": stable_sigmoid(x)}), f"σ as the slope in {dtype}"


def test_silu_balls_hold_the_spec_value_and_slope_of_their_argument_ball() -> None:
    """At both ends of each argument ball (``mid ± rad``, exactly), the spec's value is in
    the value ball and its slope in the gradient ball of a unit cotangent."""
    mid = np.array([0.0, -3.5, 2.0**-30, 20.0, -600.0, -800.0, 38.0, 1.5])
    rad = np.array([0.0, 2.0**-50, 2.0**-80, 1e-10, 1e-300, 0.0, 0.0, 2.0**-20])
    arg = Ball.of(mid, rad)
    out = SILU.enclose([arg], None)
    (grad,) = SILU.enclose_vjp(Ball.exact(np.ones_like(mid)), [arg], out, None)
    for i, (m, r) in enumerate(zip(mid.tolist(), rad.tolist(), strict=True)):
        for end in (Fraction(m) - Fraction(r), Fraction(m) + Fraction(r)):
            (v,) = _spec([end])
            (s,) = SILU.exact_slope([objects([end], (1,))], objects([v], (1,))).tolist()
            for name, ball, want in (("value", out, v), ("slope", grad, s)):
                assert abs(want - Fraction(ball.mid[i])) <= Fraction(ball.rad[i]), (
                    f"silu {name} ball [{i}] = {ball.mid[i]!r} ± {ball.rad[i]!r} misses "
                    f"{float(want)!r} at {float(end)}")
