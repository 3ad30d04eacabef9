"""``mul``: the elementwise product, broadcasting as ``add``."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from resverify.spec import ball
from resverify.spec.ball import Ball
from resverify.spec.errors import Shape
from resverify.spec.ops.base import (
    ArrayNamespace,
    Site,
    broadcast_copies,
    broadcast_shapes,
    exact_sizes,
    unbroadcast,
)
from resverify.spec.ops.linear_map import Bilinear
from resverify.spec.rational import ZERO, Arr, mag, times
from resverify.spec.rounding import Bound, Ctx, exact_product, product


class Mul(Bilinear):
    """``mul(a, b)``: elementwise product, broadcasting as add. d(ab) = b da + a db."""

    name = "mul"
    budget_reads_args = False  # its budget rules read Bounds and its own output
    families = ("gate", "silu")  # F = x ⊙ g, F = x ⊙ σ(x)
    samples = (((2, 3), (2, 3)), ((2, 1), (1, 3)), ((3,), ()))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return broadcast_shapes(self.name, shapes[0], shapes[1])

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return args[0] * args[1]

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """``ḡ b`` and ``ḡ a``, each summed back over what broadcasting added."""
        a, b = args
        return unbroadcast(g * b, a.shape), unbroadcast(g * a, b.shape)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        if not any(errs):
            return ZERO
        return times(mag(args[0]), errs[0], mag(args[1]), errs[1])

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        mg, (a, b), (ea, eb) = mag(g), at.args, at.errs
        return (broadcast_copies(g, a) * times(mg, g_err, mag(b), eb),
                broadcast_copies(g, b) * times(mg, g_err, mag(a), ea))

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """``|a| e_b + |b| e_a + e_a e_b + u z``, ``z = min(hat_a hat_b, |v| + |a| e_b + |b|
        e_a + e_a e_b)`` the computed product's size before its rounding, ``v`` the exact
        product read from the trace (:func:`~resverify.spec.rounding.exact_product`)."""
        return exact_product(c, a[0], a[1], exact_sizes(at))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """One product per element, then un-broadcast as for add."""
        out = []
        for arg, other in ((a[0], a[1]), (a[1], a[0])):
            size, err = product(c, g, other)
            shape = arg.mag.shape
            copies = size.size // max(1, arg.mag.size)
            summed = unbroadcast(err, shape) + c.gamma(copies - 1) * unbroadcast(
                (1 + c.u) * g.hat * other.hat + c.tiny, shape)
            out.append(c.done(unbroadcast(size, shape), summed, copies))
        return out

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``t_a b + a t_b``: two products as for the forward, then their rounded sum."""
        m1, e1 = product(c, ts[0], a[1])
        m2, e2 = product(c, a[0], ts[1])
        return c.done(m1 + m2, e1 + e2 + c.u * (m1 + e1 + m2 + e2))

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return ball.mul(args[0], args[1])

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return (ball.unbroadcast(ball.mul(g, args[1]), args[0].mid.shape),
                ball.unbroadcast(ball.mul(g, args[0]), args[1].mid.shape))
