"""``expand``: broadcast to a larger shape, each element copied where broadcasting says."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

from resverify.spec import ball
from resverify.spec.ball import Ball
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INTS, Kind, Sample
from resverify.spec.ops.base import (
    ArrayNamespace,
    Site,
    broadcast_copies,
    broadcast_shapes,
    sum_back,
    unbroadcast,
)
from resverify.spec.ops.layout import Layout
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx


class Expand(Layout):
    """``expand(a, shape)``: ``a`` broadcast to ``shape`` by NumPy's rules (leading axes
    added, axes of length 1 stretched; ``shape`` must be what broadcasting gives). The
    VJP sums the cotangent over the copies, which rounds: its error, budget and ball are
    add's un-broadcasting."""

    name, arity = "expand", 1
    attributes: ClassVar[Mapping[str, Kind]] = {"shape": INTS}
    samples = (Sample(((3,),), shape=(2, 3)), Sample(((2, 1),), shape=(2, 4)),
               Sample(((),), shape=(2, 2)), Sample(((1, 2),), shape=(0, 2)),
               Sample(((2, 3),), shape=(2, 3)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        target = k.ints("shape")
        if broadcast_shapes(self.name, shapes[0], target) != target:
            raise ShapeMismatch(self.name, shapes[0], target)
        return target

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return xp.broadcast_to(args[0], k.ints("shape"))

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent summed over the copies."""
        return (unbroadcast(g, args[0].shape),)

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err * broadcast_copies(g, at.args[0]),)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Un-broadcasting N cotangent copies: gamma_{N-1} times the sum of their sizes."""
        return [sum_back(c, g, a[0].mag.shape)]

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return (ball.unbroadcast(g, args[0].mid.shape),)
