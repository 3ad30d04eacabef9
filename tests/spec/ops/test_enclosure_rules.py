"""The ops' enclosure rules, each called alone, for their mutation score (docs/strength.md §3).

:mod:`resverify.spec.enclosure` promises a ball ``|exact - (mid + lo)| <= rad`` for every
value. The generated tests in ``tests/spec/test_enclosure.py`` check it on whole programs,
where one rule's slack can hide another's bug; here each rule (the ball arithmetic of
:mod:`resverify.spec.ball` and the op entries' ``enclose`` and ``enclose_vjp``) is checked
alone, on balls with radii and low parts, against Fractions:

* containment: the ball holds the image of its arguments' balls (every corner, where the
  rule is monotone or bilinear in each argument, and the points in between where it is
  not), on adversarial inputs: cancellation, long dot products that take Dot2, tanh near 0
  and saturated, relu at and near 0, norms of near-constant rows;
* tightness, where the docstring promises it: a double-double keeps about 106 bits, so a
  ball of exact arguments is within ``2**-100`` of its value; a ball of enclosed
  arguments is at most twice as wide as their image; tanh adds the ulps of
  :data:`~resverify.spec.tanh_rules.LIBM_TANH_ULPS` and one of the spec's; Dot2 at most
  ``u|aᵀb| + γ_k² |a|ᵀ|b|``.

The rules are read from the op entries (``OP_TABLE[name].enclose`` and ``enclose_vjp``)
when the test runs, so a mutant of the rule is the rule under test.

The norms' radius formulas are then pinned term by term. The containment tests check that
a norm's ball holds the image of sample points of its argument's ball. Those points move
the output far less than the proven bound, so a rule that drops or weakens one term of its
radius still passes there. So each radius is also compared with the formula its docstring
states (:class:`~resverify.spec.ops.layer_norm.NormSpread`,
:meth:`~resverify.spec.ops.layer_norm.LayerNorm.enclose`), recomputed independently in
exact Fractions from the same exact row ``mid + lo`` and radii, as
``tests/spec/ops/test_budget_rules.py`` does for the budget rules:

* ``norm_spread``: ``r_max = min(1/sqrt(ε), 1/(σ(m) - rms(R)))`` where the gap is positive
  (else ``1/sqrt(ε)``), and ``y_top = min(r_max (|c_i(m)| + R_i + mean R), ceil(sqrt(n)))``;
* ``NormSpread.through``: ``r_max (rad_i + mean rad + y_top_i rms(rad))``;
* ``enclose`` and ``enclose_vjp``'s radii: the centre's own radius plus every documented term;
* the stand-ins of the spec's slack (``slack_rules()``; the trace the budget reads is the
  interpreter's, checked in ``tests/spec/test_enclosure.py``).

How close "equal" is: the code rounds every step up, so its result is at least the formula
and, on these rows of width at most 6, at most ``2**-40`` above it (``MARGIN``; measured:
below ``2**-45``). The formulas' square roots are integer square roots good to ``2**-220``,
so the lower check allows ``2**-200`` (``ROOT``), and the upper one ``2**-500`` absolute
(``FLOOR``): the code's bound of ``rms`` of a zero radius is about ``2**-537``, not 0. The
inputs are chosen so that each term is a visible share (above ``2**-12``) of the radius it
is part of: the spec's ``2**-190`` terms only show where the radii are near ``2**-200`` and
the spec's value is a float (``1/sqrt(σ² + ε)`` a power of two), the centre's own radius only
where the argument is exact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec import ball as ball_ops
from resverify.spec.enclosure import Ball
from resverify.spec.norm_rows import rows_of
from resverify.spec.ops import OP_TABLE, LayerNorm
from resverify.spec.ops import layer_norm as norm_rules
from resverify.spec.ops import tanh as tanh_rules
from resverify.spec.rational import TANH_PRECISION_BITS, exact_rsqrt, exact_tanh

TANH, RELU = OP_TABLE["tanh"], OP_TABLE["relu"]


def _rules(name: str) -> tuple[Any, Any]:
    """An op's enclosure rules, forward and reverse."""
    return OP_TABLE[name].enclose, OP_TABLE[name].enclose_vjp


U = 2.0**-53
TINY = Fraction(2) ** -1070  # a few subnormal ulps: the floor of every rounding bound
Points = list[np.ndarray]  # object arrays of Fractions, each one point of an image


def _ball(mid: list[float], lo: list[float] | None = None,
          rad: list[float] | None = None) -> Ball:
    m = np.array(mid, dtype=np.float64)
    low = np.zeros_like(m) if lo is None else np.array(lo, dtype=np.float64)
    r = np.zeros_like(m) if rad is None else np.array(rad, dtype=np.float64)
    return Ball(m, r, low)


def _q(value: Any) -> Fraction:
    """An element (a float or a Fraction) as a Fraction, exactly."""
    return value if isinstance(value, Fraction) else Fraction(float(value))


def _centre(ball: Ball) -> np.ndarray:
    """``mid + lo`` of every element, exactly."""
    out = np.empty(ball.mid.shape, dtype=object)
    out.reshape(-1)[:] = [Fraction(m) + Fraction(low) for m, low in
                          zip(ball.mid.reshape(-1).tolist(), ball.lo.reshape(-1).tolist(),
                              strict=True)]
    return out


def _corners(ball: Ball) -> tuple[np.ndarray, np.ndarray]:
    """The two ends of every element's interval, as Fractions."""
    c = _centre(ball)
    r = np.array([Fraction(v) for v in ball.rad.reshape(-1).tolist()],
                 dtype=object).reshape(ball.mid.shape)
    return c - r, c + r


def _assert_holds(ball: Ball, points: Points, call: str) -> None:
    """Every point lies in the ball, element by element."""
    c = _centre(ball)
    for point in points:
        for i in np.ndindex(*ball.mid.shape):
            gap = abs(_q(point[i]) - c[i])
            assert gap <= Fraction(float(ball.rad[i])), (
                f"{call}[{list(i)}]: exact {float(point[i])!r} is {float(gap)!r} from the "
                f"centre {float(c[i])!r}, but the radius is {float(ball.rad[i])!r}")


def _assert_tight(ball: Ball, points: Points, call: str, extra: np.ndarray | None = None,
                  scale: np.ndarray | None = None) -> None:
    """The radius is at most twice the image's half-width around the centre, plus
    ``2**-100`` of ``scale`` (the double-double's remainder; default the centre, else the
    terms' magnitudes, where they cancel), plus ``extra``."""
    c = _centre(ball)
    size = np.asarray(np.abs(c) if scale is None else scale, dtype=object)
    for i in np.ndindex(*ball.mid.shape):
        half = max(abs(_q(p[i]) - c[i]) for p in points)
        allowed = 2 * half + _q(size[i]) / 2**100 + TINY
        if extra is not None:
            allowed += Fraction(float(np.broadcast_to(extra, ball.mid.shape)[i]))
        assert Fraction(float(ball.rad[i])) <= allowed, (
            f"{call}[{list(i)}]: radius {float(ball.rad[i])!r}, but the image is "
            f"{float(half)!r} wide around {float(c[i])!r} (allowed {float(allowed)!r})")


def _fractions(values: np.ndarray) -> np.ndarray:
    out = np.empty(np.shape(values), dtype=object)
    out.reshape(-1)[:] = [Fraction(v) for v in np.asarray(values).reshape(-1).tolist()]
    return out


# --- the rules on sample points of their argument balls: containment and tightness ---

# ----------------------------------------------------------------------------------------
# add, mul, constant: bilinear, so the image of two balls is reached at their corners

# mid, lo, rad of two arguments: cancellation, enclosed values, low parts, subnormals
PAIRS = {
    "exact values": (([1.0, 3.0, -7.5, 1e-200], None, None),
                     ([2.0**-60, 1.0 / 3, 7.5, 3.0], None, None)),
    "cancellation with low parts": (([1.0, 1e16, -0.1], [2.0**-60, -1.0, 2.0**-70], None),
                                    ([-1.0, -1e16, 0.1], [2.0**-61, 0.5, -2.0**-71], None)),
    "enclosed arguments": (([1.5, -2.0, 0.0, 1e10], [2.0**-56, 0.0, 0.0, 2.0**-20],
                            [2.0**-30, 0.25, 1.0, 3.0]),
                           ([-0.75, 3.0, 5.0, 1e-10], [0.0, 2.0**-55, 0.0, 0.0],
                            [2.0**-40, 0.5, 0.0, 2.0**-80])),
    "one argument exact": (([2.0, -3.0, 1e-5], None, [0.5, 2.0**-20, 1e-12]),
                           ([1.0 / 3, 7.0, -1e5], [1e-17, 0.0, 0.0], None)),
    "subnormals": (([5e-324, -1e-310, 2.0**-1000], None, [5e-324, 0.0, 2.0**-1010]),
                   ([3.0, 5e-324, -2.0**-20], None, [0.0, 5e-324, 0.0])),
}
REFUSED = {("mul", "subnormals")}
"""Products below the two-product's safe range: the ball's radius is infinite (the request
goes to the exact path); everywhere else it is finite."""


def _pair(name: str) -> tuple[Ball, Ball]:
    first, second = PAIRS[name]
    return _ball(*first), _ball(*second)


def _image(f: Callable[[Fraction, Fraction], Fraction], a: Ball, b: Ball) -> Points:
    ends_a, ends_b = _corners(a), _corners(b)
    return [np.vectorize(f, otypes=[object])(x, y) for x in ends_a for y in ends_b]


BINARY: dict[str, tuple[Callable[[Ball, Ball], Ball], Callable[[Fraction, Fraction], Fraction]]]
BINARY = {"add": (ball_ops.add, lambda x, y: x + y), "mul": (ball_ops.mul, lambda x, y: x * y)}


@pytest.mark.parametrize("case", sorted(PAIRS))
@pytest.mark.parametrize("op", sorted(BINARY))
def test_an_elementwise_ball_holds_the_image_of_its_argument_balls(op: str, case: str) -> None:
    rule, exact = BINARY[op]
    a, b = _pair(case)
    out = rule(a, b)
    finite = np.isfinite(out.rad)
    assert finite.all() != ((op, case) in REFUSED), f"{op}({case}): radii {out.rad}"
    if not finite.all():
        return
    points = _image(exact, a, b)
    _assert_holds(out, points, f"{op}({case})")
    ca, cb = np.abs(_centre(a)), np.abs(_centre(b))
    _assert_tight(out, points, f"{op}({case})", scale=ca + cb if op == "add" else ca * cb)


@pytest.mark.parametrize("value", [Fraction(1, 3), Fraction(-2, 7), Fraction(1, 10**30),
                                   Fraction(10**40, 3)])
def test_a_constant_is_enclosed_to_a_double_double(value: Fraction) -> None:
    ball = ball_ops.constant(value)
    _assert_holds(ball, [np.array(value, dtype=object)], f"constant({value})")
    assert 0 < Fraction(float(ball.rad)) <= abs(value) / 2**100, (
        f"constant({value}): radius {float(ball.rad)!r}, want in (0, 2**-100 |value|]")


@pytest.mark.parametrize("value", [Fraction(3, 2), Fraction(1) + Fraction(1, 2**80),
                                   Fraction(-5, 2**1000)])
def test_a_constant_that_is_a_double_double_has_radius_zero(value: Fraction) -> None:
    ball = ball_ops.constant(value)
    assert float(ball.rad) == 0.0, f"constant({value}): radius {float(ball.rad)!r}, want 0"
    assert Fraction(float(ball.mid)) + Fraction(float(ball.lo)) == value, f"constant({value})"


# ----------------------------------------------------------------------------------------
# tanh and relu, and their reverse rules


def _spec_tanh(x: Fraction) -> Fraction:
    return exact_tanh(x)[0]


TANH_ARGS = {
    "near 0": ([0.0, 1e-300, -1e-8, 2.0**-30, 5e-324], [0.0, 0.0, 1e-25, 2.0**-90, 0.0],
               [0.0, 1e-310, 1e-20, 2.0**-60, 5e-324]),
    "middle": ([0.5, -0.7, 1.3, 3.0], [2.0**-56, -2.0**-57, 0.0, 2.0**-52],
               [2.0**-40, 0.0, 2.0**-10, 0.25]),
    "saturated": ([19.0, -25.0, 400.0, 20.0], [0.0, 1e-15, 0.0, 0.0],
                  [0.0, 0.0, 1.0, 2.0**-30]),
}


@pytest.mark.parametrize("case", sorted(TANH_ARGS))
def test_a_tanh_ball_holds_the_spec_tanh_of_its_argument_ball(case: str) -> None:
    """tanh is increasing: the image of an interval is between its ends' images. The ball
    is at most twice as wide as that image plus the rounding of ``mid + lo`` and
    ``LIBM_TANH_ULPS + 1`` ulps of the value (the platform's tanh and the spec's)."""
    a = _ball(*TANH_ARGS[case])
    out = TANH.enclose([a], None)
    points = [np.vectorize(_spec_tanh, otypes=[object])(end) for end in _corners(a)]
    _assert_holds(out, points, f"tanh({case})")
    value = a.mid + a.lo
    for i in np.ndindex(*a.mid.shape):  # 1-Lipschitz: the argument's radius passes through
        allowed = (1 + Fraction(1, 2**40)) * (
            _q(a.rad[i]) + _q(np.spacing(abs(value[i]))) / 2
            + (tanh_rules.LIBM_TANH_ULPS + 1) * Fraction(np.spacing(abs(out.mid[i])))) + TINY
        assert _q(out.rad[i]) <= allowed, (
            f"tanh({case})[{i}]: radius {out.rad[i]!r}, allowed {float(allowed)!r}")


def test_np_tanh_is_within_the_ulps_the_tanh_ball_allows() -> None:
    """``LIBM_TANH_ULPS`` covers the platform's tanh, measured against the spec's, and is
    at least the 2 ulps glibc documents."""
    assert tanh_rules.LIBM_TANH_ULPS >= 2, tanh_rules.LIBM_TANH_ULPS
    x = np.linspace(-20, 20, 2001) + 2.0**-40
    got = np.tanh(x)
    worst = max(abs(Fraction(float(t)) - _spec_tanh(Fraction(float(v)))) / Fraction(
        float(np.spacing(abs(t)))) for v, t in zip(x, got, strict=True))
    assert worst <= tanh_rules.LIBM_TANH_ULPS, f"np.tanh off by {float(worst)} ulps"


RELU_ARGS = {
    "at 0": ([0.0, -0.0, 0.0, 5e-324, -5e-324], None, [0.0, 0.0, 1.0, 0.0, 5e-324]),
    "near 0": ([1e-300, -1e-300, 2.0**-60, -1.0], [0.0, 0.0, -2.0**-61, 0.0],
               [2e-300, 5e-301, 2.0**-62, 2.0]),
    "far from 0": ([3.0, -3.0, 0.5], [2.0**-55, 2.0**-55, 0.0], [1.0, 1.0, 2.0**-40]),
    "low part decides": ([1.0, -1.0], [-1.0 + 2.0**-53, 1.0 - 2.0**-53], [0.0, 0.0]),
}


def _relu(x: Fraction) -> Fraction:
    return max(x, Fraction(0))


@pytest.mark.parametrize("case", sorted(RELU_ARGS))
def test_a_relu_ball_holds_the_relu_of_its_argument_ball(case: str) -> None:
    a = _ball(*RELU_ARGS[case])
    out = RELU.enclose([a], None)
    points = [np.vectorize(_relu, otypes=[object])(end) for end in _corners(a)]
    _assert_holds(out, points, f"relu({case})")
    _assert_relu_tight(out, a, a, f"relu({case})")


def _assert_relu_tight(out: Ball, x: Ball, passed: Ball, call: str) -> None:
    """Where the exact argument is surely positive the ball is ``passed`` itself, where it is
    surely negative exactly 0, and where its sign is unknown the hull ``0 ± size``."""
    low, high = _corners(x)
    for i in np.ndindex(*x.mid.shape):
        if _q(low[i]) > abs(_q(_centre(x)[i])) / 2**50 + TINY:
            kept = (out.mid[i], out.rad[i], out.lo[i])
            assert kept == (passed.mid[i], passed.rad[i], passed.lo[i]), f"{call}[{i}]: {kept}"
        elif -_q(high[i]) > abs(_q(_centre(x)[i])) / 2**50 + TINY:
            assert (out.mid[i], out.rad[i], out.lo[i]) == (0, 0, 0), f"{call}[{i}]: not 0"
        else:
            assert out.mid[i] == 0 and out.lo[i] == 0, f"{call}[{i}]: centre not 0"
            size = abs(_q(passed.mid[i])) + abs(_q(passed.lo[i])) + _q(
                passed.rad[i])
            assert _q(out.rad[i]) <= size * (1 + Fraction(1, 2**48)) + TINY, (
                f"{call}[{i}]: radius {out.rad[i]!r}, above the hull's {float(size)!r}")


COTANGENT = _ball([1.5, -2.0, 3.0, 0.25, -1.0], [2.0**-60, 0.0, 0.0, 0.0, 2.0**-58],
                  [0.0, 0.5, 2.0**-30, 0.0, 0.125])


def _cotangent(n: int) -> Ball:
    return Ball(COTANGENT.mid[:n], COTANGENT.rad[:n], COTANGENT.lo[:n])


@pytest.mark.parametrize("case", sorted(RELU_ARGS))
def test_a_relu_cotangent_ball_holds_every_cotangent_the_argument_ball_allows(case: str
                                                                              ) -> None:
    """``ḡ·[x > 0]``: ḡ where the whole ball is positive, 0 where it is not, and both
    where it straddles 0."""
    x = _ball(*RELU_ARGS[case])
    g = _cotangent(x.mid.size)
    out = RELU.enclose_vjp(g, [x], x, None)[0]
    points = [np.where(np.vectorize(lambda v: v > 0, otypes=[bool])(end), ge, 0)
              for end in _corners(x) for ge in _corners(g)]
    _assert_holds(out, points, f"relu_vjp({case})")
    _assert_relu_tight(out, x, g, f"relu_vjp({case})")


def test_relu_reads_the_sign_of_the_exact_value_not_of_the_midpoint() -> None:
    """``mid + lo`` with opposite signs: the exact value's sign decides."""
    x = _ball([1.0, -1.0], [-1.0 - 2.0**-52, 1.0 + 2.0**-52])
    out = RELU.enclose([x], None)
    back = RELU.enclose_vjp(_ball([2.0, 3.0]), [x], x, None)[0]
    assert list(_centre(out)) == [0, 2.0**-52], f"relu({list(_centre(x))}) = {list(_centre(out))}"
    assert list(_centre(back)) == [0, 3], f"relu_vjp(2, 3; x) = {list(_centre(back))}"
    assert out.rad.tolist() == [0.0, 0.0] and back.rad.tolist() == [0.0, 0.0], (
        f"radii {out.rad.tolist()}, {back.rad.tolist()}, want 0: the signs are known")


@pytest.mark.parametrize("case", sorted(TANH_ARGS))
def test_a_tanh_cotangent_ball_holds_every_slope_the_output_ball_allows(case: str) -> None:
    """``ḡ (1 - t²)`` for every ḡ and t in their balls (``1 - t²`` peaks at t = 0)."""
    a = _ball(*TANH_ARGS[case])
    t = TANH.enclose([a], None)
    g = _cotangent(t.mid.size)
    out = TANH.enclose_vjp(g, [t], t, None)[0]
    ends = list(_corners(t))
    low, high = ends
    ends.append(np.where((low < 0) & (high > 0), 0, low))
    points = [ge * (1 - te * te) for te in ends for ge in _corners(g)]
    _assert_holds(out, points, f"tanh_vjp({case})")
    _assert_tight(out, points, f"tanh_vjp({case})")


# ----------------------------------------------------------------------------------------
# dot products and sums


def _matrix(rng: np.random.Generator, shape: tuple[int, int], radius: float) -> Ball:
    mid = rng.standard_normal(shape)
    lo = rng.standard_normal(shape) * np.spacing(np.abs(mid)) / 4
    return Ball(mid, radius * np.abs(rng.standard_normal(shape)), lo)


def _dot_image(a: Ball, b: Ball) -> Points:
    """The least and the largest ``aᵀb`` over the balls, per output: each term's extremes
    are at its two factors' corners, and the terms are independent."""
    a_ends, b_ends = _corners(a), _corners(b)
    (m, k), n = a.mid.shape, b.mid.shape[1]
    low = np.empty((m, n), dtype=object)
    high = np.empty((m, n), dtype=object)
    for i, j in itertools.product(range(m), range(n)):
        terms = [[x[i, t] * y[t, j] for x in a_ends for y in b_ends] for t in range(k)]
        low[i, j], high[i, j] = sum(map(min, terms)), sum(map(max, terms))
    return [low, high]


DOTS = {  # (m, k, n): fsum when k <= 8 or m n <= 64, Dot2 otherwise; k == 1 the outer
    "outer": (3, 1, 4), "short": (3, 5, 4), "few outputs": (2, 30, 3), "Dot2": (9, 24, 8)}


@pytest.mark.parametrize("radius", [0.0, 2.0**-40])
@pytest.mark.parametrize("shape", sorted(DOTS))
def test_a_dot_ball_holds_the_image_of_its_argument_balls(shape: str, radius: float) -> None:
    m, k, n = DOTS[shape]
    rng = np.random.default_rng(k)
    a, b = _matrix(rng, (m, k), radius), _matrix(rng, (k, n), radius)
    out = ball_ops.dot(a, b)
    points = _dot_image(a, b)
    _assert_holds(out, points, f"dot{(m, k, n)} radius {radius}")
    if radius:  # the radii's spread: |a|·rad_b + rad_a·|b|, sizes with the radii
        _assert_tight(out, points, f"dot{(m, k, n)} radius {radius}")


def _cancelling(m: int, k: int, n: int) -> tuple[Ball, Ball]:
    """Rows ``x, -x, x·2**-60, ...`` against columns of ones and thirds: huge terms that
    cancel, leaving a value far below them that no float sum gets right."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((m, k // 2)) * 2.0 ** rng.integers(-30, 30, (m, k // 2))
    a = np.concatenate([x, -x * (1 + 2.0**-52)], axis=1)
    b = np.concatenate([np.full((k // 2, n), 1.0 / 3), np.full((k // 2, n), 1.0 / 3)])
    b[0] += 2.0**-40 * np.arange(n)
    return Ball.exact(a), Ball.exact(b)


@pytest.mark.parametrize("shape", ["short", "few outputs", "Dot2"])
def test_a_dot_of_cancelling_terms_holds_the_exact_value(shape: str) -> None:
    m, k, n = DOTS[shape]
    a, b = _cancelling(m, k, n)
    out = ball_ops.dot(a, b)
    exact = _fractions(a.mid) @ _fractions(b.mid)
    _assert_holds(out, [exact], f"dot{(m, k, n)} cancelling")


@pytest.mark.parametrize("shape", ["short", "Dot2"])
def test_a_dot_with_a_product_below_the_safe_range_refuses_that_output(shape: str) -> None:
    """A product below the two-product's safe range (2**-969) may not be split exactly: its
    output's radius is infinite (the request goes to the exact path); an exact zero factor
    is safe, and the other outputs stay finite."""
    m, k, n = DOTS[shape]
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    a[0, 0], b[0, 0], a[1, 0] = 1e-150, 1e-150, 0.0
    out = ball_ops.dot(Ball.exact(a), Ball.exact(b))
    refused = ~np.isfinite(out.rad)
    want = np.zeros((m, n), dtype=bool)
    want[0, 0] = True
    assert np.array_equal(refused, want), (
        f"dot{(m, k, n)} with a[0,0] b[0,0] = 1e-300: refused at {np.argwhere(refused)}")
    exact = _fractions(a) @ _fractions(b)
    _assert_holds(Ball(out.mid[1:], out.rad[1:], out.lo[1:]), [exact[1:]], f"dot{(m, k, n)}")


@pytest.mark.parametrize("cancel", [False, True])
def test_dot2_error_is_within_its_proven_bound(cancel: bool) -> None:
    """Dot2 (Ogita, Rump and Oishi, Prop. 5.5) is within ``u|aᵀb| + γ_k² |a|ᵀ|b|``; the ball
    holds the exact value and is no wider than that bound (plus a few roundings of it)."""
    m, k, n = DOTS["Dot2"]
    a, b = _cancelling(m, k, n) if cancel else (
        Ball.exact(np.random.default_rng(1).standard_normal((m, k))),
        Ball.exact(np.random.default_rng(2).standard_normal((k, n))))
    out = ball_ops.dot(a, b)
    exact = _fractions(a.mid) @ _fractions(b.mid)
    _assert_holds(out, [exact], f"Dot2 {(m, k, n)}")
    gamma = Fraction(k) * Fraction(U) / (1 - Fraction(k) * Fraction(U))
    sizes = _fractions(np.abs(a.mid)) @ _fractions(np.abs(b.mid))
    for i in np.ndindex(m, n):
        bound = Fraction(U) * abs(exact[i]) + gamma**2 * sizes[i]
        assert Fraction(float(out.rad[i])) <= bound * (1 + Fraction(1, 2**40)) + TINY, (
            f"Dot2 {(m, k, n)}[{list(i)}]: radius {float(out.rad[i])!r} above the proven "
            f"{float(bound)!r}")


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1)])
def test_a_sum_ball_holds_the_image_of_its_argument_ball(axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(5)
    x = _matrix(rng, (4, 6), 2.0**-30)
    x.mid[0] = [1e16, 1.0, -1e16, 2.0**-60, 3.0, -3.0]
    out = ball_ops.reduce_sum(x, axes)
    low, high = _corners(x)
    points = [np.array(low.sum(axis=axes), dtype=object),
              np.array(high.sum(axis=axes), dtype=object)]
    _assert_holds(out, points, f"sum over {axes}")
    _assert_tight(out, points, f"sum over {axes}")


def test_unbroadcast_sums_over_the_added_and_the_stretched_axes() -> None:
    rng = np.random.default_rng(6)
    g = _matrix(rng, (3, 4), 2.0**-30).reshape((1, 3, 4))
    for shape, axes in [((4,), (0, 1)), ((3, 1), (0, 2)), ((1, 4), (0, 1)), ((3, 4), (0,))]:
        out = ball_ops.unbroadcast(g, shape)
        low, high = _corners(g)
        points = [low.sum(axis=axes).reshape(shape), high.sum(axis=axes).reshape(shape)]
        assert out.mid.shape == shape, f"unbroadcast to {shape}: shape {out.mid.shape}"
        _assert_holds(out, points, f"unbroadcast to {shape}")
        _assert_tight(out, points, f"unbroadcast to {shape}")


# ----------------------------------------------------------------------------------------
# layer_norm and rms_norm, the rules built afresh


def _jacobian_signs(op: LayerNorm, x: np.ndarray, eps: Fraction) -> np.ndarray:
    """Signs of ``∂y_i/∂x_j`` at ``x``, in float64: ``r (I - 1/n - y yᵀ/n)`` (no 1/n term
    for rms_norm)."""
    n = x.size
    c = x - x.mean() if op.centred else x
    r = 1 / math.sqrt(float((c * c).mean()) + float(eps))
    y = c * r
    jac = r * (np.eye(n) - (1 / n if op.centred else 0) - np.outer(y, y) / n)
    return np.sign(jac)


NORM_ROWS = {
    "general": [0.3, -1.2, 2.5, 0.7, -0.1, 1.9],
    "near constant": [7.0, 7.0 + 2.0**-40, 7.0 - 2.0**-40, 7.0, 7.0 + 2.0**-39, 7.0],
    "large mean": [2.0**20, 2.0**20 + 0.5, 2.0**20 - 0.25, 2.0**20 + 1.0],
    "one large": [1e-3, 2e-3, -1e-3, 5.0],
    "outlier": [0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
    "spread near its radius": [0.01, -0.01, 0.02, -0.02, 0.0, 0.005],
}
BATCH = ("general", "near constant")  # two rows of width 6, normalised each on its own


def _norm_points(op: LayerNorm, x: Ball, eps: Fraction) -> Iterator[np.ndarray]:
    """The centre, and for each output i the point of the argument ball that pushes y_i
    furthest each way (δ_j = ± R_j sign ∂y_i/∂x_j at the centre)."""
    c = _centre(x)
    yield c
    radii = _fractions(x.rad)
    centred = x.mid - x.mid.mean() if op.centred else x.mid
    inward = np.array([Fraction(int(s)) for s in np.sign(centred)], dtype=object) * radii
    yield c - inward  # the row's spread shrinks most: 1/sqrt(σ² + ε) grows most
    for row in _jacobian_signs(op, x.mid, eps):
        step = np.array([Fraction(int(s)) for s in row], dtype=object) * radii
        yield c + step
        yield c - step


@pytest.mark.parametrize("radius", [0.0, 2.0**-44, 2.0**-20])
@pytest.mark.parametrize("row", sorted(NORM_ROWS))
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_a_norm_ball_holds_the_spec_norm_over_its_argument_ball(name: str, row: str,
                                                                 radius: float) -> None:
    op = OP_TABLE[name]
    assert isinstance(op, LayerNorm)
    eps = Fraction(1, 10**5)
    mid = np.array(NORM_ROWS[row])
    x = Ball(mid, radius * (1 + np.arange(mid.size) % 3), np.zeros_like(mid))
    forward, _ = _rules(name)
    out = forward([x], eps)
    points = [op.exact([p], eps) for p in _norm_points(op, x, eps)]
    _assert_holds(out, points, f"{name}({row}) radius {radius}")


@pytest.mark.parametrize("radius", [0.0, 2.0**-44, 2.0**-20])
@pytest.mark.parametrize("row", sorted(NORM_ROWS))
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_a_norm_cotangent_ball_holds_the_spec_vjp_over_its_argument_balls(
        name: str, row: str, radius: float) -> None:
    op = OP_TABLE[name]
    assert isinstance(op, LayerNorm)
    eps = Fraction(1, 10**5)
    mid = np.array(NORM_ROWS[row])
    x = Ball(mid, radius * (1 + np.arange(mid.size) % 3), np.zeros_like(mid))
    g = Ball(np.linspace(-1.0, 2.0, mid.size), np.full(mid.size, radius * 4),
             np.zeros(mid.size))
    forward, reverse = _rules(name)
    (out,) = reverse(g, [x], forward([x], eps), eps)
    points = [op.exact_vjp(ge, [p], op.exact([p], eps), eps)[0]
              for p in _norm_points(op, x, eps) for ge in _corners(g)]
    _assert_holds(out, points, f"{name}_vjp({row}) radius {radius}")


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_an_exact_norm_ball_is_within_a_few_ulps_of_its_value(name: str) -> None:
    """Exact arguments: the centre is the spec's value rounded to a double-double, widened by
    the spec's 2**-199 relative error only."""
    op = OP_TABLE[name]
    eps = Fraction(1, 10**5)
    x = Ball.exact(np.array(NORM_ROWS["general"]))
    forward, reverse = _rules(name)
    out = forward([x], eps)
    exact = op.exact([_centre(x)], eps)
    _assert_holds(out, [exact], name)
    _assert_tight(out, [exact], name)
    g = Ball.exact(np.linspace(-1.0, 2.0, 6))
    (back,) = reverse(g, [x], out, eps)
    exact_back = op.exact_vjp(_centre(g), [_centre(x)], exact, eps)[0]
    _assert_holds(back, [exact_back], f"{name}_vjp")
    _assert_tight(back, [exact_back], f"{name}_vjp")


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_a_batch_of_norm_rows_is_enclosed_row_by_row(name: str) -> None:
    """Two rows of different scale in one argument: each row's mean, variance and
    cotangent size are its own (a rule reading the whole batch widens or shifts them)."""
    op = OP_TABLE[name]
    assert isinstance(op, LayerNorm)
    eps = Fraction(1, 10**5)
    mid = np.array([NORM_ROWS[row] for row in BATCH])
    x = Ball(mid, np.full(mid.shape, 2.0**-30), np.zeros_like(mid))
    g = Ball(np.array([np.linspace(-1.0, 2.0, 6), np.linspace(1e-3, 2e-3, 6)]),
             np.full(mid.shape, 2.0**-40), np.zeros_like(mid))
    forward, reverse = _rules(name)
    out = forward([x], eps)
    (back,) = reverse(g, [x], out, eps)
    for r, row in enumerate(BATCH):
        xr = Ball(x.mid[r], x.rad[r], x.lo[r])
        gr = Ball(g.mid[r], g.rad[r], g.lo[r])
        points = list(_norm_points(op, xr, eps))
        alone = Ball(out.mid[r], out.rad[r], out.lo[r])
        _assert_holds(alone, [op.exact([p], eps) for p in points], f"{name} row {row}")
        single = forward([xr], eps)  # equal up to the roundings of a batched matmul
        assert np.allclose(alone.rad, single.rad, rtol=2.0**-40, atol=0), (
            f"{name} row {row}: radius {alone.rad} in the batch, {single.rad} alone")
        back_r = Ball(back.mid[r], back.rad[r], back.lo[r])
        (back_alone,) = reverse(gr, [xr], single, eps)
        assert np.allclose(back_r.rad, back_alone.rad, rtol=2.0**-40, atol=0), (
            f"{name}_vjp row {row}: radius {back_r.rad} in the batch, {back_alone.rad} alone")
        assert np.array_equal(back_r.mid, back_alone.mid), f"{name}_vjp row {row}: centre"


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
def test_a_norm_of_no_rows_is_empty(name: str) -> None:
    forward, reverse = _rules(name)
    x = Ball.exact(np.zeros((0, 4)))
    out = forward([x], Fraction(1, 10**5))
    (back,) = reverse(Ball.exact(np.zeros((0, 4))), [x], out, Fraction(1, 10**5))
    assert out.mid.shape == back.mid.shape == back.rad.shape == (0, 4), (
        f"{name} of a (0, 4) argument: {out.mid.shape}, {back.mid.shape}")


# --- the norms' radius formulas, term by term ---

F = Fraction
MARGIN = F(1, 2**40)
"""How far above the formula the code's rounded-up result may lie (relative)."""
ROOT = F(1, 2**200)
"""How far below it: the formula's own accuracy (its square roots are good to 2**-220)."""
FLOOR = F(1, 2**500)
"""Absolute room above it: the code bounds ``rms`` of a zero radius by about 2**-537."""
S = F(2) ** (10 - TANH_PRECISION_BITS)
"""``s``, the bound of the spec's relative error of ``1/sqrt`` the docstring uses (2**-190)."""
NAMES = ("layer_norm", "rms_norm")
Row = list[Fraction]


# ----------------------------------------------------------------------------------------
# the formulas, in Fractions


def _sqrt(x: Fraction) -> Fraction:
    """``sqrt(x)`` within ``2**-220`` relative (just above it), by an integer square root."""
    if not x:
        return F(0)
    p, q = x.numerator, x.denominator
    return F(math.isqrt((p * q) << 440) + 1, q << 220)


def _mean(v: Row) -> Fraction:
    return sum(v, F(0)) / len(v)


def _rms(v: Row) -> Fraction:
    return _sqrt(_mean([e * e for e in v]))


def _root_n(n: int) -> Fraction:
    """``sqrt(n)`` rounded up to an integer (as ``LayerNorm._constants`` rounds it)."""
    root = math.isqrt(n)
    return F(root + (root * root != n))


def _gap(centred: bool, a: Row, big_r: Row) -> Fraction:
    """``σ(m) - rms(R)``: σ the rms of the row, centred when the norm centres."""
    mean = _mean(a) if centred else F(0)
    return _rms([v - mean for v in a]) - _rms(big_r)


def _r_max(centred: bool, a: Row, big_r: Row, eps: Fraction) -> Fraction:
    """``min(1/sqrt(ε), 1/(σ(m) - rms(R)))`` where the gap is positive, else ``1/sqrt(ε)``."""
    gap = _gap(centred, a, big_r)
    r_eps = 1 / _sqrt(eps)
    return min(r_eps, 1 / gap) if gap > 0 else r_eps


def _y_top(centred: bool, a: Row, big_r: Row, r_max: Fraction) -> Row:
    """``min(r_max (|c_i(m)| + R_i + mean R), sqrt(n) rounded up)``, the mean when centred."""
    mean = _mean(a) if centred else F(0)
    shift = _mean(big_r) if centred else F(0)
    return [min(r_max * (abs(v - mean) + r + shift), _root_n(len(a)))
            for v, r in zip(a, big_r, strict=True)]


def _through(centred: bool, r_max: Fraction, y_top: Row, rad: Row) -> Row:
    """``r_max (rad_i + mean rad + y_top_i rms(rad))``, the mean only when centred."""
    mean = _mean(rad) if centred else F(0)
    rms = _rms(rad)
    return [r_max * (d + mean + y * rms) for d, y in zip(rad, y_top, strict=True)]


@dataclass(frozen=True)
class Spread:
    """One row's ``r_max`` and ``y_top`` by the formulas."""

    r_max: Fraction
    y_top: Row


def _spread(centred: bool, a: Row, big_r: Row, eps: Fraction) -> Spread:
    r_max = _r_max(centred, a, big_r, eps)
    return Spread(r_max, _y_top(centred, a, big_r, r_max))


def _forward_rad(centred: bool, a: Row, big_r: Row, eps: Fraction, centre: Row) -> Row:
    """``centre.rad + through(R) + 2 y_top s``."""
    s = _spread(centred, a, big_r, eps)
    dy = _through(centred, s.r_max, s.y_top, big_r)
    return [c + d + 2 * y * S for c, d, y in zip(centre, dy, s.y_top, strict=True)]


def _reverse_rad(centred: bool, a: Row, big_r: Row, eps: Fraction, g_size: Row, g_rad: Row,
                 centre: Row) -> Row:
    """``centre.rad + through(rad_ḡ) + moved + spec``: ``moved`` is ``|Δr| |Pḡ - y m|
    + r |Δy_i| |m| + r |y_i| |Δm|`` with ``|Δr| <= r_max² rms(R)``, ``|Pḡ| <= k G``,
    ``|m| <= G``, ``|Δy| <= dy = through(R)``, ``|Δm| <= G mean(dy)``; ``spec`` is
    ``2 r_max G (k + 4 y_top) s``."""
    k = 2 if centred else 1
    s = _spread(centred, a, big_r, eps)
    big_g = max(g_size)
    dy = _through(centred, s.r_max, s.y_top, big_r)
    d_r = s.r_max * s.r_max * _rms(big_r)
    mean_dy = _mean(dy)
    moved = [d_r * (k * big_g + y * big_g) + s.r_max * d * big_g + s.r_max * y * big_g * mean_dy
             for d, y in zip(dy, s.y_top, strict=True)]
    spec = [2 * s.r_max * big_g * (k + 4 * y) * S for y in s.y_top]
    own = _through(centred, s.r_max, s.y_top, g_rad)
    return [c + o + m + p for c, o, m, p in zip(centre, own, moved, spec, strict=True)]


# ----------------------------------------------------------------------------------------
# reading arrays, and the check


def _rows(values: np.ndarray) -> list[Row]:
    """The rows (last axis) of a float array, as Fractions."""
    flat = np.asarray(values, dtype=np.float64)
    return [[F(v) for v in row] for row in flat.reshape(-1, flat.shape[-1]).tolist()]


def _exact_rows(ball: Ball) -> list[Row]:
    """The rows of ``mid + lo``, exactly."""
    return [[m + low for m, low in zip(mr, lr, strict=True)]
            for mr, lr in zip(_rows(ball.mid), _rows(ball.lo), strict=True)]


def _sizes(ball: Ball) -> list[Row]:
    """``|mid| + |lo| + rad`` per element, exactly."""
    return [[abs(m) + abs(low) + r for m, low, r in zip(mr, lr, rr, strict=True)]
            for mr, lr, rr in zip(_rows(ball.mid), _rows(ball.lo), _rows(ball.rad),
                                  strict=True)]


def _double_double(value: Fraction) -> tuple[float, float, Fraction]:
    """``value`` rounded to ``mid + lo`` (each to nearest) and the radius the docstring of
    ``_from_fractions`` gives it: an ulp of ``lo`` (the least subnormal for ``lo = 0``)."""
    mid = float(value)
    lo = float(value - F(mid))
    return mid, lo, F(math.ulp(abs(lo)))


def _assert_rounded_up(actual: np.ndarray, formula: Sequence[Row], call: str) -> None:
    """Every element of ``actual`` (rows on the last axis) is its formula rounded up:
    at least ``formula (1 - ROOT)``, at most ``formula (1 + MARGIN) + FLOOR``."""
    __tracebackhide__ = True
    got = _rows(actual)
    assert len(got) == len(formula), f"{call}: {len(got)} rows, but should be {len(formula)}"
    for r, (got_row, want_row) in enumerate(zip(got, formula, strict=True)):
        assert len(got_row) == len(want_row), (
            f"{call}: row {r} has {len(got_row)} elements, but should have {len(want_row)}")
        for i, (value, want) in enumerate(zip(got_row, want_row, strict=True)):
            low, high = want * (1 - ROOT), want * (1 + MARGIN) + FLOOR
            assert low <= value <= high, (
                f"{call}[row {r}, {i}]={float(value)!r}, but should be the formula "
                f"{float(want)!r} rounded up (relative {float(value / want - 1) if want else 0:.3g}"
                f", allowed [-2**-200, 2**-40])")


# ----------------------------------------------------------------------------------------
# _norm_spread: r_max and y_top


@dataclass(frozen=True)
class Case:
    """An argument ball (``mid``, ``lo``, ``rad``, rows on the last axis) and ``ε``."""

    mid: list[list[float]]
    lo: list[list[float]]
    rad: list[list[float]]
    eps: Fraction
    shape: tuple[int, ...]

    def ball(self) -> Ball:
        return Ball(*(np.array(v, dtype=np.float64).reshape(self.shape)
                      for v in (self.mid, self.rad, self.lo)))


def _case(mid: list[list[float]], rad: list[list[float]], eps: Fraction,
          lo: list[list[float]] | None = None, shape: tuple[int, ...] | None = None) -> Case:
    low = lo if lo is not None else [[0.0] * len(row) for row in mid]
    return Case(mid, low, rad, eps, shape or (len(mid), len(mid[0])))


EPS = F(1, 10**5)
T = 2.0**-51
SPREAD_CASES = {
    # σ(m) well above rms(R), 1/gap far below 1/sqrt(ε), a centred element 0 (there y_top is
    # r_max (R_i + mean R) alone), low parts in the second row
    "1/gap, two rows with low parts": _case(
        [[2.0, 0.5, 3.5, 2.0, -1.0, 5.0], [10.0, 10.5, 9.0, 10.0, 11.0, 9.5]],
        [[0.25, 0.5, 0.125, 0.375, 0.25, 0.5], [2.0**-10, 2.0**-9, 2.0**-10, 0.0, 2.0**-8, 0.0]],
        EPS, lo=[[0.0] * 6, [T, 0.0, -T / 2, 0.0, T, 0.0]]),
    # three rows under two leading axes: gap <= 0 (r_max = 1/sqrt(ε), every y_top clipped),
    # a gap below sqrt(ε) (1/gap above 1/sqrt(ε)), and an outlier whose y_top alone is clipped
    "gap <= 0, gap below sqrt(eps), one clipped": _case(
        [[0.5, -0.5, 0.5, -0.5], [2.0**-40, -(2.0**-40), 2.0**-41, 0.0], [0.0, 0.0, 0.0, 4.0]],
        [[1.0, 0.5, 0.75, 1.0], [2.0**-44, 2.0**-43, 2.0**-44, 2.0**-45], [0.3, 0.3, 0.2, 0.3]],
        EPS, shape=(3, 1, 4)),
    # ε = 1/3: float64's nearest to 1/sqrt(ε) lies below it (for 10**-5 it lies above), so
    # r_max = 1/sqrt(ε) in the gap <= 0 row shows whether it is rounded up
    "eps 1/3": _case([[1.0, -1.0, 0.5, -0.5], [0.5, -0.5, 0.5, -0.5]],
                     [[0.125, 0.0, 0.25, 0.125], [1.0, 1.0, 1.0, 1.0]], F(1, 3)),
    # n = 9, a perfect square: an outlier's y_top clipped at exactly 3; a constant exact
    # row, whose centred variance is 0 (σ = 0, r_max = 1/sqrt(ε) = 2, not 1/(1 - rms R))
    "width 9, a constant row": _case([[3.0] * 9, [0.0] * 8 + [4.0]], [[0.0] * 9, [1.0] * 9],
                                     F(1, 4)),
}


def _op(name: str) -> LayerNorm:
    op = OP_TABLE[name]
    assert isinstance(op, LayerNorm)
    return op


def _code_spread(name: str, case: Case) -> norm_rules.NormSpread:
    x, op = case.ball(), _op(name)
    rows = rows_of(ball_ops.ratios_of(x), x.mid.shape[-1], op.centred)  # the exact mid + lo
    return norm_rules.norm_spread(op, rows, x, case.eps)


@pytest.mark.parametrize("case", sorted(SPREAD_CASES))
@pytest.mark.parametrize("name", NAMES)
def test_r_max_is_the_smaller_of_the_reciprocal_gap_and_of_1_over_sqrt_eps_rounded_up(
        name: str, case: str) -> None:
    c = SPREAD_CASES[case]
    centred = _op(name).centred
    got = _code_spread(name, c)
    x = c.ball()
    rows = zip(_exact_rows(x), _rows(x.rad), strict=True)
    want = [[_r_max(centred, a, big_r, c.eps)] for a, big_r in rows]
    assert got.r_max.shape == (*c.shape[:-1], 1), f"r_max shape {got.r_max.shape} [{case}]"
    assert got.centred is centred, f"centred={got.centred}, but should be {centred} [{name}]"
    _assert_rounded_up(got.r_max, want, f"_norm_spread({name}, {case}).r_max")


@pytest.mark.parametrize("case", sorted(SPREAD_CASES))
@pytest.mark.parametrize("name", NAMES)
def test_y_top_is_r_max_times_the_row_bound_clipped_at_sqrt_n_rounded_up(
        name: str, case: str) -> None:
    """Against the code's own ``r_max`` (pinned by the test above), so each term shows."""
    c = SPREAD_CASES[case]
    centred = _op(name).centred
    got = _code_spread(name, c)
    x = c.ball()
    r_max = [row[0] for row in _rows(got.r_max)]
    rows = zip(_exact_rows(x), _rows(x.rad), r_max, strict=True)
    want = [_y_top(centred, a, big_r, r) for a, big_r, r in rows]
    call = f"_norm_spread({name}, {case}).y_top"
    assert got.y_top.shape == c.shape, f"{call}: shape {got.y_top.shape}, should be {c.shape}"
    _assert_rounded_up(got.y_top, want, call)
    root_n = _root_n(len(c.mid[0]))
    for r, (got_row, want_row) in enumerate(zip(_rows(got.y_top), want, strict=True)):
        for i, (value, expected) in enumerate(zip(got_row, want_row, strict=True)):
            if expected == root_n:  # clipped: exactly ceil(sqrt(n))
                assert value == root_n, f"{call}[row {r}, {i}]={value}, but should be {root_n}"


def test_the_spread_cases_reach_every_branch() -> None:
    """The cases above hold a positive gap with ``1/gap`` the minimum, one with ``1/sqrt(ε)``
    the minimum, a gap <= 0, and y_top clipped and not (so no branch is left unchecked)."""
    seen = set()
    for c in SPREAD_CASES.values():
        x = c.ball()
        for a, big_r in zip(_exact_rows(x), _rows(x.rad), strict=True):
            for centred in (True, False):
                gap = _gap(centred, a, big_r)
                r_eps = 1 / _sqrt(c.eps)
                seen.add("gap <= 0" if gap <= 0 else "1/gap" if 1 / gap < r_eps else "r_eps")
                y = _y_top(centred, a, big_r, _r_max(centred, a, big_r, c.eps))
                seen |= {"clipped" if v == _root_n(len(a)) else "not clipped" for v in y}
    assert seen == {"gap <= 0", "1/gap", "r_eps", "clipped", "not clipped"}, seen


# ----------------------------------------------------------------------------------------
# _NormSpread.through


THROUGH_RAD = np.array([[1.0, 2.0, 0.5, 3.0, 0.25], [0.0, 1.5, 4.0, 0.75, 1.0]]) * 2.0**-20
THROUGH_R_MAX = np.array([[1.25], [3.0]])
THROUGH_Y_TOP = np.array([[0.5, 1.0, 2.0, 0.25, 1.5], [3.0, 0.125, 1.0, 2.5, 0.0]])


@pytest.mark.parametrize("centred", [True, False])
def test_through_is_r_max_times_rad_plus_its_mean_plus_y_top_times_its_rms(
        centred: bool) -> None:
    spread = norm_rules.NormSpread(THROUGH_R_MAX, THROUGH_Y_TOP, centred)
    got = spread.through(THROUGH_RAD)
    want = [_through(centred, r[0], y, rad) for r, y, rad in
            zip(_rows(THROUGH_R_MAX), _rows(THROUGH_Y_TOP), _rows(THROUGH_RAD), strict=True)]
    _assert_rounded_up(got, want, f"_NormSpread(centred={centred}).through(rad)")


# ----------------------------------------------------------------------------------------
# _norm: the forward and reverse radii


@dataclass(frozen=True)
class NormCase:
    """An argument ball and a cotangent ball (rows of equal width), and ``ε``."""

    x: Case
    g_mid: list[list[float]]
    g_rad: list[list[float]]
    g_lo: list[list[float]]

    def g(self) -> Ball:
        return Ball(*(np.array(v, dtype=np.float64).reshape(self.x.shape)
                      for v in (self.g_mid, self.g_rad, self.g_lo)))


def _scaled(rows: list[list[float]], scale: float) -> list[list[float]]:
    return [[v * scale for v in row] for row in rows]


# c with mean 0 and mean c² = 5/8 and 29/8: with ε = 3/8, σ² + ε is 1 and 4, so
# 1/sqrt(σ² + ε) is exact (1 and 1/2), the spec's value a float and its centre radius the
# least subnormal: the spec's 2**-190 terms and the radii near 2**-200 are what is left.
EXACT_C = [[1.0, -1.0, 0.5, -0.5], [2.5, -2.5, 1.0, -1.0]]
SHIFT = [[2.0] * 4, [10.0] * 4]
TINY_R = [[1.0, 3.0, 2.0, 1.0], [2.0, 1.0, 1.0, 3.0]]
G_MID = [[1.5, -4.0, 2.0, 0.5], [3.0, 1.0, -2.0, 0.25]]
GENERAL = [[0.3, -1.2, 2.5, 0.7, -0.1, 1.9], [40.0, 41.5, 38.0, 40.25, 39.0, 42.0]]
GENERAL_G = [[10.0, -30.0, 2.0, 50.0, -7.0, 1.0], [0.5, -0.25, 1.0, 2.0, -1.5, 0.75]]
GENERAL_G_LO = [[2.0**-60, 0.0, 2.0**-55, -(2.0**-50), 0.0, 0.0], [0.0] * 6]


def _norm_cases(name: str) -> dict[str, NormCase]:
    centred = _op(name).centred
    exact_rows = ([[c + s for c, s in zip(cr, sr, strict=True)]
                   for cr, sr in zip(EXACT_C, SHIFT, strict=True)] if centred else EXACT_C)
    zeros4, zeros6 = [[0.0] * 4] * 2, [[0.0] * 6] * 2
    return {
        "radii near 2**-200, the spec's value a float": NormCase(
            _case(exact_rows, _scaled(TINY_R, 2.0**-200), F(3, 8)),
            G_MID, _scaled(TINY_R, 2.0**-201), zeros4),
        "radii 2**-20 and 2**-30, cotangent large, low parts": NormCase(
            _case(GENERAL, _scaled([[1.0, 2.0, 3.0] * 2] * 2, 2.0**-20), EPS,
                  lo=[[2.0**-56, 0.0, -(2.0**-54), 0.0, 0.0, 2.0**-55], [0.0] * 6]),
            GENERAL_G, _scaled([[3.0, 1.0, 2.0] * 2] * 2, 2.0**-30), GENERAL_G_LO),
        "exact argument and cotangent": NormCase(
            _case(GENERAL, zeros6, EPS), GENERAL_G, zeros6, zeros6),
        "a ball wider than the row's spread": NormCase(
            _case([[0.5, -0.5, 0.5, -0.5], [0.0, 0.0, 0.0, 4.0]],
                  [[1.0, 0.5, 0.75, 1.0], [0.3, 0.3, 0.2, 0.3]], EPS, shape=(2, 1, 4)),
            G_MID, _scaled(TINY_R, 2.0**-8), zeros4),
    }


CASE_NAMES = sorted(_norm_cases("layer_norm"))


def _centres(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Row]]:
    """The spec's exact values as ``_from_fractions`` documents them: ``mid``, ``lo`` and
    the centre's radius per row."""
    flat = [_double_double(F(v)) for v in np.asarray(values, dtype=object).reshape(-1)]
    shape = np.shape(values)
    width = shape[-1]
    mid = np.array([m for m, _, _ in flat]).reshape(shape)
    lo = np.array([low for _, low, _ in flat]).reshape(shape)
    rads = [r for _, _, r in flat]
    return mid, lo, [rads[i:i + width] for i in range(0, len(rads), width)]


def _assert_centre(out: Ball, mid: np.ndarray, lo: np.ndarray, call: str) -> None:
    __tracebackhide__ = True
    assert np.array_equal(out.mid, mid) and np.array_equal(out.lo, lo), (
        f"{call}: centre {out.mid.tolist()} + {out.lo.tolist()}, but should be the spec's "
        f"value rounded to {mid.tolist()} + {lo.tolist()}")


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("name", NAMES)
def test_norm_forward_radius_is_the_centres_plus_through_r_plus_twice_y_top_s(
        name: str, case: str) -> None:
    op = _op(name)
    c = _norm_cases(name)[case].x
    x = c.ball()
    forward, _ = _rules(name)
    out = forward([x], c.eps)
    mid, lo, centre = _centres(op.exact([ball_ops.fractions_of(x)], c.eps))
    call = f"_norm({name}) forward [{case}]"
    _assert_centre(out, mid, lo, call)
    rows = zip(_exact_rows(x), _rows(x.rad), centre, strict=True)
    want = [_forward_rad(op.centred, a, big_r, c.eps, cr) for a, big_r, cr in rows]
    _assert_rounded_up(out.rad, want, f"{call}.rad")


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("name", NAMES)
def test_norm_reverse_radius_is_the_centres_plus_through_cotangent_plus_moved_plus_spec(
        name: str, case: str) -> None:
    op = _op(name)
    nc = _norm_cases(name)[case]
    x, g, eps = nc.x.ball(), nc.g(), nc.x.eps
    forward, reverse = _rules(name)
    (out,) = reverse(g, [x], forward([x], eps), eps)
    a = ball_ops.fractions_of(x)
    spec = op.exact_vjp(ball_ops.fractions_of(g), [a], op.exact([a], eps), eps)[0]
    mid, lo, centre = _centres(spec)
    call = f"_norm({name}) reverse [{case}]"
    _assert_centre(out, mid, lo, call)
    rows = zip(_exact_rows(x), _rows(x.rad), _sizes(g), _rows(g.rad), centre, strict=True)
    want = [_reverse_rad(op.centred, a_row, big_r, eps, gs, gr, cr)
            for a_row, big_r, gs, gr, cr in rows]
    _assert_rounded_up(out.rad, want, f"{call}.rad")


def _shares(name: str, case: str) -> dict[str, Fraction]:
    """The largest share, over the elements, of each term in the reverse radius and (the
    terms named ``forward ...``) in the forward one."""
    op = _op(name)
    nc = _norm_cases(name)[case]
    x, g, eps = nc.x.ball(), nc.g(), nc.x.eps
    k = 2 if op.centred else 1
    a = ball_ops.fractions_of(x)
    _, _, centre = _centres(op.exact_vjp(ball_ops.fractions_of(g), [a],
                                         op.exact([a], eps), eps)[0])
    _, _, centre_x = _centres(op.exact([a], eps))
    out: dict[str, Fraction] = {}
    rows = zip(_exact_rows(x), _rows(x.rad), _sizes(g), _rows(g.rad), centre, centre_x,
               strict=True)
    for a_row, big_r, gs, gr, cr, cr_x in rows:
        total = _reverse_rad(op.centred, a_row, big_r, eps, gs, gr, cr)
        s = _spread(op.centred, a_row, big_r, eps)
        big_g = max(gs)
        dy = _through(op.centred, s.r_max, s.y_top, big_r)
        terms = {
            "centre": cr,
            "through(rad_g)": _through(op.centred, s.r_max, s.y_top, gr),
            "|dr| (k + y_top) G": [s.r_max**2 * _rms(big_r) * (k + y) * big_g for y in s.y_top],
            "r |dy| G": [s.r_max * d * big_g for d in dy],
            "r y_top G mean(dy)": [s.r_max * y * big_g * _mean(dy) for y in s.y_top],
            "spec": [2 * s.r_max * big_g * (k + 4 * y) * S for y in s.y_top],
        }
        forward = _forward_rad(op.centred, a_row, big_r, eps, cr_x)
        terms |= {"forward centre": cr_x,
                  "forward through(R)": _through(op.centred, s.r_max, s.y_top, big_r),
                  "forward 2 y_top s": [2 * y * S for y in s.y_top]}
        for term, values in terms.items():
            whole = forward if term.startswith("forward") else total
            share = max(v / t for v, t in zip(values, whole, strict=True))
            out[term] = max(out.get(term, F(0)), share)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_radius_term_is_a_visible_share_of_the_radius_in_some_case(name: str) -> None:
    """A guard on the cases above: a rule that drops any one term of the forward or the
    reverse radius fails their test by far more than MARGIN."""
    best: dict[str, Fraction] = {}
    for case in CASE_NAMES:
        for term, share in _shares(name, case).items():
            best[term] = max(best.get(term, F(0)), share)
    hidden = {t: float(s) for t, s in best.items() if s < 2**-12}
    assert not hidden, f"{name}: terms below 2**-12 of the radius in every case: {hidden}"


# ----------------------------------------------------------------------------------------
# the stand-ins of the spec's slack


@pytest.mark.parametrize(("name", "k"), [("layer_norm", 2), ("rms_norm", 1)])
def test_the_stand_in_centred_row_is_k_times_the_largest_magnitude(name: str, k: int) -> None:
    rule = OP_TABLE[name].slack_rules()
    assert isinstance(rule, LayerNorm)
    assert rule.name == name and rule.centred is (name == "layer_norm"), (
        f"OP_TABLE[{name}].slack_rules() is {rule.name}, centred={rule.centred}")
    for sizes, top in [(np.broadcast_to(np.float64(0.75), (2, 3)), F(3, 4)),
                       (np.array([[0.5, 3.0, 1.25]]), F(3)),
                       (np.array([2.0**-1074, 0.0]), F(2) ** -1074),
                       (np.zeros((2, 0)), F(0))]:
        got = rule._centred(sizes)
        assert got.shape == (1,) and got[0] == k * top and isinstance(got[0], Fraction), (
            f"OP_TABLE[{name}].slack_rules()._centred({sizes.tolist()})={got!r}, but should be "
            f"[{k * top}] (k={k} times the largest magnitude)")


@pytest.mark.parametrize("eps", [F(1, 10**5), F(3, 8), F(1, 4), F(7, 3)])
@pytest.mark.parametrize("name", NAMES)
def test_the_stand_in_rsqrt_half_width_is_1_over_sqrt_eps_rounded_up_over_2_pow_199(
        name: str, eps: Fraction) -> None:
    """``(1/sqrt(ε) + its enclosure's half-width) / 2**199``, exactly; it is at least
    ``2**-199/sqrt(ε)``, twice the spec's ``2**-200`` relative half-width of any row's
    ``1/sqrt(σ² + ε) <= 1/sqrt(ε)``."""
    rule = OP_TABLE[name].slack_rules()
    assert isinstance(rule, LayerNorm)
    c = np.array([F(5)], dtype=object)
    same, half = rule._rsqrt(c, eps)
    r_eps, e = exact_rsqrt(eps)
    want = (r_eps + e) / 2 ** (TANH_PRECISION_BITS - 1)
    call = f"OP_TABLE[{name}].slack_rules()._rsqrt([5], {eps})"
    assert same is c, f"{call}: the row {same!r}, but should be the argument itself"
    assert half == want, f"{call}: half-width {float(half)!r}, but should be {float(want)!r}"
    assert half * _sqrt(eps) >= F(1, 2**199) * (1 - ROOT), (
        f"{call}: half-width {float(half)!r} below 2**-199/sqrt(ε)")
    for variance in (F(0), F(1, 3), F(10)):
        assert half >= 2 * exact_rsqrt(variance + eps)[1], (
            f"{call}: half-width {float(half)!r} below twice the spec's at σ²={variance}")
