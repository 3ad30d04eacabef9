"""``silu``: ``a σ(a)`` as ``torch.nn.functional.silu`` computes it, Llama's gate; enclosed
through sigmoid's enclosure."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball, add_up, mul_bounded, mul_up, point, recentred, select
from resverify.spec.ops.base import cast, elementwise
from resverify.spec.ops.gated import Gated
from resverify.spec.ops.sigmoid import (
    sigmoid_balls,
    spec_gate_error,
    stable_sigmoid,
)
from resverify.spec.rational import exact_sigmoid

FAR = -700.0
"""At or below it silu and its slope are enclosed as ``0 ± 2**-999``: ``|a σ(a)| <= |a|
e^a`` and ``|σ(a)(1 + a(1 - σ(a)))| <= (1 + |a|) e^a``, both below ``701 e^-700 < 2**-1000``
there."""

SILU_ULPS = 8
"""Error allowed for a backend's silu, in units of ``u|a|`` (an ulp of ``a`` is one or two
of them; ``|silu(a)| <= |a|``), plus twice the smallest normal where it underflows.

Not in ulps of the result: ``a/(1 + exp(-a))`` is 0 where ``exp(-a)`` overflows, off by
about 180 smallest normals in float64 at ``a = -712`` and by 2,040 ulps in float16 (jax,
tinygrad) at ``a = -11.5``, still below ``u|a|``. Measured against mpmath on 6,300 points a
dtype (the range where silu is not flushed, ±8, near 0), the largest error in units of
``u|a|``: torch 1.73 (float64), 1.92 (float32), 1.00 (float16); jax 1.83, 2.11, 1.89;
TensorFlow 1.59, 1.90, 1.51; tinygrad 1.73, 1.92, 1.01. 8 covers these with a margin."""


class Silu(Gated):
    """``silu(a) = a σ(a)``, silu' = σ(1 + a(1 - σ)) in [-0.0998, 1.0998], ``|silu''| <=
    1/2``. Not rational: σ is enclosed with mpmath
    (:func:`resverify.spec.rational.exact_sigmoid`)."""

    name, rational = "silu", False
    lipschitz, curvature, ulps = Fraction(9, 8), Fraction(1, 2), SILU_ULPS

    def gate(self, x: Fraction) -> Fraction:
        return exact_sigmoid(x)[0]

    def gate_slope(self, x: Any, g: Any) -> Any:
        return g * (1 - g)

    def numpy_gate(self, a: np.ndarray) -> np.ndarray:
        return stable_sigmoid(a)

    def numpy_gate_slope(self, a: np.ndarray, g: np.ndarray) -> np.ndarray:
        return g * (cast(1, a) - g)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(lambda v: v / (1 + sp.exp(-v)), args[0])

    # the fast oracle's rules on balls: narrow where they can be, the wide rules elsewhere

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """``v σ(v)`` from :func:`~resverify.spec.ops.sigmoid.sigmoid_balls` at ``v = mid +
        lo`` (its product with ``v`` error-free), widened by the Lipschitz bound times the
        argument's radius and by the spec's own distance (``|v|`` times the gate's,
        :func:`~resverify.spec.ops.sigmoid.spec_gate_error`); where
        that is not narrower (a tiny product, a huge ``v``), :meth:`Gated.wide_value`. The
        midpoint stays NumPy's (:func:`~resverify.spec.ball.recentred`)."""
        mid, spread = self.wide_value(args[0])
        at, moved = point(args[0])
        gate, _ = sigmoid_balls(at)
        value = mul_bounded(Ball.exact(at), gate)
        extra = add_up(mul_up(np.full_like(at, float(self.lipschitz)), moved),
                       _spec_error(at, moved,
                                   mul_up(add_up(np.abs(at), moved),
                                          spec_gate_error(at, gate, moved))))
        return recentred(mid, spread, _far(at, Ball(value.mid, add_up(value.rad, extra),
                                                    value.lo), extra))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``g`` times the slope ``σ(v)(1 + v σ(-v))`` from
        :func:`~resverify.spec.ops.sigmoid.sigmoid_balls` at ``v = mid + lo`` (``σ(-v)``
        enclosed itself, so ``1 - σ`` does not cancel), widened by the curvature times the
        argument's radius and the spec's distance (``2δ(1 + |v|)``, its gate within ``δ`` of
        σ, :func:`~resverify.spec.ops.sigmoid.spec_gate_error`); :meth:`Gated.wide_slope`
        where that is not narrower."""
        mid, spread = self.wide_slope(args[0])
        at, moved = point(args[0])
        gate, rest = sigmoid_balls(at)
        one = Ball.exact(np.ones_like(at))
        slope = mul_bounded(gate, ball.add(one, mul_bounded(Ball.exact(at), rest)))
        spec = _spec_error(at, moved, mul_up(2 * spec_gate_error(at, gate, moved),
                                             1 + add_up(np.abs(at), moved)))
        extra = add_up(mul_up(np.full_like(at, float(self.curvature)), moved), spec)
        tight = _far(at, Ball(slope.mid, add_up(slope.rad, extra), slope.lo), extra)
        return (ball.mul(g, recentred(mid, spread, tight)),)


def _far(at: np.ndarray, tight: Ball, extra: np.ndarray) -> Ball:
    """``tight``, but ``0 ± (2**-999 + extra)`` at or below :data:`FAR`."""
    zero = np.zeros_like(at)
    return select(at <= FAR, Ball(zero, add_up(np.full_like(at, 2.0**-999), extra), zero),
                  tight)


def _spec_error(at: np.ndarray, moved: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """How far the spec's silu or slope is from the true one: ``inner``, bounded over the
    argument's ball (``|x| <= |at| + moved``); at an exact argument (``moved`` 0) from 512
    on, where the spec's gate is exactly 1 and its value ``a`` and slope 1 are off by ``a
    σ(-a)`` and ``σ(-a)(1 + a σ(a))``, both below ``(1 + a) e^-a < 2**-700``."""
    return np.where((at >= 512) & (moved == 0), 2.0**-700, inner)
