"""``scale``: multiplication by an exact rational constant α."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import (
    Ball,
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
    obj,
)
from resverify.spec.rounding import (
    Bound,
    Ctx,
)


class Scale(Op):
    """``scale(a, alpha)``: multiply by a constant α (exact rational). d(αa) = α da."""

    name, arity, attribute = "scale", 1, "alpha"
    families = ("relu", "scale")  # F = g·relu(x), F = a·x
    samples = (((2, 2),), ((),))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return shapes[0]

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(args[0] * alpha)

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(g * alpha),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0] * alpha)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        assert alpha is not None
        return abs(alpha) * errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        assert at.alpha is not None
        return (abs(at.alpha) * g_err,)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        assert at.alpha is not None
        return abs(at.alpha) * t_errs[0]

    @staticmethod
    def _scaled(c: Ctx, alpha: Fraction | None, x: Bound) -> Bound:
        assert alpha is not None
        size, miss = c.alpha(alpha)
        err = size * x.err + miss * x.hat + c.u * (size + miss) * x.hat + c.tiny
        return c.done(size * x.mag, err)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """α is first rounded to the dtype (``|α̂ - α| <= u|α|``, plus ``2**-53 |α|`` when it
        passes through float64 on the way), then one product as for mul."""
        return self._scaled(c, at.alpha, a[0])

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """The same product, on the cotangent."""
        return [self._scaled(c, at.alpha, g)]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The same product, on the tangent."""
        return self._scaled(c, at.alpha, ts[0])

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(lambda v: sp.Mul(alpha, v), args[0])

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        assert alpha is not None
        (a,) = args
        k = cast(float(alpha), a)  # α rounded once to the tensor's dtype
        return cast(a * k, a), lambda g: (cast(g * k, a),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        assert alpha is not None
        return cast(ts[0] * cast(float(alpha), args[0]), args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        assert alpha is not None
        return args[0] * float(alpha)

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return ball.mul(args[0], ball.constant(Fraction(alpha)))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return (ball.mul(g, ball.constant(Fraction(alpha))),)
