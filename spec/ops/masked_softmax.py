"""``masked_softmax``: a softmax over the entries a constant mask keeps, exactly 0 elsewhere.

Why an op of its own: a decoder adds an additive causal mask to its attention scores, 0 where
a position is attended and ``finfo(dtype).min`` where it is not, and takes the softmax. In
floating point ``s + finfo.min`` is ``finfo.min`` (or ``-inf`` once a float64 layer casts it
to float32 for its softmax), whose exp underflows to exactly 0: the float program is a
softmax over the kept entries, 0 on the masked ones, which is this op. Written as ``add``
then ``softmax`` the budget carries ``s + finfo.min`` at the dtype's largest magnitude, where
every bound after it is infinite. The trace maps that composite here only while the masked
exps are sure to underflow (:mod:`resverify.blocks.patterns`, checked again on the judged
inputs by :mod:`resverify.blocks.exact`); the literal real-number ``s + m`` differs from
this op's value by ``e^(m + s - max s)`` per masked entry, below ``e^-1100`` there, far
under float64's smallest subnormal.

The mask is data (a 0/1 tensor the trace lifts, broadcast to the scores' shape), never
differentiated, and its dtype is not the value's (a float64 layer's mask selects in its
float32 softmax). Each row keeps at least one entry where the trace emits it; a row that
keeps none is 0 here. The rules are the softmax's (:mod:`resverify.spec.ops.softmax`) on the
scores with every masked entry replaced by an exact value at least 4096 below the row's
largest (:func:`_far`): its exp underflows in every dtype, as the library's does, and the
softmax budget's own allowance, ``(n + 2)`` times the smallest normal over ``u``, covers
the ``e^-4096`` between the two exact values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec.ball import Ball, NotEnclosed
from resverify.spec.ceiling import up_abs_plus
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INT, Kind, Sample
from resverify.spec.ops.base import ArrayNamespace, Op, Pullback, Site, broadcast_shapes, cast
from resverify.spec.ops.softmax import Softmax, vjp_bound
from resverify.spec.rational import ZERO, Arr, exact_exp, fraction, mag, obj, objects
from resverify.spec.rounding import Bound, Ctx, up

FAR = 4096
"""How far below the row's largest score a masked entry is put for the softmax's rules: its
exp, ``e^-4096``, underflows in every dtype and in float64's enclosures."""

_SOFTMAX = Softmax()


def _axis(k: Any) -> int:
    return k.number("axis")


def _kept(mask: Any, shape: Shape) -> np.ndarray:
    """Where the mask is nonzero (the entry is kept), broadcast to the scores' shape."""
    flat = [bool(v != 0) for v in np.asarray(mask).reshape(-1).tolist()]
    return np.broadcast_to(np.array(flat, dtype=bool).reshape(np.shape(mask)), shape)


def _unsure(mask: Arr, err: Fraction) -> bool:
    """Whether some element of a mask carried with error ``err`` may be 0 or not."""
    return err > 0 and any(abs(v) <= err for v in np.asarray(mask).reshape(-1).tolist())


def _far(size: float) -> float:
    """A stand-in for masked scores whose size is at most ``size``: ``-(4096 + 2 size)``,
    at least 4096 below every score (infinite where ``size`` is)."""
    return -(FAR + 2 * up(Fraction(size))) if np.isfinite(size) else -np.inf


def _site(at: Site) -> tuple[Site, np.ndarray, float]:
    """The softmax's site: the scores with each masked entry replaced by :func:`_far` of
    them (exact); where the mask keeps, and that value."""
    x = at.args[0]
    kept = _kept(at.args[1], np.shape(x))
    far = _far(float(up_abs_plus(x, ZERO).max(initial=0.0)))  # up(max |x|)
    scores = obj(np.where(kept, np.asarray(x, dtype=object), obj(Fraction(far))))
    return Site(at.alpha, [scores], [at.errs[0]], at.out, at.err), kept, far


def _bound(x: Bound, kept: np.ndarray, far: float) -> Bound:
    """The scores' bound with each masked entry an exact value of size ``far``."""
    return Bound(np.where(kept, x.mag, abs(far)), np.where(kept, x.err, 0.0))


class MaskedSoftmax(Op):
    """``masked_softmax(x, mask, axis)``: ``exp(x) / Σ exp(x)`` along ``axis`` over the
    entries where ``mask != 0`` (broadcast to x), 0 where it is 0. VJP ``y ⊙ (ḡ - Σ ḡ ⊙
    y)``, which is 0 at a masked entry; the mask's gradient is 0 (it only selects)."""

    name, arity, rational, smooth = "masked_softmax", 2, False, False
    attributes: ClassVar[Mapping[str, Kind]] = {"axis": INT}
    samples = (Sample(((2, 3), (2, 3)), axis=1), Sample(((2, 3), (3,)), axis=1),
               Sample(((2, 1, 3), (1, 1, 3)), axis=2))
    exact_output_in_trace = True
    output_read_as_size = True  # read only by the softmax's budget, through _sizes

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        x, mask = shapes
        if _axis(k) >= len(x) or broadcast_shapes(self.name, x, mask) != tuple(x):
            raise ShapeMismatch(self.name, x, mask)
        return x

    def dtype(self, dtypes: Sequence[str], k: Any = None) -> str:
        """The scores' dtype: the mask only selects, whatever dtype holds it."""
        return dtypes[0]

    def draw(self, rng: np.random.Generator, shapes: Sequence[Shape]) -> list[np.ndarray]:
        """Scores ``k/4``; a 0/1 mask whose first entry along the last axis is kept."""
        x = rng.integers(-8, 9, size=shapes[0]) / 4.0
        mask = rng.integers(0, 2, size=shapes[1]).astype(np.float64)
        if mask.ndim:
            mask[..., 0] = 1.0
        return [x, mask]

    # the exact value, enclosed

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        x, axis = args[0], _axis(alpha)
        kept = _kept(args[1], np.shape(x))
        low = min((Fraction(v) for v in np.asarray(x).reshape(-1).tolist()), default=ZERO)
        kept_x = obj(np.where(kept, np.asarray(x, dtype=object), obj(low)))
        shifted = obj(kept_x - (kept_x.max(axis=axis, keepdims=True) if x.shape[axis] else 0))
        e = objects([exact_exp(fraction(v))[0] if keep else ZERO
                     for v, keep in zip(shifted.reshape(-1).tolist(),
                                        kept.reshape(-1).tolist(), strict=True)], x.shape)
        total = e.sum(axis=axis, keepdims=True)
        return obj(e / np.where(total == 0, 1, total))

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        grad = _SOFTMAX.exact_vjp(g, args[:1], out, alpha)[0]
        return grad, obj(np.full(np.shape(args[1]), ZERO, dtype=object))

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return _SOFTMAX.exact_jvp(ts[:1], args[:1], out, alpha)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr, alpha: Any
              ) -> Fraction:
        """The softmax's; where a mask element may be within its error of 0, 1 (every
        value is in [0, 1])."""
        if _unsure(args[1], errs[1]):
            return Fraction(1)
        return _SOFTMAX.error(args[:1], errs[:1], out, alpha)

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        extra = 2 * mag(g) if _unsure(at.args[1], at.errs[1]) else ZERO
        return (_SOFTMAX.error_vjp(at, g, g_err)[0] + extra, ZERO)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        extra = 2 * mag(ts[0]) if _unsure(at.args[1], at.errs[1]) else ZERO
        return _SOFTMAX.error_jvp(at, ts, t_errs) + extra

    # the budgets

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """The softmax's budget on the scores with each masked entry far below (exact);
        infinite where a mask element may be within its error of 0."""
        x = a[0]
        if _unsure(at.args[1], Fraction(float(np.max(a[1].err, initial=0.0))) + at.errs[1]):
            return Bound(np.ones_like(x.mag), np.full_like(x.mag, np.inf))
        site, kept, far = _site(at)
        return _SOFTMAX.budget(c, site, [_bound(x, kept, far)])

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        zero = np.zeros(np.shape(a[1].mag))
        return [vjp_bound(c, y, g, _axis(at.alpha)), Bound(zero, zero)]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        return vjp_bound(c, y, ts[0], _axis(at.alpha))

    # SymPy, the reference and the libraries

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        x, mask = args
        m = np.broadcast_to(np.asarray(mask, dtype=object), np.shape(x))
        e = np.empty(np.shape(x), dtype=object)
        for index in np.ndindex(*np.shape(x)):
            e[index] = sp.Piecewise((sp.exp(x[index]), sp.Ne(m[index], 0)), (0, True))
        return obj(e / e.sum(axis=_axis(alpha), keepdims=True))

    def numpy(self, args: Sequence[np.ndarray], alpha: Any) -> tuple[np.ndarray, Pullback]:
        """As libraries compute it: the masked scores at ``-inf``, ``e = exp(x - max x)``
        (0 there), ``e / Σ e``."""
        x, mask = args
        axis = _axis(alpha)
        kept = np.broadcast_to(mask != 0, x.shape)
        top = np.max(np.where(kept, x, -np.inf), axis=axis, keepdims=True, initial=-np.inf)
        with np.errstate(under="ignore", invalid="ignore", over="ignore"):
            e = np.where(kept, np.exp(np.where(kept, x - top, 0.0)), 0.0)
            total = np.sum(e, axis=axis, keepdims=True)
            y = cast(e / np.where(total == 0, 1.0, total), x)

        def pullback(g: np.ndarray) -> tuple[np.ndarray, ...]:
            return self.numpy_jvp([g], args, y, alpha), np.zeros_like(mask)
        return y, pullback

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Any) -> np.ndarray:
        return _SOFTMAX.numpy_jvp(ts[:1], args[:1], out, alpha)

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Any) -> Any:
        """The library's softmax of the scores with the masked ones at ``-inf`` (an array
        of the scores' dtype, as every adapter's ``where`` takes)."""
        masked = args[0] * 0 - np.inf
        return xp.softmax(xp.where(args[1] != 0, args[0], masked), _axis(alpha))

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """The softmax's ball on the scores with each masked entry far below (exact); the
        masked entries exactly 0."""
        x, mask = args
        kept = _kept(mask.mid + mask.lo, x.mid.shape)
        if np.any((mask.rad > 0) & (np.abs(mask.mid + mask.lo) <= mask.rad)):
            raise NotEnclosed("masked_softmax: a mask element may be 0 or not")
        far = _far(float(np.max(x.size, initial=0.0)))
        stand_in = Ball(np.where(kept, x.mid, far), np.where(kept, x.rad, 0.0),
                        np.where(kept, x.lo, 0.0))
        y = _SOFTMAX.enclose([stand_in], alpha)
        return Ball(np.where(kept, y.mid, 0.0), np.where(kept, y.rad, 0.0),
                    np.where(kept, y.lo, 0.0))

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        grad = _SOFTMAX.enclose_vjp(g, args[:1], out, alpha)[0]
        return grad, Ball.exact(np.zeros(args[1].mid.shape))
