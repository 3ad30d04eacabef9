"""``add``: elementwise addition with NumPy broadcasting."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar

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
    broadcast_copies,
    broadcast_shapes,
    cast,
    sum_back,
    symbolic_pairs,
    unbroadcast,
)
from resverify.spec.rational import (
    Arr,
    obj,
)
from resverify.spec.rounding import (
    Bound,
    Ctx,
)


class Add(Op):
    """``add(a, b)``: elementwise sum, NumPy broadcasting allowed. d(a+b) = da + db."""

    name, arity = "add", 2
    families: ClassVar[tuple[str, ...]] = ("bias",)  # F = x + b, b broadcast
    samples: ClassVar[tuple[tuple[Shape, ...], ...]] = (
        ((2, 3), (2, 3)), ((2, 1), (3,)), ((), (2,)), ((1,), (2, 2)), ((0, 2), (2,)))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return broadcast_shapes(self.name, shapes[0], shapes[1])

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(args[0] + args[1])

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return unbroadcast(g, args[0].shape), unbroadcast(g, args[1].shape)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0] + ts[1])

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0] + errs[1]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return tuple(g_err * broadcast_copies(g, a) for a in at.args)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        return t_errs[0] + t_errs[1]

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """``e_a + e_b + u (hat_a + hat_b)``."""
        return c.done(a[0].mag + a[1].mag, a[0].err + a[1].err + c.u * (a[0].hat + a[1].hat))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Un-broadcasting N cotangent copies: gamma_{N-1} times the sum of their sizes."""
        return [sum_back(c, g, arg.mag.shape) for arg in a]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The tangents are added as the values are."""
        return self.budget(c, at, ts)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return symbolic_pairs(sp.Add, self.shape([a.shape for a in args]), args)

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        a, b = args
        return cast(a + b, a), lambda g: (unbroadcast(g, a.shape), unbroadcast(g, b.shape))

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return cast(ts[0] + ts[1], args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return args[0] + args[1]

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return ball.add(args[0], args[1])

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        return ball.unbroadcast(g, args[0].mid.shape), ball.unbroadcast(g, args[1].mid.shape)
