"""``silu``: ``a σ(a)`` as ``torch.nn.functional.silu`` computes it, Llama's gate; enclosed
through sigmoid's enclosure."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball, add_up, half_ulp, mul_up
from resverify.spec.ops.base import Site, cast, elementwise
from resverify.spec.ops.elementwise import Elementwise
from resverify.spec.ops.sigmoid import LIBM_SIGMOID_ULPS, stable_sigmoid
from resverify.spec.rational import Arr, exact_sigmoid, fraction, mag, objects, times
from resverify.spec.rounding import Bound, Ctx, up

SILU_ULPS = 8
"""Error allowed for a backend's silu, in units of ``u|a|`` (an ulp of ``a`` is one or two
of them; ``|silu(a)| <= |a|``), plus twice the smallest normal where it underflows.

Not in ulps of the result: ``a/(1 + exp(-a))`` is 0 where ``exp(-a)`` overflows, off by
about 180 smallest normals in float64 at ``a = -712`` and by 2,040 ulps in float16 (jax,
tinygrad) at ``a = -11.5``, still below ``u|a|``. Measured against mpmath on 6,300 points a
dtype (the range where silu is not flushed, ±8, near 0), the largest error in units of
``u|a|``: torch 1.73 (float64), 1.92 (float32), 1.00 (float16); jax 1.83, 2.11, 1.89;
TensorFlow 1.59, 1.90, 1.51; tinygrad 1.73, 1.92, 1.01. 8 covers these with a margin."""

LIPSCHITZ = Fraction(9, 8)
"""``|silu'| <= 1.0998`` (its largest slope, at a = 2.3994; its least is -0.0998)."""

SLOPE_UNITS = 32
"""A backend's slope ``σ(1 + a(1 - σ))`` (or ``σ + aσ(1 - σ)``) is off by at most 32u: a
sigmoid of ``SIGMOID_ULPS`` ulps (16u) and up to six roundings, each relative to terms
whose sizes sum to at most 1.3 (``σ + |a|σ(1 - σ) <= 1.224``)."""

TAIL = Fraction(1, 2**700)
"""``|a|`` times this bounds the gate's enclosure width where σ is carried as 0 or 1."""


def _gate(x: Any, y: Any) -> Any:
    """σ(x): the enclosure's midpoint for a number, ``y/x`` for a SymPy symbol (y = x σ(x))."""
    return exact_sigmoid(x)[0] if isinstance(x, Fraction) else y / x


class Silu(Elementwise):
    """``silu(a) = a σ(a)``, silu' = σ(1 + a(1 - σ)). Not rational: σ is enclosed with mpmath
    (:func:`resverify.spec.rational.exact_sigmoid`)."""

    name, rational = "silu", False

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        flat = [fraction(v) for v in args[0].reshape(-1).tolist()]
        return objects([x * exact_sigmoid(x)[0] for x in flat], args[0].shape)

    def exact_slope(self, args: Sequence[Arr], out: Arr) -> Arr:
        slope = [s + x * s * (1 - s) for x, y in zip(args[0].reshape(-1).tolist(),
                                                       out.reshape(-1).tolist(), strict=True)
                 for s in (_gate(x, y),)]
        return objects(slope, args[0].shape)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        """9/8-Lipschitz, plus ``|a|`` times σ's enclosure width (``2**-200`` of σ, or
        ``2**-700`` where σ is carried as 0 or 1)."""
        return LIPSCHITZ * errs[0] + mag(out) / 2**200 + mag(args[0]) * TAIL

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """The slope at the carried ``a``: ``|silu''| <= 1/2`` moves it by ``e_a/2``, and σ's
        width ``w`` by ``(1 + |a|) w``; ``|silu'| <= 9/8``."""
        slope_err = at.errs[0] / 2 + (1 + mag(at.args[0])) / 2**200
        return (times(mag(g), g_err, LIPSCHITZ, slope_err),)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """9/8-Lipschitz; a backend's silu may be :data:`SILU_ULPS` units of ``u|a|`` off, or
        off by twice the smallest normal (``tiny/u``) where it underflows."""
        x = a[0]
        exact = [up(abs(Fraction(v)) + at.err) for v in at.out.reshape(-1).tolist()]
        size = np.minimum(x.mag, np.array(exact, dtype=np.float64).reshape(x.mag.shape))
        err = float(LIPSCHITZ) * x.err + SILU_ULPS * c.u * x.hat + c.tiny / c.u
        return c.done(size, err)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``ḡ s`` with the slope ``s`` off by ``e_a/2`` (``|silu''| <= 1/2``) plus
        :data:`SLOPE_UNITS` u, and one rounding of the product."""
        slope, slope_err = float(LIPSCHITZ), a[0].err / 2 + SLOPE_UNITS * c.u
        err = (g.mag * slope_err + slope * g.err + g.err * slope_err
               + c.u * g.hat * (slope + slope_err) + c.tiny)
        return [c.done(g.mag * slope, err)]

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(lambda v: v / (1 + sp.exp(-v)), args[0])

    def numpy_value(self, a: np.ndarray) -> np.ndarray:
        return a * stable_sigmoid(a)

    def numpy_slope(self, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        s = stable_sigmoid(a)
        return s * (cast(1, a) + a * (cast(1, a) - s))

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """9/8-Lipschitz: ``v σ(v)`` at ``v = mid + lo`` ± (9/8 of the radius and of the
        rounding of v, ``|v|`` times the ulps of NumPy's sigmoid and of the spec's, and the
        product's rounding)."""
        a = args[0]
        with np.errstate(invalid="ignore", over="ignore"):
            value = a.mid + a.lo
            s = stable_sigmoid(value)
            mid = value * s
        gate = mul_up(np.abs(value), 2 * (LIBM_SIGMOID_ULPS + 1) * half_ulp(s))
        moved = mul_up(np.full_like(value, 1.125), add_up(a.rad, half_ulp(value)))
        spread = add_up(moved, gate, half_ulp(mid))
        return Ball.of(mid, spread)

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``g`` times the slope ``σ(1 + v(1 - σ))`` at ``v = mid + lo``, ± half the radius
        (``|silu''| <= 1/2``) and :data:`SLOPE_UNITS` float64 units for its arithmetic."""
        a = args[0]
        with np.errstate(invalid="ignore", over="ignore"):
            value = a.mid + a.lo
            s = stable_sigmoid(value)
            slope = s * (1 + value * (1 - s))
        arithmetic = np.full_like(slope, SLOPE_UNITS * 2.0**-53)
        rad = add_up(add_up(a.rad, half_ulp(value)) / 2, arithmetic)
        return (ball.mul(g, Ball.of(slope, np.where(np.isfinite(slope), rad, np.inf))),)
