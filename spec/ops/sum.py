"""``sum``: the sum of every element, shape ()."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball
from resverify.spec.errors import Shape
from resverify.spec.ops.base import ArrayNamespace, Site
from resverify.spec.ops.linear_map import LinearMap
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx, summed_over


class Sum(LinearMap):
    """``sum(a)``: the sum of every element, shape (); the cotangent is copied to every
    element."""

    name, arity = "sum", 1
    samples = (((2, 3),), ((),), ((0, 2),))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return ()

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return xp.sum(args[0])

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent copied to every element."""
        return (np.broadcast_to(g, args[0].shape).copy(),)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return args[0].size * errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err,)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """A sum of N elements: ``gamma_{N-1}`` times the sum of magnitudes (in the
        declared accumulation dtype, then one rounding: :meth:`Ctx.summed`)."""
        return summed_over(c, a[0], tuple(range(a[0].mag.ndim)))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Copies: no rounding."""
        shape = a[0].mag.shape
        return [Bound(np.broadcast_to(g.mag, shape).copy(), np.broadcast_to(g.err, shape).copy())]

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return ball.reduce_sum(args[0], tuple(range(args[0].mid.ndim)))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        shape = args[0].mid.shape
        return (Ball(*(np.broadcast_to(v, shape).copy() for v in (g.mid, g.rad, g.lo))),)
