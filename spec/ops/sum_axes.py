"""``sum_axes``: a sum over chosen axes, the reduction of attention's sums and of the mean
in a norm's decomposition (torch's ``sum(x, dim, keepdim)``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import BOOL, INTS, Kind, Sample
from resverify.spec.ops.base import ArrayNamespace, Site
from resverify.spec.ops.linear_map import LinearMap
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx, summed_over


def _kept(shape: Shape, k: Any) -> Shape:
    """The shape with every summed axis kept as length 1."""
    axes = k.ints("axes")
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _out(shape: Shape, k: Any) -> Shape:
    """The output's shape: the summed axes kept as 1 (``keepdim``) or dropped."""
    axes = k.ints("axes")
    if k.flag("keepdim"):
        return _kept(shape, k)
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _spread(v: np.ndarray, shape: Shape, k: Any) -> np.ndarray:
    """``v`` (of the output's shape) copied over the summed axes back to ``shape``."""
    return np.broadcast_to(v.reshape(_kept(shape, k)), shape).copy()


class SumAxes(LinearMap):
    """``sum_axes(a, axes, keepdim)``: the sum over ``axes`` (strictly increasing, each
    below the rank), the summed axes kept as length 1 when ``keepdim``; the cotangent is
    copied back over them. ``sum`` is ``sum_axes`` over every axis without keepdim."""

    name, arity = "sum_axes", 1
    attributes: ClassVar[Mapping[str, Kind]] = {"axes": INTS, "keepdim": BOOL}
    samples = (Sample(((2, 3),), axes=(1,), keepdim=False), Sample(((2, 3),), axes=(0,),
                                                                    keepdim=True),
               Sample(((2, 1, 3),), axes=(0, 2), keepdim=True),
               Sample(((2, 2, 2),), axes=(0, 1, 2), keepdim=False),
               Sample(((0, 3),), axes=(0,), keepdim=False),
               Sample(((2, 0),), axes=(1,), keepdim=True),
               Sample(((2, 3),), axes=(), keepdim=False))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        axes, rank = k.ints("axes"), len(shapes[0])
        if any(a >= rank for a in axes) or list(axes) != sorted(set(axes)):
            raise ShapeMismatch(self.name, shapes[0], axes)
        return _out(shapes[0], k)

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        """``xp.sum`` over the axes, then reshaped to keep them (no axes: the argument, as
        torch would sum every axis for an empty tuple)."""
        if not k.ints("axes"):
            return args[0]
        return xp.reshape(xp.sum(args[0], k.ints("axes")), _out(tuple(args[0].shape), k))

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent copied over the summed axes."""
        return (_spread(np.asarray(g), args[0].shape, k),)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr, alpha: Any
              ) -> Fraction:
        return max(1, args[0].size // max(1, out.size)) * errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err,)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Sums of N (the summed axes' sizes multiplied): ``gamma_{N-1}`` times the sum of
        magnitudes, as ``sum``'s (in the declared accumulation dtype, then one rounding:
        :meth:`Ctx.summed`)."""
        x, k = a[0], at.alpha
        out = _out(x.mag.shape, k)
        summed = summed_over(c, x, tuple(k.ints("axes")))
        return Bound(summed.mag.reshape(out), summed.err.reshape(out))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Copies: no rounding."""
        shape = a[0].mag.shape
        return [Bound(_spread(g.mag, shape, at.alpha), _spread(g.err, shape, at.alpha))]

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        x = args[0]
        return ball.reduce_sum(x, alpha.ints("axes")).reshape(_out(x.mid.shape, alpha))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        shape = args[0].mid.shape
        return (Ball(*(_spread(v, shape, alpha) for v in (g.mid, g.rad, g.lo))),)
