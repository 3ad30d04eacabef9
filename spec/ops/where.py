"""``where``: ``a`` where the mask is nonzero, else ``b`` (a causal mask, a masked-row guard).

Why an op of its own: a traced layer selects between two values by a constant mask (the
causal ``where(mask, scores, finfo.min)`` of a decoder, a guard's ``where(empty_row, 0,
softmax)``). Selecting computes nothing, so the value's bound is the selected argument's,
with no rounding, and the gradient goes whole to the argument selected, none to the mask.
The mask is data of the program (a 0/1 tensor the trace lifts, :mod:`resverify.blocks.lower`);
where it carries an error and may be within it of 0, the selection itself is uncertain and
both arguments are charged, as relu charges an input whose sign may flip.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball, NotEnclosed
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
    unbroadcast,
)
from resverify.spec.rational import ZERO, ZERO_OBJ, Arr, mag, obj
from resverify.spec.rounding import Bound, Ctx, inflate


def _chosen(mask: Any, shape: Shape) -> np.ndarray:
    """Where the mask is nonzero (``a`` is selected), broadcast to the output's shape."""
    flat = [bool(v != 0) for v in np.asarray(mask).reshape(-1).tolist()]
    return np.broadcast_to(np.array(flat, dtype=bool).reshape(np.shape(mask)), shape)


def _unsure(mask: Arr, err: Fraction) -> bool:
    """Whether some element of a mask carried with error ``err`` may be 0 or not."""
    return err > 0 and any(abs(v) <= err for v in np.asarray(mask).reshape(-1).tolist())


def _picked(chosen: np.ndarray, a: Any, b: Any) -> np.ndarray:
    return np.where(chosen, np.broadcast_to(a, chosen.shape), np.broadcast_to(b, chosen.shape))


class Where(Op):
    """``where(mask, a, b)``: ``a`` where ``mask != 0``, else ``b``, the three broadcast
    together as ``add`` broadcasts two. ``d where = where(mask, da, db)``; the mask's
    gradient is 0 (it only selects)."""

    name, arity, smooth = "where", 3, False
    samples = (((2, 3), (2, 3), (2, 3)), ((2, 1), (3,), ()), ((3,), (), (2, 3)))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        return broadcast_shapes(self.name, broadcast_shapes(self.name, shapes[0], shapes[1]),
                                shapes[2])

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        out = self.shape([np.shape(a) for a in args])
        return obj(_picked(_chosen(args[0], out), args[1], args[2]))

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        chosen = _chosen(args[0], g.shape)
        return (obj(np.full(np.shape(args[0]), ZERO_OBJ)),
                obj(unbroadcast(obj(np.where(chosen, g, ZERO_OBJ)), np.shape(args[1]))),
                obj(unbroadcast(obj(np.where(chosen, ZERO_OBJ, g)), np.shape(args[2]))))

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return obj(_picked(_chosen(args[0], out.shape), ts[1], ts[2]))

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        """The larger argument's error; where a mask element may be within its error of 0,
        either size too."""
        if _unsure(args[0], errs[0]):
            return errs[1] + errs[2] + mag(args[1]) + mag(args[2])
        return max(errs[1], errs[2])

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        extra = mag(g) if _unsure(at.args[0], at.errs[0]) else ZERO
        return (ZERO, *((g_err + extra) * broadcast_copies(g, a) for a in at.args[1:]))

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        extra = mag(ts[1]) + mag(ts[2]) if _unsure(at.args[0], at.errs[0]) else ZERO
        return max(t_errs[1], t_errs[2]) + extra

    @staticmethod
    def _masks(at: Site, m: Bound, shape: Shape) -> tuple[np.ndarray, np.ndarray]:
        """(chosen, uncertain): where the exact mask selects ``a``, and where the computed
        mask may be within its error of 0 (the selection may differ)."""
        chosen = _chosen(at.args[0], shape)
        margin = inflate(m.err + float(at.errs[0]), 0)
        values = np.abs(np.array([float(v) for v in at.args[0].reshape(-1).tolist()])
                        ).reshape(np.shape(at.args[0]))
        inexact = np.asarray(m.err + float(at.errs[0])) > 0
        return chosen, np.broadcast_to(inexact & (values <= margin), shape)

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Exact: the selected argument's bound; both sizes where the mask is uncertain."""
        chosen, uncertain = self._masks(at, a[0], at.out.shape)
        either = _picked(chosen, a[1].hat, a[2].hat) + _picked(chosen, a[2].hat, a[1].hat)
        mags = np.where(uncertain, np.maximum(*np.broadcast_arrays(a[1].mag, a[2].mag)),
                        _picked(chosen, a[1].mag, a[2].mag))
        err = np.where(uncertain, either, _picked(chosen, a[1].err, a[2].err))
        return Bound(inflate(mags, 0), inflate(err, 0))  # a value selected cannot overflow

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """The cotangent routed to the selected argument (summed back over what
        broadcasting added, as for add); all of it or none where the mask is uncertain."""
        chosen, uncertain = self._masks(at, a[0], g.mag.shape)
        zero = np.zeros(a[0].mag.shape)
        out = [Bound(zero, zero)]
        for arg, side in ((a[1], chosen), (a[2], ~chosen)):
            routed = Bound(np.where(side | uncertain, g.mag, 0.0),
                           np.where(uncertain, g.hat, np.where(side, g.err, 0.0)))
            out.append(sum_back(c, routed, arg.mag.shape))
        return out

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The selected tangent's bound, as for the value."""
        return self.budget(c, at, [a[0], ts[1], ts[2]])

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        shape = self.shape([np.shape(a) for a in args])
        m, x, y = (np.broadcast_to(np.asarray(v, dtype=object), shape) for v in args)
        out = np.empty(shape, dtype=object)
        for index in np.ndindex(*shape):
            out[index] = sp.Piecewise((x[index], sp.Ne(m[index], 0)), (y[index], True))
        return out

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        mask, a, b = args
        chosen = np.broadcast_to(mask != 0, self.shape([mask.shape, a.shape, b.shape]))
        zero = cast(0, a)

        def pullback(g: np.ndarray) -> tuple[np.ndarray, ...]:
            return (np.zeros_like(mask), cast(unbroadcast(np.where(chosen, g, zero), a.shape), a),
                    cast(unbroadcast(np.where(chosen, zero, g), b.shape), b))
        return cast(_picked(chosen, a, b), a), pullback

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        return cast(_picked(np.broadcast_to(args[0] != 0, out.shape), ts[1], ts[2]), out)

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        """The library's ``where`` on the mask compared with 0 (no gradient reaches it)."""
        return xp.where(args[0] != 0, args[1], args[2])

    # the fast oracle's rules on balls

    @staticmethod
    def _selection(m: Ball, shape: Shape) -> np.ndarray:
        """Where the exact mask is surely nonzero; NotEnclosed where it may be either."""
        exactly_zero = (m.mid == 0) & (m.lo == 0) & (m.rad == 0)
        nonzero = np.abs(m.mid + m.lo) > m.rad
        if not np.all(exactly_zero | nonzero):
            raise NotEnclosed("where: a mask element may be 0 or not")
        return np.broadcast_to(nonzero, shape)

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        m, a, b = args
        chosen = self._selection(m, self.shape([m.mid.shape, a.mid.shape, b.mid.shape]))
        return Ball(_picked(chosen, a.mid, b.mid), _picked(chosen, a.rad, b.rad),
                    _picked(chosen, a.lo, b.lo))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        m, a, b = args
        chosen = self._selection(m, g.mid.shape)
        routed = [ball.unbroadcast(Ball(*(np.where(side, part, 0.0) for part in
                                          (g.mid, g.rad, g.lo))), arg.mid.shape)
                  for arg, side in ((a, chosen), (b, ~chosen))]
        return (Ball.exact(np.zeros(m.mid.shape)), *routed)
