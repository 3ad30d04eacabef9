"""``neg``: ``-a``, exact in every dtype (Llama's rotary ``rotate_half``)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from resverify.spec.ball import Ball
from resverify.spec.errors import Shape
from resverify.spec.ops.base import ArrayNamespace, Site
from resverify.spec.ops.linear_map import LinearMap
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx


class Neg(LinearMap):
    """``neg(a) = -a``; d(-a) = -da. Flipping the sign rounds nothing, so its budget is its
    argument's: a backend's answer must be exactly the negation of what it was given."""

    name, arity = "neg", 1
    samples = (((3,),), ((),))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return shapes[0]

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return -args[0]

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The same negation, on the cotangent."""
        return (-g,)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err,)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Exact: the argument's error, no rounding."""
        return c.done(a[0].mag, a[0].err)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Exact: the cotangent's error, no rounding."""
        return [c.done(g.mag, g.err)]

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        a = args[0]
        return Ball(-a.mid, a.rad, -a.lo)

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return (self.enclose((g,), alpha),)
