"""``exp``: the exponential of softmax and of SiLU's gate, its exact value enclosed with mpmath."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball, add_up, half_ulp, mul_up
from resverify.spec.errors import InvalidRequest
from resverify.spec.ops.base import Site
from resverify.spec.ops.elementwise import Elementwise
from resverify.spec.rational import Arr, exact_exp, exp_error, fraction, mag, objects, times
from resverify.spec.rounding import Bound, Ctx, product, up

EXP_ULPS = 8
"""Error allowed for a backend's exp, in ulps of the result where it is normal; below the
smallest normal, an absolute error up to twice it (a library may flush to 0 there).

Measured against mpmath on 6,300 points a dtype (the dtype's whole range, ±8, near 0):
NumPy (the reference's, and autograd's) 0.64 (float64), 2.27 (float32), 0.50 (float16)
ulps; torch 0.64, 0.53, 0.50; jax 1.38, 3.83 (float32, at x = 88.7), 0.50; TensorFlow 1.38,
1.12, 0.50; pytensor 0.50, 0.50. 8 covers these with a margin and refuses ``exp(x(1 +
2u))`` from ``|x| > 8`` on. tinygrad's ``exp2(x log2 e)`` is such a formula, 428 ulps off in
float64 (x = 672) and 61 in float32 (x = 79.7): tinygrad does not claim exp."""

LIBM_EXP_ULPS = 8
"""Ulps of error the fast oracle allows ``np.exp`` (measured 0.64 in float64)."""


def _sizes(out: Arr, err: Fraction) -> np.ndarray:
    """Upper bounds of ``|exp(x)|`` from the carried values and their error (float64)."""
    flat = [up(abs(Fraction(v)) + err) for v in out.reshape(-1).tolist()]
    return np.array(flat, dtype=np.float64).reshape(np.shape(out))


class Exp(Elementwise):
    """``exp(a)``, exp' = exp. Not rational: the exact value is enclosed with mpmath
    (:func:`resverify.spec.rational.exact_exp`)."""

    name, rational = "exp", False

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return objects([exact_exp(fraction(v))[0] for v in args[0].reshape(-1).tolist()],
                       args[0].shape)

    def exact_slope(self, args: Sequence[Arr], out: Arr) -> Arr:
        return out

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        """``|exp(x + d) - exp(x)| = exp(x)|e^d - 1| <= 2|d| exp(x)`` for ``|d| <= 1``
        (e^d - 1 is convex), plus the enclosure's own width."""
        d, width = errs[0], exp_error(out)
        if d > 1:
            raise InvalidRequest(f"exp's argument is known to within {float(d)!r} only: "
                                 "its error bound needs it within 1")
        return 2 * d * (mag(out) + width) + width

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (times(mag(g), g_err, mag(at.out), at.err),)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Relative to the value: the argument's error ``d`` grows ``exp(x)`` by at most
        ``e^d``, a backend's exp may be :data:`EXP_ULPS` ulps off (``ulp(v) <= 2u|v|``), or
        off by twice the smallest normal (``tiny/u``) where it underflows. Where ``exp`` of
        the computed argument may reach the dtype's largest finite value the bound is
        infinite (``Ctx.done``): overflow to inf is allowed there, nowhere else."""
        size = _sizes(at.out, at.err)
        with np.errstate(over="ignore", invalid="ignore"):
            grown = size * np.exp(a[0].err)
            err = size * np.expm1(a[0].err) + 2 * EXP_ULPS * c.u * grown + c.tiny / c.u
        return c.done(size, err)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``ḡ · y``: one rounded product of the cotangent and the computed value."""
        size, err = product(c, g, y)
        return [c.done(size, err)]

    def numpy_slope(self, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        return out

    # the fast oracle's rules on balls

    exact_output_in_trace = True

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """``exp(v ± r) ⊂ exp(v) [e^-r, e^r]``, ``e^r - 1 <= 2r`` for ``r <= 1``: ``exp(mid +
        lo)`` ± (2r of its upper bound + ulps of NumPy's exp and of the spec's), r the
        radius plus the rounding of ``mid + lo``."""
        a = args[0]
        with np.errstate(invalid="ignore", over="ignore"):
            value = a.mid + a.lo
            mid = np.exp(value)
        r = add_up(a.rad, half_ulp(value))
        own = 2 * (LIBM_EXP_ULPS + 1) * half_ulp(mid)
        grown = np.where(r <= 1, mul_up(2 * r, add_up(np.abs(mid), own)), np.inf)
        return Ball.of(mid, add_up(grown, own))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``g · exp(a)``, the spec's value enclosed by the ball ``out``."""
        return (ball.mul(g, out),)
