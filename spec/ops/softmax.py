"""``softmax``: attention's normalisation over one axis, ``exp(x) / Σ exp(x)``, its exact
value enclosed with mpmath's exp, its budget derived for the way libraries compute it:
subtract the row's max (exact in value), exp, sum, divide (or multiply by the reciprocal)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import Ball, add_up, half_ulp
from resverify.spec.ceiling import row_distances, up_abs_plus, up_negated
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import INT, Kind, Sample
from resverify.spec.ops.base import ArrayNamespace, Op, Pullback, Site, cast, elementwise
from resverify.spec.ops.exp import LIBM_EXP_ULPS
from resverify.spec.rational import (
    TANH_PRECISION_BITS,
    Arr,
    exact_exp,
    fraction,
    mag,
    obj,
    objects,
    times,
)
from resverify.spec.rounding import Bound, Ctx, inflate, product, up

SOFTMAX_EXP_ULPS = 4
"""Error allowed for the exp inside a backend's softmax, in ulps of its result (its
argument ``x - max x`` is never positive); below the smallest normal, an absolute error up
to twice it (a library may flush to 0 there).

Measured against mpmath on 200,000 arguments a dtype drawn from [-104, 0] (float32) and
[-745, 0] (float64), the range softmax feeds exp: see docs/error-budget.md, "The softmax
allowance". 4 covers them with a margin; the budget built on it refuses a softmax that
skips the max subtraction where its exp overflows, and one whose VJP drops the Σ term."""


def _axis(k: Any) -> int:
    return k.number("axis")


def _sum(v: np.ndarray, axis: int) -> np.ndarray:
    return np.sum(v, axis=axis, keepdims=True)


def _max(v: np.ndarray, axis: int) -> np.ndarray:
    return np.max(v, axis=axis, keepdims=True, initial=0.0)


def _sizes(out: Arr, err: Fraction) -> np.ndarray:
    """Upper bounds of the true ``softmax(x)`` (at most 1) from the carried values."""
    return np.minimum(up_abs_plus(out, err), 1.0)


def shifted(x: Arr, axis: int) -> Arr:
    """``x - max x`` along the axis, exactly (never positive)."""
    return obj(x - (np.max(x, axis=axis, keepdims=True) if x.shape[axis] else x))


def distances(x: Arr, axis: int) -> np.ndarray:
    """Upper bounds of ``max x - x`` along the axis, from the exact arguments (float64)."""
    rounded = row_distances(np.asarray(x), axis)  # float64 arguments: their difference
    if rounded is not None:
        return rounded
    return up_negated(shifted(x, axis))


def shifts(c: Ctx, err: np.ndarray, dist: np.ndarray, axis: int) -> np.ndarray:
    """Upper bounds ``D_i`` of ``|Δ_i|``, where the computed ``d̂_i = fl(x̂_i - max x̂)`` is
    ``x̂_i - max x̂ + r_i`` and ``Δ_i = x̂_i - x_i + r_i``: ``D_i = e_i + u (dist_i + e_i +
    M)``. The computed max ``m̂`` cancels in ``softmax(d̂)`` (every term is shifted by it),
    so its error enters only the rounding ``r_i`` of the subtraction, ``|r_i| <= u |x̂_i -
    m̂|``, ``|x̂_i - m̂| <= dist_i + e_i + M``. ``M`` bounds ``|m̂ - m|``: ``m̂ >= x̂_t >=
    m - e_t`` at an exact argmax t, and ``m̂ = x̂_k <= m + e_k`` for a k that can reach it,
    ``dist_k <= e_k + e_t``, so ``M`` is the largest ``e_k`` of those candidates. An element
    far below the max (a causal mask's ``finfo.min``, whose own error is huge) is not one,
    so its error does not spread to the row."""
    with np.errstate(over="ignore", invalid="ignore"):
        top = _max(np.where(dist == 0, err, 0.0), axis)  # e at the exact argmax(es)
        low = np.where(np.isinf(dist), np.finfo(np.float64).max, dist * (1 - 2.0**-49))
        can = low <= (err + top) * (1 + 2.0**-49)
        reach = _max(np.where(can, err, 0.0), axis)
        return (err + c.u * (dist + err + reach) * (1 + 2.0**-50)) * (1 + 2.0**-50)


def vanishing(c: Ctx, err: np.ndarray, dist: np.ndarray, axis: int) -> np.ndarray:
    """Upper bounds of ``e^{d_i + D_i}`` (``D_i`` as in :func:`shifts`), which bound
    both the exact ``y_i`` (``Σ_j e^{d_j} >= 1``: the max's term is 1) and ``y_i e^{D_i}``:
    far below the max (a causal mask's ``finfo.min``) they are 0 where ``e^{D_i}`` is not
    finite. ``dist`` is read as at least ``dist (1 - 2⁻⁴⁹)``, an infinite one (the distance
    overflowed the analysis) as at least float64's largest value."""
    with np.errstate(over="ignore", invalid="ignore"):
        low = np.where(np.isinf(dist), np.finfo(np.float64).max, dist * (1 - 2.0**-49))
        top = _max(np.where(dist == 0, err, 0.0), axis)
        can = low <= (err + top) * (1 + 2.0**-49)
        own = err + c.u * _max(np.where(can, err, 0.0), axis)
        gap = low * (1 - 2 * c.u) * (1 - 2.0**-50) - own * (1 + c.u) * (1 + 2.0**-50)
        return np.exp(-gap) * (1 + 2.0**-50)


def shift_relative(c: Ctx, err: np.ndarray, dist: np.ndarray, weight: np.ndarray, axis: int
                   ) -> np.ndarray:
    """Relative error of softmax on the computed shifted arguments ``d̂`` (``err`` the
    arguments' errors, ``dist`` bounds of ``max x - x``, ``weight`` bounds of y):
    ``softmax(d̂)_i / softmax(d)_i = e^{Δ_i} / Σ_j y_j e^{Δ_j}``, ``|Δ_j| <= D_j``
    (:func:`shifts`). The sum is at least ``Σ y_j e^{-D_j} = 1 - W⁻``, ``W⁻ = Σ_j y_j (1 -
    e^{-D_j})``, and at most ``1 + W``, ``W = Σ_j y_j (e^{D_j} - 1)``, so the ratio is
    within ``[e^{-D_i} / (1 + W), e^{D_i} / (1 - W⁻)]``: the relative error is the larger of
    ``(e^{D_i} - 1 + W⁻) / (1 - W⁻)`` and ``(W + 1 - e^{-D_i}) / (1 + W)``. Each term of W
    (and of W⁻, which is also at most ``y_j``) is at most :func:`vanishing`'s."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # below = 1: inf
        shift = shifts(c, err, dist, axis)
        far = vanishing(c, err, dist, axis)
        spread = _sum(np.fmin(weight * np.expm1(shift), far), axis)
        below = _sum(np.fmin(np.fmin(weight, far) * -np.expm1(-shift), far), axis)
        upper = (np.expm1(shift) + below) / (1 - below)  # e^D / (1 - W⁻) - 1, no cancelling
        lower = np.fmin((spread - np.expm1(-shift)) / (1 + spread), 1.0)  # 1 - e^-D/(1 + W)
        return np.where(below < 1, np.fmax(upper, lower), np.inf)


def absolute(c: Ctx, err: np.ndarray, dist: np.ndarray, size: np.ndarray, axis: int,
             ulps: int) -> np.ndarray:
    """``|ŷ_i - y_i| <= ŷ_i + y_i``: the computed ``ŷ_i`` is at most ``e^{d̂_i}`` with its
    roundings (:func:`rounding_relative`; the computed sum is at least the max's term, 1
    but for its roundings), and ``e^{d̂_i} <= 1`` (``d̂_i = fl(x̂_i - max x̂)`` is never
    positive) however large the arguments' errors; ``y_i`` at most ``size`` and at most
    :func:`vanishing`'s ``e^{d_i + D_i}`` (which also bounds ``e^{d_i}``). The bound where
    the relative one is lost: an element many orders of magnitude below the row's max
    (where the enclosure's ``size`` is 1, its first guess, the second keeps its radius near
    0), or scores whose errors pass 709, where ``e^{D_i}`` overflows float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        grown = 1 + rounding_relative(c, ulps, size.shape[axis] if size.ndim else 1)
        far = vanishing(c, err, dist, axis)
        return np.fmin(far, 1.0) * grown * (1 + 2.0**-50) + np.fmin(size, far)


def rounding_relative(c: Ctx, ulps: int, n: int) -> float:
    """The relative error of exp (``ulps`` ulps, ``ulp(v) <= 2u|v|``), of a sum of n in any
    order (``gamma_{n-1}``) and of the division, or of a reciprocal and a product
    (``(1 + u)²``): ``(1 + η)(1 + u)² / ((1 - η)(1 - gamma_{n-1})) - 1``, ``η = 2·ulps·u``."""
    u, eta, gam = Fraction(c.u), 2 * ulps * Fraction(c.u), Fraction(c.gamma(n - 1))
    if gam >= 1:
        return np.inf
    return up((1 + eta) * (1 + u) ** 2 / ((1 - eta) * (1 - gam)) - 1)


def compound(a: np.ndarray, b: float) -> np.ndarray:
    """``(1 + a)(1 + b) - 1`` without cancelling."""
    return a + b + a * b


def vjp_bound(c: Ctx, y: Bound, g: Bound, axis: int) -> Bound:
    """``y ⊙ (ḡ - s)`` or ``y ⊙ ḡ - y s``, ``s = Σ ḡ ⊙ y`` over the axis, either order: the
    larger of the two analyses (the mul rule for each product, the sum rule for ``s``)."""
    n = y.mag.shape[axis]
    p_mag, p_err = product(c, g, y)
    s = Bound(_sum(p_mag, axis), _sum(p_err, axis) + c.gamma(n - 1) * _sum(p_mag + p_err, axis))
    diff = Bound(g.mag + s.mag, g.err + s.err + c.u * (g.hat + s.hat))
    a_mag, a_err = product(c, diff, y)
    q_mag, q_err = product(c, y, s)
    b_err = p_err + q_err + c.u * (p_mag + p_err + q_mag + q_err)
    return c.done(a_mag, np.maximum(a_err, b_err), n)


def _ball_radius(shift: tuple[np.ndarray, np.ndarray], mid: np.ndarray, weight: np.ndarray,
                 axis: int) -> np.ndarray:
    """The radius around NumPy's float64 softmax ``mid`` (:meth:`Softmax.enclose`), from
    the arguments' radii and distances to the row's max, ``weight`` bounding the true y."""
    c, n = Ctx("float64", 2.0**-53, 2.0**-1074), mid.shape[axis]
    rel_in = shift_relative(c, shift[0], shift[1], weight, axis)
    rel = inflate(compound(rel_in, rounding_relative(c, LIBM_EXP_ULPS, n)), n)
    far = absolute(c, shift[0], shift[1], weight, axis, LIBM_EXP_ULPS)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        rad = np.fmin(np.where(rel < 1, inflate(mid * rel / (1 - rel), 4), np.inf),
                      inflate(far, 4))
    return add_up(rad, np.full_like(mid, (n + 2) * 2.0**-1021))


class Softmax(Op):
    """``softmax(x, axis)``: ``exp(x) / Σ exp(x)`` along ``axis``. Not rational: each exp is
    enclosed with mpmath (:func:`resverify.spec.rational.exact_exp`) at ``x - max x``.
    Its Jacobian ``diag(y) - y yᵀ`` is symmetric: VJP ``y ⊙ (ḡ - Σ ḡ ⊙ y)``, JVP the
    same with the tangent."""

    name, arity, rational = "softmax", 1, False
    output_read_as_size = True  # its budget reads the output only through _sizes
    attributes: ClassVar[Mapping[str, Kind]] = {"axis": INT}
    samples = (Sample(((3,),), axis=0), Sample(((2, 3),), axis=1), Sample(((2, 3),), axis=0),
               Sample(((2, 1, 2),), axis=2), Sample(((0, 2),), axis=1),
               Sample(((2, 0),), axis=1))

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        if _axis(k) >= len(shapes[0]):
            raise ShapeMismatch(self.name, shapes[0], (_axis(k),))
        return shapes[0]

    # the exact value, enclosed

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        x, axis = args[0], _axis(alpha)
        e = objects([exact_exp(fraction(v))[0] for v in shifted(x, axis).reshape(-1).tolist()],
                    x.shape)
        return obj(e / e.sum(axis=axis, keepdims=True))

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        return (obj(out * (g - (g * out).sum(axis=_axis(alpha), keepdims=True))),)

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        return self.exact_vjp(ts[0], args, out, alpha)[0]

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr, alpha: Any
              ) -> Fraction:
        """½-Lipschitz in the max norm (each row of ``diag(y) - y yᵀ`` sums to ``2y(1 -
        y) <= ½`` in absolute value), plus the enclosure's width: each exp and the sum within
        ``2**-P`` of themselves relatively, the quotient within ``3·2**-P``, and each exp
        carried as 0 below ``exp(-1100)`` (n + 1 such terms, ``2**-1100`` each)."""
        n = args[0].shape[_axis(alpha)] if args[0].ndim else 1
        return errs[0] / 2 + Fraction(3, 2**TANH_PRECISION_BITS) + Fraction(n + 1, 2**1100)

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """``y (ḡ - s)`` with ``|y| <= 1``, ``Σ y = 1``: ``s`` is off by ``n`` times the mul
        bound, ``ḡ - s`` by that plus ``e_ḡ``, the product by the mul bound again."""
        n = at.args[0].shape[_axis(at.alpha)] if at.args[0].ndim else 1
        mg = mag(g)
        s_err = n * times(mg, g_err, Fraction(1), at.err)
        return (times(Fraction(1), at.err, 2 * mg, g_err + s_err),)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        return self.error_vjp(at, ts[0], t_errs[0])[0]

    # the budgets

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """Relative to the value ``y``: the shifted arguments' error
        (:func:`shift_relative`) and the roundings (:func:`rounding_relative`) compound; a
        flushed exp adds twice the smallest normal (``tiny/u``), n + 2 times over. Under a
        declared wider accumulation (:attr:`Ctx.opmath`: torch's CPU softmax computes a
        bfloat16 row in float32) those roundings are the wider dtype's, and the one
        rounding to the dtype adds ``u`` of the computed value (at most ``y`` and its
        error, and at most :func:`vanishing`'s ``e^{d + D}`` with its roundings) and one
        smallest subnormal: never above the dtype's rule (whose exp alone is charged
        ``8u``) but by that subnormal, where both are the flushed exps' allowance
        (docs/error-budget.md)."""
        x, axis = a[0], _axis(at.alpha)
        n = x.mag.shape[axis]
        size = _sizes(at.out, at.err)
        dist = distances(at.args[0], axis)
        s = c.opmath
        rel_in = shift_relative(s, x.err, dist, size, axis)
        rel = compound(rel_in, rounding_relative(s, SOFTMAX_EXP_ULPS, n))
        far = absolute(s, x.err, dist, size, axis, SOFTMAX_EXP_ULPS)
        with np.errstate(invalid="ignore", over="ignore"):
            err = np.fmin(size * rel, far) + (n + 2) * s.tiny / s.u
            if s is not c:  # the kernel's one rounding, of the value it computed
                top = np.fmin(size + err, vanishing(s, x.err, dist, axis)
                              * (1 + rounding_relative(s, SOFTMAX_EXP_ULPS, n)))
                err = err + c.u * top + c.tiny
        return c.done(size, np.where(np.isnan(err), np.inf, err), n)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        return [vjp_bound(c, y, g, _axis(at.alpha))]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """``y ⊙ (t - Σ t ⊙ y)``: the VJP's arithmetic with the tangent."""
        return vjp_bound(c, y, ts[0], _axis(at.alpha))

    # SymPy, the reference and the libraries

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        e = elementwise(sp.exp, args[0])
        return obj(e / e.sum(axis=_axis(alpha), keepdims=True))

    def numpy(self, args: Sequence[np.ndarray], alpha: Any) -> tuple[np.ndarray, Pullback]:
        """As libraries compute it: ``e = exp(x - max x)``, ``e / Σ e``."""
        x, axis = args[0], _axis(alpha)
        with np.errstate(under="ignore"):
            e = np.exp(x - np.max(x, axis=axis, keepdims=True, initial=-np.inf))
        y = cast(e / _sum(e, axis), x)
        return y, lambda g: (self.numpy_jvp([g], args, y, alpha),)

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Any) -> np.ndarray:
        t = ts[0]
        return cast(out * (t - _sum(t * out, _axis(alpha))), args[0])

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Any) -> Any:
        return xp.softmax(args[0], _axis(alpha))

    # the fast oracle's rules on balls

    exact_output_in_trace = True

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        """The budget's analysis in float64 on ``mid + lo`` (rounded: half an ulp more of
        radius), NumPy's exp :data:`~resverify.spec.ops.exp.LIBM_EXP_ULPS` ulps off; a
        relative bound ``ρ`` of ``|ŷ - y| <= ρ y`` gives the radius ``ŷ ρ / (1 - ρ)``. The
        spread ``W`` is first weighed with ``y <= 1``, then with the ball that gives."""
        x, axis = args[0], _axis(alpha)
        value = x.mid + x.lo
        with np.errstate(under="ignore", invalid="ignore"):
            top = np.max(value, axis=axis, keepdims=True, initial=-np.inf)
            e = np.exp(value - top)
            mid = e / _sum(e, axis)
        with np.errstate(over="ignore"):  # finfo.min - max overflows: a distance past float64
            diff = np.abs(value - top)
        finite = np.isfinite(diff)
        dist = np.where(finite, add_up(diff, half_ulp(np.where(finite, diff, 0.0))), np.inf)
        shift = (add_up(x.rad, half_ulp(value)), dist)
        rad = _ball_radius(shift, mid, np.ones_like(value), axis)
        rad = _ball_radius(shift, mid, np.minimum(add_up(mid, rad), 1), axis)
        return Ball.of(mid, rad)

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        """``y ⊙ (ḡ - Σ ḡ ⊙ y)`` in ball arithmetic, ``y`` the output's ball."""
        axis = _axis(alpha)
        s = ball.reduce_sum(ball.mul(g, out), (axis,))
        s = Ball(*(-np.expand_dims(v, axis) if f != "rad" else np.expand_dims(v, axis)
                   for f, v in (("mid", s.mid), ("rad", s.rad), ("lo", s.lo))))
        return (ball.mul(out, ball.add(g, s)),)
