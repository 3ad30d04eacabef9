"""``relu``: ``max(a, 0)`` with the declared derivative 0 at 0."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.ball import Ball, add_up, half_ulp
from resverify.spec.errors import Shape
from resverify.spec.ops.base import Op, Pullback, Site, cast, elementwise
from resverify.spec.rational import ZERO, ZERO_OBJ, Arr, mag, obj
from resverify.spec.rounding import INF, Bound, Ctx, inflate, up


def _signs(a: Ball) -> tuple[np.ndarray, np.ndarray]:
    """(surely > 0, surely <= 0) for the exact value in ``a``. A sum ``mid + lo`` that
    rounds to 0 is exactly 0 (gradual underflow), so a point ball at 0 is surely <= 0, as
    the exact interpreter has it: relu's derivative there is the declared 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        value = a.mid + a.lo
    reach = add_up(a.rad, np.where(value == 0, 0.0, half_ulp(value)))
    return value > reach, value <= -reach


class Relu(Op):
    """``relu(a)``: ``max(a, 0)``, +0 for every non-positive input; its derivative is 1
    where a > 0, else 0 (0 at 0: the declared convention)."""

    name, arity, smooth = "relu", 1, False
    families = ("relu",)  # F = g·relu(x)
    samples = (((3,),), ((),))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return shapes[0]

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        return obj(np.where(args[0] > 0, args[0], ZERO_OBJ))

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(np.where(args[0] > 0, g, ZERO_OBJ)),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(np.where(args[0] > 0, ts[0], ZERO_OBJ))

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        return errs[0]  # 1-Lipschitz

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """Where the input's sign is uncertain, the whole cotangent may be wrong."""
        return (g_err + (mag(g) if self._unsure(at) else ZERO),)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """As the VJP: where the input's sign is uncertain, the whole tangent may be wrong."""
        return t_errs[0] + (mag(ts[0]) if self._unsure(at) else ZERO)

    @staticmethod
    def _unsure(at: Site) -> bool:
        """Whether some carried input is within its error bound of 0 (its sign unknown)."""
        e = at.errs[0]
        return e > 0 and any(abs(v) <= e for v in at.args[0].reshape(-1).tolist())

    @staticmethod
    def _masks(at: Site, x: Bound) -> tuple[np.ndarray, np.ndarray]:
        """(positive, uncertain): where the exact input is > 0, and where its sign may flip."""
        exact, slack = at.args[0], at.errs[0]
        margin = inflate(x.err + up(slack), 0)
        flat = exact.reshape(-1).tolist()
        positive = np.array([v > 0 for v in flat], dtype=bool).reshape(exact.shape)
        uncertain = np.array([m == INF or abs(v) <= Fraction(m)
                              for v, m in zip(flat, margin.reshape(-1).tolist(), strict=True)],
                             dtype=bool).reshape(exact.shape)
        return positive, uncertain & (x.err + slack > 0)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Exact and 1-Lipschitz: the input's bound where it is (or may be) positive."""
        positive, uncertain = self._masks(at, a[0])
        keep = positive | uncertain
        return Bound(np.where(keep, a[0].mag, 0.0), np.where(keep, a[0].err, 0.0))

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """Where the input's sign is uncertain (``|x| <= e_x``) the gradient may be the
        whole cotangent or nothing, and is charged so."""
        positive, uncertain = self._masks(at, a[0])
        err = np.where(uncertain, g.hat, np.where(positive, g.err, 0.0))
        return [Bound(np.where(positive | uncertain, g.mag, 0.0), err)]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """As the VJP: where the input's sign is uncertain the tangent may be whole or 0."""
        return self.budget_vjp(c, at, a, y, ts[0])[0]

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        return elementwise(lambda v: sp.Max(v, 0), args[0])

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        (a,) = args
        zero = cast(0, a)
        positive = a > 0
        return np.where(positive, a, zero), lambda g: (np.where(positive, g, zero),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return np.where(args[0] > 0, ts[0], cast(0, args[0]))

    # the fast oracle's rules on balls

    slack_reads_lower = True

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """The ball itself where surely positive, exactly 0 where surely not, else the hull."""
        a = args[0]
        positive, negative = _signs(a)
        unsure = ~(positive | negative)
        return Ball(np.where(positive, a.mid, 0.0), np.where(positive, a.rad,
                    np.where(unsure, a.size, 0.0)), np.where(positive, a.lo, 0.0))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``g`` where the exact input is surely > 0, 0 where surely <= 0, and the hull of
        both (``0 ± |g|``) where the ball straddles 0."""
        positive, negative = _signs(args[0])
        unsure = ~(positive | negative)
        rad = np.where(positive, g.rad, np.where(unsure, g.size, 0.0))
        return (Ball(np.where(positive, g.mid, 0.0), rad, np.where(positive, g.lo, 0.0)),)
