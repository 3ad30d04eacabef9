"""``rsqrt``: ``1/sqrt(a)`` for ``a > 0``, the normaliser of an RMSNorm the trace cannot
match whole (T5's float64 layer: a float32 ``rsqrt`` times the float64 row).

Why an op and not ``1/sqrt`` through other ops: the IR has neither a square root nor a
reciprocal, and a chain of them would be charged a rounding each anyway. torch's CPU kernel
*is* that chain: the vectorised ``Vectorized<float>::rsqrt`` (and the double one) is
``_mm256_div_ps(1, _mm256_sqrt_ps(x))`` (``_mm512_...`` on AVX-512), the scalar fallback
``1 / std::sqrt(x)`` (``ATen/cpu/vec/vec256/vec256_float.h``, ``vec_base.h``), a bfloat16
one computes it in float32 and rounds once more. Two correctly rounded operations, within
two ulps together (a bfloat16 one within ``u + 2u_f32``); measured, the installed build's
kernel is within 1.45 ulps (float32) and 1.48 (float64), though not bitwise ``1 /
torch.sqrt`` (0.6 % of 200,000 points differ: docs/error-budget.md). The budget charges
:data:`~resverify.spec.ops.layer_norm.SQRT_ULPS` ulps, the norms' own allowance for their
``1/sqrt`` (CUDA's ``rsqrtf`` is documented at 2 ulps).

The exact value is enclosed with integer square roots
(:func:`resverify.spec.rational.exact_rsqrt`); the slope is ``-r³/2``. A non-positive
argument has no real value: the exact interpreter refuses it, and the budget is infinite
where the computed argument may not be positive.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import INF as BALL_INF
from resverify.spec.ball import Ball, NotEnclosed
from resverify.spec.errors import InvalidRequest, Shape
from resverify.spec.ops.base import Site, cast, elementwise
from resverify.spec.ops.elementwise import Elementwise
from resverify.spec.ops.layer_norm import SQRT_ULPS
from resverify.spec.rational import (
    TANH_PRECISION_BITS,
    Arr,
    exact_rsqrt,
    fraction,
    mag,
    objects,
    times,
)
from resverify.spec.rounding import Bound, Ctx, up

__all__: list[str] = []


def _width(out: Arr) -> Fraction:
    """A bound of the enclosures' own error: at most ``2**-TANH_PRECISION_BITS`` of the
    true value, so below ``2**-(TANH_PRECISION_BITS - 1)`` of the carried one."""
    return mag(out) / 2 ** (TANH_PRECISION_BITS - 1)


def _sizes(out: Arr, err: Fraction) -> np.ndarray:
    """Upper bounds of ``|1/sqrt(a)|`` from the carried values and their error."""
    flat = [up(abs(Fraction(v)) + err) for v in out.reshape(-1).tolist()]
    return np.array(flat, dtype=np.float64).reshape(np.shape(out))


def rsqrt_ball(v: Ball) -> Ball:
    """A ball around ``1/sqrt`` of every value of ``v`` (and the spec's enclosure of it):
    ``1/sqrt`` at the ball's two ends, each rounded outward; NotEnclosed where the ball
    reaches 0 or below."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        centre = v.mid + v.lo
        low = np.nextafter(centre - v.rad - abs(v.lo) * 2.0**-52, -BALL_INF)
        high = np.nextafter(centre + v.rad + abs(v.lo) * 2.0**-52, BALL_INF)
        if not np.all(low > 0):
            raise NotEnclosed("rsqrt: the argument may not be positive over its ball")
    return ball.inverse_sqrt(low, high)


class Rsqrt(Elementwise):
    """``rsqrt(a) = 1/sqrt(a)``, ``a > 0``; rsqrt' = ``-r³/2``. Not rational: enclosed."""

    name, rational = "rsqrt", False

    def draw(self, rng: np.random.Generator, shapes: Sequence[Shape]) -> list[np.ndarray]:
        """Positive quarters, 1/4 to 2 (the domain)."""
        return [rng.integers(1, 9, size=s) / 4.0 for s in shapes]

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return objects([exact_rsqrt(fraction(v))[0] for v in args[0].reshape(-1).tolist()],
                       args[0].shape)

    def exact_slope(self, args: Sequence[Arr], out: Arr) -> Arr:
        return -(out ** 3) / 2

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Any) -> Fraction:
        """``|1/sqrt(v + d) - 1/sqrt(v)| <= d / (2 (v - d)^{3/2})`` over the smallest
        argument, plus the enclosures' own width; refused where ``v - d`` may be 0 or below."""
        d = Fraction(errs[0])  # a stand-in rule may hand a float (exact as a Fraction)
        if d == 0 or args[0].size == 0:
            return _width(out)
        low = min(fraction(v) for v in args[0].reshape(-1).tolist()) - d
        if low <= 0:
            raise InvalidRequest(f"rsqrt's argument is known to within {float(d)!r} only, "
                                 "and may not be positive")
        r, e = exact_rsqrt(low)
        return d * (r + e) ** 3 / 2 + _width(out)

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """``ḡ r³/2`` with ``r`` known to ``e``: ``r³`` to ``3r²e + 3re² + e³``."""
        r, e = mag(at.out), at.err
        return (times(mag(g), g_err, r ** 3 / 2, ((r + e) ** 3 - r ** 3) / 2),)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """The argument's error ``d`` moves ``1/sqrt`` by a relative ``(1 - x)^{-1/2} - 1
        <= x / (2 (1 - x)^{3/2})``, ``x = d/v <= d R²`` (``v >= 1/R²``, R the value's upper
        bound; the right side has no cancellation in float64); the square root and the
        division together :data:`SQRT_ULPS` ulps, ``2 SQRT_ULPS u`` of the value, as the
        norms' ``1/sqrt`` is charged. Infinite where ``d >= v``."""
        size = _sizes(at.out, at.err)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            ratio = a[0].err * size * size
            rho = np.where(ratio < 1, ratio / (2 * np.maximum(1 - ratio, 0) ** 1.5), np.inf)
            own = 2 * SQRT_ULPS * c.u
            err = size * (rho + own * (1 + rho)) + c.tiny
        return c.done(size, err)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``ḡ · (-½ y³)`` from the computed ``y``, in any order of its three products
        (torch's ``-0.5 * grad * result.pow(3)``): the propagated errors and ``gamma(3)``
        of the computed sizes."""
        slope = y.mag ** 3 / 2
        slope_err = (y.hat ** 3 - y.mag ** 3) / 2
        err = (g.mag * slope_err + slope * g.err + g.err * slope_err
               + c.gamma(3) * g.hat * (slope + slope_err) + 3 * c.tiny)
        return [c.done(g.mag * slope, err)]

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(lambda v: 1 / sp.sqrt(v), args[0])

    def numpy_value(self, a: np.ndarray) -> np.ndarray:
        return cast(1, a) / np.sqrt(a)

    def numpy_slope(self, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        return -(out * out * out) / cast(2, a)

    # the fast oracle's rules on balls

    exact_output_in_trace = True

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return rsqrt_ball(args[0])

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``g · (-½ r³)``, r the spec's value enclosed by ``out``."""
        cube = ball.mul(ball.mul(out, out), out)
        return (ball.mul(g, ball.mul(cube, ball.constant(Fraction(-1, 2)))),)
