"""The narrow float64 enclosures of exp, sigmoid and silu (and silu's slope) hold the true
values, computed by mpmath at 2,300 bits, and are about half an ulp wide.

Why: silu's ball used to trust NumPy to 40 units of ``2**-53 |a|``, wider than silu's own
budget (8 units), so the op-by-op judgement sent every element of a Llama layer's SiLU to
the exact interpreter. The balls here trust no libm (:func:`~resverify.spec.ball.exp_nonpositive`
is its own reduction and polynomial, every rounding bounded). Drawn over every finite
float64 (huge, tiny, subnormal, negative) and over the range where the gates move; 2,300 bits
make the sum ``mid + lo`` of two float64 exact, so containment is checked without rounding.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from resverify.spec.ball import Ball, exp_nonpositive
from resverify.spec.ops import OP_TABLE
from resverify.spec.ops.gated import Gated
from resverify.spec.ops.sigmoid import sigmoid_balls
from resverify.spec.rational import exact_sigmoid
from tests.spec.ops.gated_checks import check_balls, entry

U = 2.0**-53
SILU = entry("silu")
SIGMOID = OP_TABLE["sigmoid"]
EVERY = st.floats(allow_nan=False, allow_infinity=False)
NEAR = st.floats(-750.0, 750.0)
ARGUMENTS = st.lists(st.one_of(EVERY, NEAR, st.floats(-40.0, 40.0)), min_size=1, max_size=24)


def _centre(ball: Ball, i: int) -> mpmath.mpf:
    return mpmath.mpf(float(ball.mid[i])) + mpmath.mpf(float(ball.lo[i]))


def _holds(ball: Ball, i: int, true: mpmath.mpf) -> bool:
    return bool(abs(_centre(ball, i) - true) <= mpmath.mpf(float(ball.rad[i])))


@settings(max_examples=60, deadline=None, database=None)
@given(st.lists(st.one_of(EVERY, NEAR), min_size=1, max_size=24))
def test_exp_ball_holds_exp_and_is_half_an_ulp_wide(drawn: list[float]) -> None:
    t = -np.abs(np.array(drawn))
    ball = exp_nonpositive(t)
    with mpmath.workprec(2300):
        for i, v in enumerate(t.tolist()):
            true = mpmath.exp(mpmath.mpf(v))
            assert _holds(ball, i, true), f"exp({v!r}) outside {ball.mid[i]!r} ± {ball.rad[i]!r}"
            if v >= -700:  # above the floor: relative, about half an ulp
                assert ball.rad[i] <= 0.5 * U * float(true), f"exp({v!r}): {ball.rad[i]!r}"


@settings(max_examples=60, deadline=None, database=None)
@given(ARGUMENTS)
def test_sigmoid_balls_hold_both_sigmoids_narrowly(drawn: list[float]) -> None:
    v = np.array(drawn)
    up, down = sigmoid_balls(v)
    with mpmath.workprec(2300):
        for i, x in enumerate(v.tolist()):
            for ball, sign in ((up, 1), (down, -1)):
                true = 1 / (1 + mpmath.exp(-sign * mpmath.mpf(x)))
                assert _holds(ball, i, true), f"σ({sign * x!r}) outside its ball"
                if true > 2.0**-960:  # below, σ(-|v|) = e σ(|v|) leaves the two-product's range
                    assert ball.rad[i] <= 0.6 * U * float(true), f"σ({sign * x!r}) is wide"


def _silu_balls(x: np.ndarray) -> tuple[Ball, Ball]:
    a = Ball.exact(x)
    value = SILU.enclose([a], None)
    (slope,) = SILU.enclose_vjp(Ball.exact(np.ones_like(x)), [a], value, None)
    return value, slope


@settings(max_examples=60, deadline=None, database=None)
@given(ARGUMENTS)
def test_silu_balls_hold_value_and_slope_and_are_half_an_ulp_wide(drawn: list[float]) -> None:
    """Where the product is in the two-product's range (``|a| < 2**995``, ``|a σ(a)| >
    2**-950``) the value's radius is at most 0.6 units of ``2**-53 |silu|`` and the slope's
    at most 0.6 of ``2**-53 (|slope| + 1/16)`` (it cancels near ``a = -1.28``); the spec's
    own value (mpmath's σ at 200 bits) is in the ball as well as the true one."""
    x = np.array(drawn)
    value, slope = _silu_balls(x)
    with mpmath.workprec(2300):
        for i, v in enumerate(x.tolist()):
            a = mpmath.mpf(v)
            gate = 1 / (1 + mpmath.exp(-a))
            true, true_slope = a * gate, gate * (1 + a * (1 - gate))
            assert _holds(value, i, true), f"silu({v!r}) outside its ball"
            assert _holds(slope, i, true_slope), f"silu'({v!r}) outside its ball"
            if abs(v) < 2.0**995 and abs(true) > 2.0**-950:
                assert value.rad[i] <= 0.6 * U * abs(float(true)), f"silu({v!r}) is wide"
            if abs(v) < 2.0**995 and v > -650:  # below, g times the slope leaves its range
                assert slope.rad[i] <= 0.6 * U * (abs(float(true_slope)) + 1 / 16), \
                    f"silu'({v!r}) is wide"
            if abs(v) < 1e6:  # the spec's own value (its Fraction arithmetic stays small)
                spec = Fraction(v) * exact_sigmoid(Fraction(v))[0]
                centre = Fraction(float(value.mid[i])) + Fraction(float(value.lo[i]))
                assert abs(spec - centre) <= Fraction(float(value.rad[i]))


@settings(max_examples=40, deadline=None, database=None)
@given(ARGUMENTS, st.lists(st.floats(0.0, 1e-3), min_size=24, max_size=24),
       st.sampled_from([SILU, SIGMOID]))
def test_narrow_balls_keep_the_midpoint_and_never_widen(drawn: list[float], radii: list[float],
                                                        op: object) -> None:
    """Against the wide rules (NumPy's value, trusted to a number of ulps), the narrow ball
    has the same midpoint, and ``|lo| + rad`` at most the wide radius, element by element,
    for argument balls with a radius too: so every ball, and the trace the budget reads
    (midpoints, radii as slack), is the wide one or tighter."""
    x = np.array(drawn)
    arg = Ball.of(x, np.array(radii[: x.size]) * np.abs(x))
    narrow = op.enclose([arg], None)  # type: ignore[attr-defined]
    wide = Gated.enclose(SILU, [arg], None) if op is SILU else _wide_sigmoid(arg)
    assert np.array_equal(narrow.mid, wide.mid)
    assert (np.abs(narrow.lo) + narrow.rad <= wide.rad).all()
    if op is SILU:
        g = Ball.exact(np.ones_like(x))
        (tight,) = SILU.enclose_vjp(g, [arg], narrow, None)
        (loose,) = Gated.enclose_vjp(SILU, g, [arg], wide, None)
        assert np.array_equal(tight.mid, loose.mid)
        assert (np.abs(tight.lo) + tight.rad <= np.abs(loose.lo) + loose.rad).all()


def _wide_sigmoid(arg: Ball) -> Ball:
    """The sigmoid ball before the narrow one: NumPy's σ ± (radius, rounding, 18 half-ulps)."""
    from resverify.spec.ball import add_up, half_ulp
    from resverify.spec.ops.sigmoid import LIBM_SIGMOID_ULPS, stable_sigmoid

    value = arg.mid + arg.lo
    mid = stable_sigmoid(value)
    return Ball.of(mid, add_up(arg.rad, half_ulp(value),
                               2 * (LIBM_SIGMOID_ULPS + 1) * half_ulp(mid)))


def test_balls_straddling_where_the_spec_carries_the_gate_as_1_or_0_hold_its_values() -> None:
    """At 512 the spec's σ turns to exactly 1 (its error ``2**-700``), at -1100 to 0: an
    argument ball across either holds the spec's value and slope at both of its ends."""
    mid = np.array([512.0, 512.0 - 2.0**-30, 511.5, -1100.0, -1099.5, 600.0])
    rad = np.array([2.0**-40, 2.0**-29, 1.0, 2.0**-40, 1.0, 100.0])
    check_balls(SILU, mid, rad)
    out = SIGMOID.enclose([Ball.of(mid, rad)], None)
    for i, (m, r) in enumerate(zip(mid.tolist(), rad.tolist(), strict=True)):
        for end in (Fraction(m) - Fraction(r), Fraction(m) + Fraction(r)):
            centre = Fraction(float(out.mid[i])) + Fraction(float(out.lo[i]))
            assert abs(exact_sigmoid(end)[0] - centre) <= Fraction(float(out.rad[i]))
