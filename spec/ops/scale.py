"""``scale``: multiplication by an exact rational constant α."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

from resverify.spec import ball
from resverify.spec.ball import Ball
from resverify.spec.errors import Shape
from resverify.spec.ops.attributes import EXACT, Kind
from resverify.spec.ops.base import ArrayNamespace, Site
from resverify.spec.ops.linear_map import LinearMap
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx


class Scale(LinearMap):
    """``scale(a, alpha)``: multiply by a constant α (exact rational). d(αa) = α da."""

    name, arity = "scale", 1
    attributes: ClassVar[Mapping[str, Kind]] = {"alpha": EXACT}
    families = ("relu", "scale")  # F = g·relu(x), F = a·x
    samples = (((2, 2),), ((),))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return shapes[0]

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        assert k is not None
        return args[0] * k

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The same product, on the cotangent."""
        return (self.value(xp, (g,), k),)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        assert alpha is not None
        return abs(alpha) * errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (self.error((g,), (g_err,), at.out, at.alpha),)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """α is first rounded to the dtype (``|α̂ - α| <= u|α|``, plus ``2**-53 |α|`` when it
        passes through float64 on the way), then one product as for mul."""
        assert at.alpha is not None
        size, miss = c.alpha(at.alpha)
        x = a[0]
        err = size * x.err + miss * x.hat + c.u * (size + miss) * x.hat + c.tiny
        return c.done(size * x.mag, err)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """The same product, on the cotangent."""
        return [self.budget(c, at, (g,))]

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return ball.mul(args[0], ball.constant(Fraction(alpha)))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return (self.enclose((g,), alpha),)
