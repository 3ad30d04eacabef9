"""``sigmoid``: ``1/(1 + exp(-a))``, the gate of SiLU; its exact value enclosed with mpmath."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import (
    Ball,
    add_up,
    exp_nonpositive,
    half_ulp,
    mul_bounded,
    mul_up,
    point,
    recentred,
    reciprocal,
    select,
)
from resverify.spec.ops.base import Site, cast, elementwise
from resverify.spec.ops.elementwise import Elementwise
from resverify.spec.rational import Arr, exact_sigmoid, fraction, mag, objects, sigmoid_error
from resverify.spec.rounding import Bound, Ctx, up

SIGMOID_ULPS = 8
"""Error allowed for a backend's sigmoid, in ulps of the result where it is normal; below
the smallest normal, an absolute error up to twice it (``1/(1 + exp(-x))`` with ``exp``
overflowing returns 0 there).

Measured against mpmath on 5,500 points a dtype (±8, the dtype's range, near 0): NumPy's
stable form (the reference's) 1.80 (float64), 2.44 (float32), 1.76 (float16) ulps; torch,
jax and autograd 1.77, 1.93, 1.84; pytensor 1.77, 1.32; TensorFlow 1.65 (float64) and 5.28
(float32, at x = -42.4). Below the smallest normal, torch, jax and TensorFlow are off by up to
0.96 of it. 8 covers these with a margin and is still far too tight to hide a wrong formula."""

LIBM_SIGMOID_ULPS = 8
"""Ulps of error the fast oracle allows the NumPy sigmoid it computes midpoints with (its
stable form measured 1.80 in float64)."""


def stable_sigmoid(a: np.ndarray) -> np.ndarray:
    """``1/(1 + e)`` for ``a >= 0`` and ``e/(1 + e)`` below, ``e = exp(-|a|)`` (never
    overflows, so a tiny sigmoid keeps its relative accuracy), in ``a``'s dtype."""
    one = cast(1, a)
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, one / (one + e), e / (one + e))


def spec_gate_error(value: np.ndarray, gate: Ball, moved: np.ndarray) -> np.ndarray:
    """How far the spec's sigmoid (:func:`~resverify.spec.rational.exact_sigmoid`) at any
    ``x`` within ``moved`` of ``value`` may be from the true one, ``gate`` a ball around
    ``σ(value)``. At ``value`` itself (``moved`` 0): ``2**-700`` from 512 on (carried as 1),
    ``2**-1100`` at or below -1100 (carried as 0), ``2**-200`` of itself between, at most
    ``2**-199`` of the ball's size; elsewhere ``2**-199``, which bounds each of these
    (``σ <= 1``) whichever side of 512 or -1100 ``x`` lies."""
    inner = mul_up(gate.size, np.full_like(value, 2.0**-199))
    exact = np.where(value >= 512, 2.0**-700, np.where(value <= -1100, 2.0**-1100, inner))
    return np.where(moved == 0, exact, 2.0**-199)


def sigmoid_balls(value: np.ndarray) -> tuple[Ball, Ball]:
    """Balls around ``σ(v)`` and ``σ(-v) = 1 - σ(v)`` of float64 ``v`` (read exactly), each
    within about half an ulp of its own size, libm not trusted:
    ``e = exp(-|v|)`` (:func:`~resverify.spec.ball.exp_nonpositive`), ``σ(|v|) = 1/(1 +
    e)`` (:func:`~resverify.spec.ball.reciprocal`) and ``σ(-|v|) = e σ(|v|)``
    (:func:`~resverify.spec.ball.mul_bounded`: a bound where it is tiny). They hold the
    true values; the spec's are up to :func:`spec_gate_error` away."""
    e = exp_nonpositive(-np.abs(value))
    near = reciprocal(ball.add(Ball.exact(np.ones_like(value)), e))
    far = mul_bounded(e, near)
    up = value >= 0
    return select(up, near, far), select(up, far, near)


class Sigmoid(Elementwise):
    """``sigmoid(a)``: ``σ(a) = 1/(1 + exp(-a))``, σ' = σ(1 - σ) <= 1/4. Not rational: the
    exact value is enclosed with mpmath (:func:`resverify.spec.rational.exact_sigmoid`)."""

    name, rational = "sigmoid", False
    families = ("silu",)  # F = x ⊙ σ(x)

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return objects([exact_sigmoid(fraction(v))[0] for v in args[0].reshape(-1).tolist()],
                       args[0].shape)

    def exact_slope(self, args: Sequence[Arr], out: Arr) -> Arr:
        return out * (1 - out)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0] / 4 + sigmoid_error(out)  # 1/4-Lipschitz, plus the enclosure's width

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """``|ḡ σ' - ḡ' s(1 - s)| <= e_g/4 + |ḡ'| e_s (1 + e_s)``: ``|1 - σ - s| <= 1 + e_s``."""
        return (g_err / 4 + mag(g) * at.err * (1 + at.err),)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """1/4-Lipschitz (``σ <= 1/2 + |x|/4``); a backend's sigmoid may be
        :data:`SIGMOID_ULPS` ulps off (``ulp(s) <= 2u|s|``), or off by twice the smallest
        normal (``tiny/u``) where it underflows."""
        x = a[0]
        size = np.minimum(0.5 + x.mag / 4, 1.0)
        own = 2 * SIGMOID_ULPS * c.u * np.minimum(size + x.err / 4, 1.0) + c.tiny / c.u
        return c.done(size, x.err / 4 + own)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``ḡ s (1 - s)`` gets ``e_s (1 + e_s)`` for the error of s and ``3u (1 + e_s)²``
        for the roundings of ``1 - s`` and the products, in any order."""
        e = at.err
        slope = np.array([min(0.25, up(v * (1 - v) + e * (1 + e)))
                          for v in at.out.reshape(-1).tolist()],
                         dtype=np.float64).reshape(y.mag.shape)
        slope_err = y.err * (1 + y.err) + 3 * c.u * (1 + y.err) ** 2
        err = (g.mag * slope_err + slope * g.err + g.err * slope_err
               + c.u * g.hat * (slope + slope_err) + 3 * c.tiny)
        return [c.done(g.mag * slope, err)]

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(lambda v: 1 / (1 + sp.exp(-v)), args[0])

    def numpy_value(self, a: np.ndarray) -> np.ndarray:
        return stable_sigmoid(a)

    def numpy_slope(self, a: np.ndarray, out: np.ndarray) -> np.ndarray:
        return out * (cast(1, a) - out)

    # the fast oracle's rules on balls

    exact_output_in_trace = True

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """1/4-Lipschitz (here, more loosely, 1): ``σ(mid + lo) ± (rad + the rounding of
        mid + lo + ulps of NumPy's sigmoid and of the spec's)``; element by element where
        narrower, :func:`sigmoid_balls` at ``mid + lo`` (about half an ulp) widened by a
        quarter of the argument's radius and by the spec's own distance, written around the
        same midpoint (:func:`~resverify.spec.ball.recentred`)."""
        a = args[0]
        with np.errstate(invalid="ignore", over="ignore"):
            value = a.mid + a.lo
        mid = stable_sigmoid(value)
        spread = add_up(a.rad, half_ulp(value), 2 * (LIBM_SIGMOID_ULPS + 1) * half_ulp(mid))
        at, moved = point(a)
        gate, _ = sigmoid_balls(at)
        extra = add_up(mul_up(np.full_like(at, 0.25), moved), spec_gate_error(at, gate, moved))
        return recentred(mid, spread, Ball(gate.mid, add_up(gate.rad, extra), gate.lo))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``g s (1 - s)`` with s the spec's sigmoid value, enclosed by the ball ``out``."""
        rest = ball.add(Ball.exact(np.ones_like(out.mid)), Ball(-out.mid, out.rad, -out.lo))
        return (ball.mul(g, ball.mul(out, rest)),)
