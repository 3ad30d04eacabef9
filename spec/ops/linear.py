"""``linear``: ``x @ w`` without bias."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from resverify.spec import ball
from resverify.spec.ball import Ball
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.base import ArrayNamespace, Site, exact_sizes
from resverify.spec.ops.linear_map import Bilinear
from resverify.spec.rational import ZERO, Arr, mag, times
from resverify.spec.rounding import Bound, Ctx, dot, dots, rows, transposed


class Linear(Bilinear):
    """``linear(x, w)``: ``x @ w``, x of shape (..., d_in), w of shape (d_in, d_out), no bias.
    VJP: x̄ = ȳ wᵀ, w̄ = Σ over leading axes of xᵀ ȳ."""

    name = "linear"
    budget_reads_args = False  # its budget rules read Bounds and its own output
    families = ("linear",)  # F = xW
    samples = (((3,), (3, 2)), ((2, 3), (3, 2)), ((2, 1, 2), (2, 3)), ((0, 2), (2, 3)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        x, w = shapes
        if len(x) < 1 or len(w) != 2 or x[-1] != w[0]:
            raise ShapeMismatch(self.name, x, w)
        return (*x[:-1], w[1])

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return xp.matmul(args[0], args[1])

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """``ḡ wᵀ`` and ``xᵀ ḡ`` summed over the leading axes."""
        x, w = args
        d_in, d_out = w.shape
        count = math.prod(x.shape[:-1])  # not reshape(-1, d_in): d_in may be 0
        gw = xp.matmul(x.reshape(count, d_in).T, g.reshape(count, d_out)).reshape(w.shape)
        return xp.matmul(g, w.T).reshape(x.shape), gw

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        if not any(errs):
            return ZERO
        return args[1].shape[0] * times(mag(args[0]), errs[0], mag(args[1]), errs[1])

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        mg, (x, w), (ex, ew) = mag(g), at.args, at.errs
        count = math.prod(x.shape[:-1])
        return (w.shape[1] * times(mg, g_err, mag(w), ew), count * times(mg, g_err, mag(x), ex))

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """A dot product of length n: the propagated part as for mul summed over n terms,
        plus ``gamma_n (|x̂| @ |ŵ|)`` (any summation order, with or without FMA), or the
        declared accumulation's gamma and one final rounding (:meth:`Ctx.summed`)."""
        x, w = a
        shape = x.mag.shape[:-1] + w.mag.shape[1:]
        exact = (exact_sizes(at).reshape(math.prod(shape[:-1]), *shape[-1:]) if c.widened
                 else None)
        out = dot(c, rows(x, w.mag.shape[0]), w, exact)
        return Bound(out.mag.reshape(shape), out.err.reshape(shape))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Both VJPs are dot products too: ``ḡ wᵀ`` and ``xᵀ ḡ``."""
        x, w = a
        d_in, d_out = w.mag.shape
        gx = dot(c, rows(g, d_out), transposed(w))
        gw = dot(c, transposed(rows(x, d_in)), rows(g, d_out))
        return [Bound(gx.mag.reshape(x.mag.shape), gx.err.reshape(x.mag.shape)), gw]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``t_x w + x t_w``: 2n products summed in any order (two dots and an addition, or
        one dot of length 2n), so their propagated errors plus ``gamma_2n`` of both
        magnitude products."""
        (x, w), (tx, tw) = a, ts
        n = w.mag.shape[0]
        out = dots(c, [(rows(tx, n), w), (rows(x, n), tw)])
        shape = x.mag.shape[:-1] + w.mag.shape[1:]
        return Bound(out.mag.reshape(shape), out.err.reshape(shape))

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        x, w = args
        flat = x.reshape((math.prod(x.mid.shape[:-1]), x.mid.shape[-1]))  # d_in may be 0
        return ball.dot(flat, w).reshape(x.mid.shape[:-1] + w.mid.shape[1:])

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        x, w = args
        d_in, d_out = w.mid.shape
        count = math.prod(x.mid.shape[:-1])
        gx = ball.dot(g.reshape((count, d_out)), w.T).reshape(x.mid.shape)
        gw = ball.dot(x.reshape((count, d_in)).T, g.reshape((count, d_out)))
        return gx, gw
