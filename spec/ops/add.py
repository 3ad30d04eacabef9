"""``add``: elementwise addition with NumPy broadcasting."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball
from resverify.spec.errors import Shape
from resverify.spec.ops.base import (
    ArrayNamespace,
    Site,
    broadcast_copies,
    broadcast_shapes,
    exact_sizes,
    sum_back,
    unbroadcast,
)
from resverify.spec.ops.linear_map import LinearMap
from resverify.spec.rational import Arr
from resverify.spec.rounding import Bound, Ctx


class Add(LinearMap):
    """``add(a, b)``: elementwise sum, NumPy broadcasting allowed. d(a+b) = da + db."""

    name, arity = "add", 2
    budget_reads_args = False  # its budget rules read Bounds and its own output
    families: ClassVar[tuple[str, ...]] = ("bias",)  # F = x + b, b broadcast
    samples: ClassVar[tuple[tuple[Shape, ...], ...]] = (
        ((2, 3), (2, 3)), ((2, 1), (3,)), ((), (2,)), ((1,), (2, 2)), ((0, 2), (2,)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return broadcast_shapes(self.name, shapes[0], shapes[1])

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return args[0] + args[1]

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """The cotangent summed back over what broadcasting added."""
        return unbroadcast(g, args[0].shape), unbroadcast(g, args[1].shape)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0] + errs[1]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return tuple(g_err * broadcast_copies(g, a) for a in at.args)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """``e_a + e_b + u z``: the computed sum before its one rounding, ``â + b̂``, is
        within ``e_a + e_b`` of the exact ``v`` (read from the trace, its slack added) and at
        most ``hat_a + hat_b``, so ``z = min(hat_a + hat_b, |v| + e_a + e_b)`` bounds it,
        ``min(|a| + |b|, |v|)`` the true value; infinite only where ``z`` may reach the
        magnitude that rounds to infinity (:meth:`Ctx.rounded`: a score plus a causal mask's
        ``finfo.min`` rounds to ``finfo.min``, not to -inf)."""
        before, exact = a[0].err + a[1].err, exact_sizes(at)
        size = np.fmin(a[0].hat + a[1].hat, exact + before)
        return c.rounded(np.fmin(a[0].mag + a[1].mag, exact), before + c.u * size, size)

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``e_a + e_b + u (hat_a + hat_b)`` on the tangents (the trace holds no exact
        tangent to read a smaller size from)."""
        return c.done(ts[0].mag + ts[1].mag,
                      ts[0].err + ts[1].err + c.u * (ts[0].hat + ts[1].hat))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Un-broadcasting N cotangent copies: gamma_{N-1} times the sum of their sizes."""
        return [sum_back(c, g, arg.mag.shape) for arg in a]

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return ball.add(args[0], args[1])

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return ball.unbroadcast(g, args[0].mid.shape), ball.unbroadcast(g, args[1].mid.shape)
