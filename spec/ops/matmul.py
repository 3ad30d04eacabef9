"""``matmul``: the batched matrix product of attention's scores and mixing (torch's ``bmm``,
a 3-D or 4-D ``matmul`` once the batch dims are equal)."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from resverify.spec.ball import Ball, batched_dot
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.base import ArrayNamespace, Site, exact_sizes
from resverify.spec.ops.linear_map import Bilinear
from resverify.spec.rational import ZERO, Arr, mag, times
from resverify.spec.rounding import Bound, Ctx, dot, dots, swapped


def _swap(m: Any) -> Any:
    """Each matrix of a batch transposed."""
    return m.swapaxes(-1, -2)


def _swap_ball(x: Ball) -> Ball:
    return Ball(*(_swap(v) for v in (x.mid, x.rad, x.lo)))


class Matmul(Bilinear):
    """``matmul(a, b)``: ``a @ b`` matrix by matrix, a of shape (..., m, k), b of shape
    (..., k, n) with the same leading (batch) dims, no broadcasting. VJP per batch:
    ``ā = ḡ bᵀ``, ``b̄ = aᵀ ḡ``."""

    name = "matmul"
    budget_reads_args = False  # its budget rules read Bounds and its own output
    samples = (((2, 3), (3, 2)), ((2, 2, 3), (2, 3, 2)), ((1, 2, 1, 2), (1, 2, 2, 3)),
               ((0, 2, 3), (0, 3, 1)), ((2, 1, 0), (2, 0, 2)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        a, b = shapes
        if len(a) < 2 or len(a) != len(b) or a[:-2] != b[:-2] or a[-1] != b[-2]:
            raise ShapeMismatch(self.name, a, b)
        return (*a[:-1], b[-1])

    def value(self, xp: ArrayNamespace, args: Sequence[Any], k: Any) -> Any:
        return xp.matmul(args[0], args[1])

    def transpose(self, xp: ArrayNamespace, g: Any, args: Sequence[Any], k: Any
                  ) -> tuple[Any, ...]:
        """``ḡ bᵀ`` and ``aᵀ ḡ``, batch by batch."""
        a, b = args
        return xp.matmul(g, _swap(b)), xp.matmul(_swap(a), g)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        if not any(errs):
            return ZERO
        return args[0].shape[-1] * times(mag(args[0]), errs[0], mag(args[1]), errs[1])

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        mg, (a, b), (ea, eb) = mag(g), at.args, at.errs
        return (b.shape[-1] * times(mg, g_err, mag(b), eb),
                a.shape[-2] * times(mg, g_err, mag(a), ea))

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Dot products of length k, batch by batch: the propagated part plus ``gamma_k
        (|â| @ |b̂|)`` (any summation order, with or without FMA); with a declared wider
        accumulation, its gamma and one rounding on the exact result's size
        (:func:`~resverify.spec.rounding.accumulated_dot`)."""
        return dot(c, a[0], a[1], exact_sizes(at) if c.widened else None)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Both VJPs are dot products too: ``ḡ bᵀ`` (length n) and ``aᵀ ḡ`` (length m)."""
        x, w = a
        return [dot(c, g, swapped(w)), dot(c, swapped(x), g)]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``t_a b + a t_b``: 2k products summed in any order."""
        return dots(c, [(ts[0], a[1]), (a[0], ts[1])])

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return batched_dot(args[0], args[1])

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        a, b = args
        return batched_dot(g, _swap_ball(b)), batched_dot(_swap_ball(a), g)
