"""``tanh``: a smooth nonlinear branch, its exact value enclosed with mpmath."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball, add_up, half_ulp, mul_up, sum_rounded, two_product, two_sum
from resverify.spec.ops.base import Site, cast
from resverify.spec.ops.elementwise import Elementwise
from resverify.spec.rational import Arr, exact_tanh, fraction, mag, objects, tanh_error
from resverify.spec.rounding import Bound, Ctx, up

TANH_ULPS = 4
"""Error allowed for a backend's tanh, in ulps of the result.

glibc lists 2–3 ulps for tanh and CUDA 2 ulps for tanhf; NumPy's tanh measured 1.05 ulp
(float64) and 1.26 ulp (float32) against mpmath. 4 covers these with a small margin and
is still far too tight to hide a wrong formula."""

LIBM_TANH_ULPS = 8
"""Ulps of error the fast oracle allows ``np.tanh`` (glibc documents at most 2; NumPy
measured 1.05)."""


class Tanh(Elementwise):
    """``tanh(a)``: a smooth nonlinear branch, tanh' = 1 - tanh². Not rational: the exact
    value is enclosed with mpmath (:func:`resverify.spec.rational.exact_tanh`)."""

    name, rational = "tanh", False
    families = ("tanh",)  # F = tanh(x)

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return objects([exact_tanh(fraction(v))[0] for v in args[0].reshape(-1).tolist()],
                       args[0].shape)

    def exact_slope(self, args: Sequence[Arr], out: Arr) -> Arr:
        return 1 - out * out

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0] + tanh_error(out)  # 1-Lipschitz, plus the enclosure's own width

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err + mag(g) * at.err * (2 * mag(at.out) + at.err),)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """1-Lipschitz; a backend's tanh may be :data:`TANH_ULPS` ulps off
        (``ulp(t) <= 2u|t|``)."""
        x = a[0]
        err = x.err + 2 * TANH_ULPS * c.u * np.minimum(x.hat, 1.0) + TANH_ULPS * c.tiny
        return c.done(np.minimum(x.mag, 1.0), err)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``ḡ (1 - t²)`` gets ``e_t (2|t| + e_t)`` for the error of t and ``5u`` for the
        rounding of ``1 - t²`` (or ``(1 - t)(1 + t)``)."""
        s = at.err
        slope = np.array([min(1.0, up(1 - v * v + s * (2 + s)))
                          for v in at.out.reshape(-1).tolist()],
                         dtype=np.float64).reshape(y.mag.shape)
        slope_err = y.err * (2 * np.minimum(y.mag, 1.0) + y.err) + 5 * c.u
        err = (g.mag * slope_err + slope * g.err + g.err * slope_err
               + c.u * g.hat * (slope + slope_err) + c.tiny)
        return [c.done(g.mag * slope, err)]

    def numpy_slope(self, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        return cast(1, a) - out * out

    # the fast oracle's rules on balls

    exact_output_in_trace = True

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """1-Lipschitz: ``tanh(mid + lo) ± (rad + the rounding of mid + lo + ulps of the
        platform's tanh and of the spec's)``."""
        a = args[0]
        with np.errstate(invalid="ignore", over="ignore"):
            value = a.mid + a.lo
        mid = np.tanh(value)
        spread = add_up(a.rad, half_ulp(value), 2 * (LIBM_TANH_ULPS + 1) * half_ulp(mid))
        return Ball.of(mid, spread)

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``g (1 - t²)`` with t the spec's tanh value, enclosed by the ball ``out``
        (lo = 0)."""
        t = out
        square, square_lo, exact = two_product(t.mid, t.mid)
        slope, slope_lo = two_sum(np.ones_like(square), -square)
        lo, err = sum_rounded(slope_lo, -square_lo)
        underflow = np.where(exact, 0.0, half_ulp(square))  # |t| < 2**-484: t² rounded once
        rad = add_up(mul_up(t.rad, add_up(2 * np.abs(t.mid), t.rad)), err, underflow)
        return (ball.mul(g, Ball(slope, rad, lo)),)
