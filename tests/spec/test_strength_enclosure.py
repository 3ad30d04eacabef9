"""Laws of the fast oracle's rules one at a time, for its mutation score (docs/strength.md §3).

:mod:`resverify.spec.enclosure` promises a ball ``|exact - (mid + lo)| <= rad`` for every
value. The generated tests in ``tests/spec/test_perf_enclosure.py`` check it on whole programs,
where one rule's slack can hide another's bug; here each rule is checked alone, on balls
with radii and low parts, against Fractions:

* containment: the ball holds the image of its arguments' balls (every corner, where the
  rule is monotone or bilinear in each argument, and the points in between where it is
  not), on adversarial inputs: cancellation, long dot products that take Dot2, tanh near 0
  and saturated, relu at and near 0, norms of near-constant rows;
* tightness, where the docstring promises it: a double-double keeps about 106 bits, so a
  ball of exact arguments is within ``2**-100`` of its value; a ball of enclosed
  arguments is at most twice as wide as their image; tanh adds the ulps of
  :data:`~resverify.spec.enclosure.LIBM_TANH_ULPS` and one of the spec's; Dot2 at most
  ``u|aᵀb| + γ_k² |a|ᵀ|b|``;
* the verdict: :func:`~resverify.spec.enclosure.verify` judges every element as
  :func:`resverify.spec.compare.within` judges it against the exact value, for values built
  to sit on, just inside and just outside the bound.

The rules are read from the op entries (``OP_TABLE[name].enclose`` and ``enclose_vjp``)
when the test runs, so a mutant of the rule is the rule under test.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec import ball as ball_ops
from resverify.spec import enclosure
from resverify.spec.budget import error_budget
from resverify.spec.compare import within
from resverify.spec.enclosure import Ball, NotEnclosed, decide, enclose, verify
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, LayerNorm, Op
from resverify.spec.rational import exact_tanh
from resverify.spec.request import Request

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
            + (enclosure.LIBM_TANH_ULPS + 1) * Fraction(np.spacing(abs(out.mid[i])))) + TINY
        assert _q(out.rad[i]) <= allowed, (
            f"tanh({case})[{i}]: radius {out.rad[i]!r}, allowed {float(allowed)!r}")


def test_np_tanh_is_within_the_ulps_the_tanh_ball_allows() -> None:
    """``LIBM_TANH_ULPS`` covers the platform's tanh, measured against the spec's, and is
    at least the 2 ulps glibc documents."""
    assert enclosure.LIBM_TANH_ULPS >= 2, enclosure.LIBM_TANH_ULPS
    x = np.linspace(-20, 20, 2001) + 2.0**-40
    got = np.tanh(x)
    worst = max(abs(Fraction(float(t)) - _spec_tanh(Fraction(float(v)))) / Fraction(
        float(np.spacing(abs(t)))) for v, t in zip(x, got, strict=True))
    assert worst <= enclosure.LIBM_TANH_ULPS, f"np.tanh off by {float(worst)} ulps"


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


# ----------------------------------------------------------------------------------------
# the slack of relu's sign test, and the verdict


@pytest.mark.parametrize("case", sorted(RELU_ARGS) + sorted(TANH_ARGS))
def test_least_is_a_lower_bound_of_every_magnitude_in_the_ball(case: str) -> None:
    ball = _ball(*(RELU_ARGS[case] if case in RELU_ARGS else TANH_ARGS[case]))
    least = enclosure._least(ball)
    low, high = _corners(ball)
    for i in np.ndindex(*ball.mid.shape):
        ends = _q(low[i]), _q(high[i])
        smallest = Fraction(0) if ends[0] <= 0 <= ends[1] else min(map(abs, ends))
        assert 0 <= _q(least[i]) <= smallest, (
            f"_least({case})[{list(i)}] = {least[i]!r}, above the least magnitude "
            f"{float(smallest)!r}")
        size = abs(_q(ball.mid[i])) + abs(_q(ball.lo[i])) + _q(ball.rad[i])
        assert smallest - _q(least[i]) <= size / 2**48 + TINY, (
            f"_least({case})[{list(i)}] = {least[i]!r}, far below {float(smallest)!r}")


def _single(op: str, x: np.ndarray, cotangent: np.ndarray, alpha: Fraction | None = None,
            **attrs: Fraction) -> Request:
    program = Program((Input("x", x.shape),), (Node("y", op, ("x",), alpha, **attrs),), "y")
    return Request(program, {"x": x}, "float64", cotangent)


def _linear_then(op: str | None) -> Request:
    """``op(x @ w)`` with a long product (Dot2) and rows that cancel."""
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((9, 24)), rng.standard_normal((24, 8))
    nodes = [Node("z", "linear", ("x", "w"))]
    if op is not None:
        nodes.append(Node("y", op, ("z",)))
    program = Program((Input("x", (9, 24)), Input("w", (24, 8))), tuple(nodes), nodes[-1].name)
    return Request(program, {"x": x, "w": w}, "float64", rng.standard_normal((9, 8)))


VERDICT_REQUESTS = {
    "tanh near 0 and saturated": _single("tanh", np.array([0.0, 1e-9, -3e-5, 0.4, 21.0, -30.0]),
                                         np.linspace(1.0, 2.0, 6)),
    "relu at and near 0": _single("relu", np.array([0.0, 5e-324, -5e-324, 1e-300, -2.0, 3.0]),
                                  np.linspace(-1.0, 2.0, 6)),
    "layer_norm, near constant": _single("layer_norm", np.array(NORM_ROWS["near constant"]),
                                         np.linspace(1.0, 6.0, 6), eps=Fraction(1, 10**5)),
    "rms_norm, large mean": _single("rms_norm", np.array(NORM_ROWS["large mean"]),
                                    np.linspace(1.0, 4.0, 4), eps=Fraction(1, 10**5)),
    "linear, Dot2": _linear_then(None),
    "linear then tanh": _linear_then("tanh"),
    "linear then relu": _linear_then("relu"),
}

STEPS = (0.0, 0.5, 1.0, -1.0, 1.0 + 2.0**-30, -1.0 - 2.0**-30, 1.0 - 2.0**-30, 2.0)


def _steps(shape: tuple[int, ...], shift: int) -> np.ndarray:
    """:data:`STEPS` over the elements of ``shape``, starting at ``STEPS[shift]``."""
    return np.resize(np.roll(np.array(STEPS), -shift), shape)


def _near(exact: np.ndarray, bound: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """``exact + step·bound`` rounded to floats (the exact value where the bound is 0)."""
    bounds = np.broadcast_to(bound, exact.shape)
    flat = [float(Fraction(e) + Fraction(step) * Fraction(float(b)))
            for e, b, step in zip(exact.reshape(-1).tolist(), bounds.reshape(-1).tolist(),
                                  steps.reshape(-1).tolist(), strict=True)]
    return np.array(flat).reshape(exact.shape)


@pytest.mark.parametrize("name", sorted(VERDICT_REQUESTS))
def test_verify_decides_every_element_as_the_exact_comparison_does(name: str) -> None:
    """Values on, just inside and just outside the bound that :func:`verify` uses: its
    misses are those :func:`within` finds against the exact values, element by element."""
    request = VERDICT_REQUESTS[name]
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    budget = enclosure.fast_budget(request, enclose(request))
    for shift in range(len(STEPS)):  # each call mixes the steps over the elements
        output = _near(exact.output, budget.output, _steps(exact.output.shape, shift))
        grads = {n: _near(g, budget.grads[n], -_steps(g.shape, shift + 3))
                 for n, g in exact.grads.items()}
        verdict = verify(request, output, grads)
        want = {("output", i) for i in np.ndindex(*output.shape) if not within(
            float(output[i]), _q(exact.output[i]), float(np.broadcast_to(
                verdict.budget.output, output.shape)[i]))}
        want |= {(f"grad[{n}]", i) for n, g in grads.items() for i in np.ndindex(*g.shape)
                 if not within(float(g[i]), _q(exact.grads[n][i]), float(np.broadcast_to(
                     verdict.budget.grads[n], g.shape)[i]))}
        got = {(m.where, m.index) for m in verdict.misses}
        assert got == want, (f"verify({name}) steps from {shift}: misses {sorted(got)[:4]}, "
                             f"exact comparison {sorted(want)[:4]}")
        assert verdict.exact_path is False, f"verify({name}) went to the exact path"


@pytest.mark.parametrize("name", sorted(set(VERDICT_REQUESTS) - {"relu at and near 0"}))
def test_the_fast_budget_is_the_exact_budget_up_to_the_balls(name: str) -> None:
    """At least the exact budget (sound), and within ``1 + 2**-20`` of it for rational
    programs, whose arguments are far from relu's kink: the balls are an ulp or two wide,
    far below any budget. With tanh or a norm, the spec's slack is doubled to cover the
    roundings of its stand-in: within 2 (``1 + 2**-20``) of it."""
    request = VERDICT_REQUESTS[name]  # not relu at 0: the radius widens the unsure set
    rational = all(OP_TABLE[n.op].rational for n in request.program.nodes)
    factor = Fraction(1 if rational else 2) * (1 + Fraction(1, 2**20))
    fast = enclosure.fast_budget(request, enclose(request))
    exact = error_budget(request)
    pairs = [("output", fast.output, exact.output)]
    pairs += [(f"grad[{n}]", fast.grads[n], exact.grads[n]) for n in exact.grads]
    for where, got, want in pairs:
        got_, want_ = np.broadcast_arrays(got, want)
        for i in np.ndindex(*got_.shape):
            g, w = Fraction(float(got_[i])), Fraction(float(want_[i]))
            assert w <= g <= w * factor + TINY, (
                f"{where}[{list(i)}] of {name}: fast budget {float(g)!r}, exact {float(w)!r}")


def test_an_element_the_balls_cannot_place_is_decided_exactly() -> None:
    """A ball that straddles ``actual ± bound`` leaves the element undecided; verify then
    asks the exact interpreter: a relu's zero budget, one element an ulp off."""
    ball = Ball(np.array([1.0, 1.0, 1.0]), np.array([2.0**-60, 0.0, 2.0**-60]),
                np.array([0.0, 2.0**-70, 0.0]))
    actual = np.array([1.0 + 2.0**-20, 1.0 + 2.0**-21, 1.0 + 2.0**-10])
    inside, unsure = decide(actual, ball, np.full(3, 2.0**-20))
    assert unsure.tolist() == [True, False, False], f"unsure {unsure.tolist()}"
    assert inside.tolist()[1:] == [True, False], f"inside {inside.tolist()}"
    request = _single("relu", np.array([-1.0, 2.0]), np.array([1.0, 1.0]))
    off = np.array([5e-324, 2.0])  # relu(-1) is 0: off by the least subnormal
    verdict = verify(request, off, {"x": np.array([0.0, 1.0])})
    found = [(m.where, m.index, m.actual, m.expected, m.bound) for m in verdict.misses]
    assert found == [("output", (0,), 5e-324, 0, 0.0)], f"verify(relu, {off}): misses {found}"


@pytest.mark.parametrize("bound", [0.0, 2.0**-30, math.inf])
def test_decide_matches_within_where_it_decides(bound: float) -> None:
    rng = np.random.default_rng(9)
    mid = rng.standard_normal(12)
    lo = np.spacing(mid) * rng.uniform(-0.5, 0.5, 12)
    rad = np.where(np.arange(12) % 3 == 0, 0.0, np.abs(np.spacing(mid)))
    ball = Ball(mid, rad, lo)
    centre = _centre(ball)
    for step in STEPS:
        actual = np.array([float(c + Fraction(step) * Fraction(bound if math.isfinite(bound)
                                                                else 1.0)) for c in centre])
        inside, unsure = decide(actual, ball, np.full(12, bound))
        for i in range(12):
            if unsure[i]:
                continue
            worst = [within(float(actual[i]), centre[i] + s * Fraction(float(rad[i])), bound)
                     for s in (-1, 0, 1)]
            assert all(v == inside[i] for v in worst), (
                f"decide({actual[i]!r}, {float(centre[i])!r} ± {rad[i]!r}, bound {bound}) = "
                f"{inside[i]}, but within over the ball gives {worst}")
        if bound == 0.0:
            exact_rad = rad == 0
            assert not unsure[exact_rad].any(), f"an exact ball left unsure at {step}"


def test_decide_counts_the_double_doubles_tail_before_calling_an_element_exact() -> None:
    """``1 + 2**-52`` against the exact ball ``1 - 2**-110``: their difference rounds to
    ``2**-52``, the bound, but is ``2**-110`` above it. The tail of that subtraction keeps
    the element off the exact branch (unsure: the exact path says outside), where
    reading the rounded difference alone would call it inside."""
    actual, ball = np.array([1 + 2.0**-52]), Ball(np.array([1.0]), np.zeros(1),
                                                  np.array([-(2.0**-110)]))
    inside, unsure = decide(actual, ball, np.array([2.0**-52]))
    exact = Fraction(1) - Fraction(2) ** -110
    assert not within(float(actual[0]), exact, 2.0**-52), "the case is outside by design"
    assert (bool(inside[0]), bool(unsure[0])) == (False, True), (
        f"decide(1 + 2**-52, 1 - 2**-110 ± 0, bound 2**-52) = inside {inside}, unsure "
        f"{unsure}, but should be unsure (|diff| = 2**-52 + 2**-110 > the bound)")


@pytest.mark.parametrize("bad", ["non-finite", "shape", "no rule"])
def test_enclose_refuses_what_it_does_not_cover(bad: str, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    x = np.array([1.0, 2.0])
    request = _single("tanh", np.array([1.0, math.inf]) if bad == "non-finite" else x,
                      np.ones(2))
    if bad == "shape":
        program = Program((Input("x", (2,)), Input("w", (3, 2))),
                          (Node("y", "linear", ("x", "w")),), "y")
        request = Request(program, {"x": x, "w": np.ones((3, 2))}, "float64", None)
    if bad == "no rule":
        monkeypatch.setattr(type(OP_TABLE["tanh"]), "enclose", Op.enclose)
    with pytest.raises(NotEnclosed):
        enclose(request)


def test_a_forward_enclosure_gives_infinite_gradient_bounds() -> None:
    request = VERDICT_REQUESTS["linear then tanh"]
    forward = enclose(request, reverse=False)
    assert forward.grads == {} and forward.cotangents == {}, "reverse=False has no gradients"
    budget = enclosure.fast_budget(request, forward)
    assert all(np.isinf(g).all() for g in budget.grads.values()), "grad bounds not infinite"
    full = enclosure.fast_budget(request, enclose(request))
    assert np.array_equal(budget.output, full.output), (
        f"output bound {budget.output} forward-only, {full.output} with the reverse pass")


def test_the_spec_slack_bounds_the_exact_interpreters_slack() -> None:
    """tanh's enclosure error reaches the output and, through relu's sign test, the
    gradients: the fast oracle's stand-in slack is at least the interpreter's."""
    for name in ("tanh near 0 and saturated", "linear then tanh", "layer_norm, near constant",
                 "rms_norm, large mean"):
        request = VERDICT_REQUESTS[name]
        slack = enclosure._spec_slack(request.program, enclose(request))
        exact = evaluate(request).slack
        assert exact <= slack, (
            f"{name}: stand-in slack {float(slack)!r}, the interpreter's {float(exact)!r}")
    for name in ("relu at and near 0", "linear, Dot2"):
        request = VERDICT_REQUESTS[name]
        slack = enclosure._spec_slack(request.program, enclose(request))
        assert slack == 0, f"{name}: a rational program's slack is 0, got {slack}"


def test_the_spec_slack_adds_the_gradient_slack_of_every_use_of_a_value() -> None:
    """x feeds four tanh nodes under a cotangent of 2**40, so the gradient's slack (four
    tanh VJP parts, added) dominates; the stand-in bound, which doubles its sum, must hold
    all four (keeping only the last part would give half the interpreter's slack)."""
    nodes = (*(Node(f"t{i}", "tanh", ("x",)) for i in range(4)),
             Node("a1", "add", ("t0", "t1")), Node("a2", "add", ("t2", "t3")),
             Node("h", "add", ("a1", "a2")))
    program = Program((Input("x", (2,)),), nodes, "h")
    request = Request(program, {"x": np.array([0.5, 0.5])}, "float64", np.full(2, 2.0**40))
    slack = enclosure._spec_slack(program, enclose(request))
    exact = evaluate(request).slack
    assert exact <= slack, (
        f"_spec_slack(x through four tanh) = {float(slack)!r}, but should be at least the "
        f"interpreter's {float(exact)!r}")


def _rounded(values: np.ndarray) -> np.ndarray:
    return np.array([float(v) for v in values.reshape(-1).tolist()]).reshape(values.shape)


def test_a_value_far_outside_its_bound_is_decided_by_the_balls() -> None:
    """A miss by 2**20 bounds needs no exact arithmetic: the miss carries the actual value,
    the ball's midpoint (within its radius of the exact value) and the bound."""
    request = VERDICT_REQUESTS["linear then tanh"]
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    output, grads = _rounded(exact.output), {n: _rounded(g) for n, g in exact.grads.items()}
    budget = verify(request, output, grads).budget
    output[2, 3] += 2.0**20 * float(budget.output[2, 3]) + 2.0**-40
    verdict = verify(request, output, grads)
    assert verdict.decided_exactly == 0 and verdict.exact_path is False, verdict
    found = [(m.where, m.index, m.actual, m.bound) for m in verdict.misses]
    assert found == [("output", (2, 3), output[2, 3], float(verdict.budget.output[2, 3]))], found
    ball = enclose(request).output
    gap = abs(verdict.misses[0].expected - _q(exact.output[2, 3]))
    assert gap <= _q(ball.rad[2, 3]) + abs(_q(ball.lo[2, 3])), (
        f"expected {float(verdict.misses[0].expected)!r} is {float(gap)!r} from the exact value")


def test_a_missing_or_misshapen_result_is_a_shape_miss_and_the_rest_is_still_judged() -> None:
    request = VERDICT_REQUESTS["linear then tanh"]
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    grads = {"x": _rounded(exact.grads["x"]) + 1.0}  # every element off; no grad for w
    verdict = verify(request, _rounded(exact.output)[:, :2], grads)
    shape = [(m.where, m.index, m.expected, m.bound) for m in verdict.misses
             if m.where.endswith(".shape")]
    assert shape == [("output.shape", (), 0, 0.0), ("grad[w].shape", (), 0, 0.0)], shape
    assert all(math.isnan(m.actual) for m in verdict.misses if m.where.endswith(".shape"))
    off = {m.index for m in verdict.misses if m.where == "grad[x]"}
    assert off == set(np.ndindex(*grads["x"].shape)), f"grad[x] misses {sorted(off)[:4]}"


def test_a_forward_mode_request_is_judged_on_the_exact_path() -> None:
    program = Program((Input("x", (3,)),), (Node("y", "tanh", ("x",)),), "y")
    request = Request(program, {"x": np.array([0.1, -2.0, 0.7])}, "float64", np.ones(3),
                      {"x": np.array([1.0, 0.5, -1.0])})
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None and exact.tangent is not None
    tangent = _rounded(exact.tangent) + np.array([0.0, 1.0, 0.0])
    output, grads = _rounded(exact.output), {"x": _rounded(exact.grads["x"])}
    verdict = verify(request, output, grads, tangent)
    want = error_budget(request, exact=exact).misses(exact, output, grads, tangent)
    assert verdict.exact_path is True and verdict.decided_exactly == 0, verdict
    assert np.array_equal(verdict.budget.output, error_budget(request).output), verdict.budget
    assert [(m.where, m.index) for m in verdict.misses] == [(m.where, m.index) for m in want]
    assert [m.where for m in verdict.misses] == ["tangent"], verdict.misses


@pytest.mark.parametrize("actual", [math.nan, math.inf, -math.inf])
def test_a_non_finite_value_is_outside_any_finite_bound(actual: float) -> None:
    ball = Ball(np.array([1.0, 1.0]), np.array([2.0**-60, 0.0]), np.array([2.0**-70, 0.0]))
    inside, unsure = decide(np.array([actual, actual]), ball, np.array([1e300, math.inf]))
    assert inside.tolist() == [False, True] and unsure.tolist() == [False, False], (
        f"decide({actual}) against 1 ± (1e300, inf): inside {inside}, unsure {unsure}")


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


def test_a_dead_node_and_an_unused_input_do_not_stop_the_reverse_pass() -> None:
    """``d = tanh(u)`` does not reach the output and ``v`` is not read: the gradients of
    the others are still enclosed, ``v``'s is an exact zero, and the slack still bounds the
    interpreter's."""
    program = Program((Input("x", (3,)), Input("v", (2,))),
                      (Node("t", "tanh", ("x",)), Node("y", "mul", ("t", "x")),
                       Node("d", "tanh", ("y",))), "y")
    request = Request(program, {"x": np.array([0.3, -1.2, 2.0]), "v": np.array([1.0, 2.0])},
                      "float64", np.array([1.0, -2.0, 0.5]))
    balls, exact = enclose(request), evaluate(request)
    assert exact.grads is not None
    for name in ("x", "v"):
        _assert_holds(balls.grads[name], [exact.grads[name]], f"grad[{name}] with a dead node")
    assert balls.grads["v"].mid.shape == (2,) and not balls.grads["v"].rad.any(), balls.grads
    assert not balls.grads["v"].mid.any(), f"grad[v] = {balls.grads['v'].mid}, want 0"
    slack = enclosure._spec_slack(program, balls)
    assert slack >= exact.slack > 0, f"slack {float(slack)!r}, the interpreter's {exact.slack}"


def test_fast_verdict_at_relus_kink_is_the_exact_one() -> None:
    """An input exactly 0 (a point ball) is surely <= 0: relu's derivative there is the
    declared 0, so a gradient of 1 at the kink misses in the fast verdict as in the exact
    one (a sum of doubles that rounds to 0 is exactly 0: no rounding to allow for)."""
    program = Program((Input("x", (2,)),), (Node("y", "relu", ("x",)),), "y")
    request = Request(program, {"x": np.array([0.0, 1.0])}, "float64", np.array([1.0, 1.0]))
    output, grads = np.array([0.0, 1.0]), {"x": np.array([1.0, 1.0])}
    exact = evaluate(request)
    want = [str(m) for m in error_budget(request, exact=exact).misses(exact, output, grads)]
    got = [str(m) for m in enclosure.verify(request, output, grads).misses]
    assert want and len(got) == len(want), (
        f"verify(relu at 0, grad 1) misses {got}, the exact path misses {want}")
