"""``sum``: the sum of every element, shape ()."""

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
)
from resverify.spec.rational import (
    Arr,
    obj,
)
from resverify.spec.rounding import (
    Bound,
    Ctx,
)


class Sum(Op):
    """``sum(a)``: the sum of every element, shape (); the cotangent is copied to every
    element."""

    name, arity = "sum", 1
    samples = (((2, 3),), ((),), ((0, 2),))

    def shape(self, shapes: Sequence[Shape]) -> Shape:
        return ()

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(args[0].sum())

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(np.broadcast_to(g, args[0].shape)).copy(),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(ts[0].sum())

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return args[0].size * errs[0]

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        return (g_err,)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        return ts[0].size * t_errs[0]

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """A sum of N elements: ``gamma_{N-1}`` times the sum of magnitudes."""
        x = a[0]
        n = x.mag.size
        err = x.err.sum() + c.gamma(n - 1) * x.hat.sum()
        return c.done(np.asarray(x.mag.sum()), np.asarray(err), n)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Copies: no rounding."""
        shape = a[0].mag.shape
        return [Bound(np.broadcast_to(g.mag, shape).copy(), np.broadcast_to(g.err, shape).copy())]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The tangent is summed as the value is."""
        return self.budget(c, at, ts)

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        out = np.empty((), dtype=object)
        out[()] = sp.Add(*args[0].flat)
        return out

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        (a,) = args
        return cast(a.sum(), a), lambda g: (np.broadcast_to(cast(g, a), a.shape).copy(),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return cast(ts[0].sum(), args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        return xp.sum(args[0])

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        return ball.reduce_sum(args[0], tuple(range(args[0].mid.ndim)))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        shape = args[0].mid.shape
        return (Ball(*(np.broadcast_to(v, shape).copy() for v in (g.mid, g.rad, g.lo))),)
