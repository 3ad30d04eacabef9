"""``tanh``: a smooth nonlinear branch, its exact value enclosed with mpmath."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import (
    Ball,
    add_up,
    half_ulp,
    mul_up,
    sum_rounded,
    two_product,
    two_sum,
)
from resverify.spec.errors import Shape
from resverify.spec.ops.base import (
    ArrayNamespace,
    Op,
    Pullback,
    Site,
    cast,
    elementwise,
)
from resverify.spec.rational import (
    Arr,
    exact_tanh,
    fraction,
    mag,
    obj,
    objects,
    tanh_error,
)
from resverify.spec.rounding import (
    Bound,
    Ctx,
    up,
)

TANH_ULPS = 4
"""Error allowed for a backend's tanh, in ulps of the result.

glibc lists 2–3 ulps for tanh and CUDA 2 ulps for tanhf; NumPy's tanh measured 1.05 ulp
(float64) and 1.26 ulp (float32) against mpmath. 4 covers these with a small margin and
is still far too tight to hide a wrong formula."""

LIBM_TANH_ULPS = 8
"""Ulps of error the fast oracle allows ``np.tanh`` (glibc documents at most 2; NumPy
measured 1.05)."""


class Tanh(Op):
    """``tanh(a)``: a smooth nonlinear branch, tanh' = 1 - tanh². Not rational: the exact
    value is enclosed with mpmath (:func:`resverify.spec.rational.exact_tanh`)."""

    name, arity, rational = "tanh", 1, False
    families = ("tanh",)  # F = tanh(x)
    samples = (((3,),), ((),))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return shapes[0]

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return objects([exact_tanh(fraction(v))[0] for v in args[0].reshape(-1).tolist()],
                       args[0].shape)

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(g * (1 - out * out)),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0] * (1 - out * out))

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0] + tanh_error(out)  # 1-Lipschitz, plus the enclosure's own width

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err + mag(g) * at.err * (2 * mag(at.out) + at.err),)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """The VJP's bound with the tangent for the cotangent (the same slope)."""
        return self.error_vjp(at, ts[0], t_errs[0])[0]

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

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``t (1 - y²)``: the VJP's arithmetic with the tangent for the cotangent."""
        return self.budget_vjp(c, at, a, y, ts[0])[0]

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(sp.tanh, args[0])

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        (a,) = args
        t = cast(np.tanh(a), a)
        one = cast(1, a)
        return t, lambda g: (cast(g * (one - t * t), a),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return cast(ts[0] * (cast(1, args[0]) - out * out), args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return xp.tanh(args[0])

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
