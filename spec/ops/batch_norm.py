"""``batch_norm``: eval-mode batch normalisation with its running statistics, per channel.

Why one op with the four per-channel rows stacked in one argument ``p = [γ; β; μ; σ²]``:
torch on CPU computes ``x α + (β - μ α)`` with ``α = γ / sqrt(σ² + ε)``, so for ``x`` near
``μ`` its rounding error is of the size of ``|x| α`` and ``|μ| α``, not of ``(x - μ) α``; a
chain of IR ops (centre, scale, shift) would charge the latter and fail the library's
right answer. One op states one budget that covers either order, and its gradients reach
``γ``, ``β`` and the running statistics alike (the trace stacks them with ``cat``).
``1/sqrt(σ² + ε)`` is irrational: it is enclosed as the norms' is
(:func:`resverify.spec.rational.exact_rsqrt`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from resverify.spec import ball
from resverify.spec.ball import INF as BALL_INF
from resverify.spec.ball import Ball, NotEnclosed
from resverify.spec.errors import Shape, ShapeMismatch
from resverify.spec.ops.attributes import EXACT, Kind
from resverify.spec.ops.base import ArrayNamespace, Op, Pullback, Site, cast
from resverify.spec.ops.layer_norm import SQRT_ULPS
from resverify.spec.rational import TANH_PRECISION_BITS, ZERO, Arr, exact_rsqrt, mag, obj
from resverify.spec.rounding import INF, Bound, Ctx, up

GAMMA, BETA, MEAN, VAR = range(4)
"""The rows of ``p``."""


def _channel(v: Any, rank: int) -> Any:
    """A per-channel row (C,) shaped to broadcast over axis 1 of a rank-``rank`` array."""
    return v.reshape((1, v.shape[0], *(1,) * (rank - 2)))


def _other_axes(rank: int) -> tuple[int, ...]:
    return (0, *range(2, rank))


def _rows(p: Any, rank: int) -> list[Any]:
    return [_channel(p[i], rank) for i in range(4)]


def _rsqrt(var: Arr, eps: Any) -> Arr:
    """``1/sqrt(σ² + ε)`` per channel: the enclosure's midpoint, or SymPy's for symbols."""
    if all(isinstance(v, (Fraction, int)) for v in var.tolist()):
        return obj([exact_rsqrt(Fraction(v) + eps)[0] for v in var.tolist()])
    import sympy  # the SymPy check of the VJP (spec.derive) passes symbols

    return obj([1 / sympy.sqrt(v + eps) for v in var.tolist()])


@dataclass(frozen=True)
class _Sizes:
    """Bounds of the spec's carried values for the error rules (Fractions): ``x`` (X), the
    centred value (C), γ (G), ``r <= 1/sqrt(ε)`` (R), the errors of x (ex) and of p (ep),
    and ``dr``, the carried r's distance from the true one (σ²'s error through
    ``|dr/dσ²| = r³/2``, and the enclosure's ``r 2**-199``)."""

    C: Fraction
    G: Fraction
    R: Fraction
    ex: Fraction
    ep: Fraction
    dr: Fraction

    @staticmethod
    def of(args: Sequence[Arr], errs: Sequence[Fraction], eps: Fraction) -> _Sizes:
        x, p = args
        ex, ep = errs
        r_eps, half = exact_rsqrt(eps)
        big_r = r_eps + half
        dr = ep * big_r**3 / 2 + big_r / 2 ** (TANH_PRECISION_BITS - 1)
        mean = mag(p[MEAN]) if p.size else ZERO
        return _Sizes(mag(x) + ex + mean + ep, (mag(p[GAMMA]) if p.size else ZERO) + ep,
                      big_r, ex, ep, dr)


def _spans(x: Any) -> int:
    """How many elements each channel sums over (N times the spatial sizes)."""
    return math.prod(x.shape) // max(1, x.shape[1])


class BatchNorm(Op):
    """``batch_norm(x, p, eps)``: ``(x - μ) γ / sqrt(σ² + ε) + β`` per channel (axis 1 of
    x, rank >= 2), ``p`` of shape (4, C) the rows ``γ, β, μ, σ²`` (the weight, the bias and
    the running statistics), ε > 0 exact. With ``r = 1/sqrt(σ² + ε)``, ``c = x - μ``, sums
    over every axis but 1: ``x̄ = ḡ γ r``, ``γ̄ = Σ ḡ c r``, ``β̄ = Σ ḡ``, ``μ̄ = -Σ ḡ γ r``,
    ``σ̄² = -½ Σ ḡ c γ r³``."""

    name, arity, rational = "batch_norm", 2, False
    attributes: ClassVar[Mapping[str, Kind]] = {"eps": EXACT}
    samples = (((2, 2), (4, 2)), ((1, 2, 2, 1), (4, 2)), ((0, 3, 1), (4, 3)))

    def refuses(self, value: Fraction) -> str | None:
        return None if value > 0 else f"must be > 0, got {value}"

    def draw(self, rng: np.random.Generator, shapes: Sequence[Shape]) -> list[np.ndarray]:
        """The variance row drawn non-negative (``σ² + ε`` must be positive)."""
        x, p = super().draw(rng, shapes)
        p[VAR] = np.abs(p[VAR])
        return [x, p]

    def shape(self, shapes: Sequence[Shape], k: Any = None) -> Shape:
        x, p = shapes
        if len(x) < 2 or p != (4, x[1]):
            raise ShapeMismatch(self.name, x, p)
        return x

    # the exact rules

    def exact(self, args: Sequence[Arr], alpha: Any) -> Arr:
        x, p = args
        g, b, m, _ = _rows(p, x.ndim)
        r = _channel(_rsqrt(p[VAR], alpha), x.ndim)
        return obj((x - m) * g * r + b)

    def exact_vjp(self, g: Arr, args: Sequence[Arr], out: Arr, alpha: Any) -> tuple[Arr, ...]:
        x, p = args
        gamma, _, m, _ = _rows(p, x.ndim)
        r = _channel(_rsqrt(p[VAR], alpha), x.ndim)
        c, axes = obj(x - m), _other_axes(x.ndim)
        gx = obj(g * gamma * r)
        rows = [(g * c * r).sum(axis=axes), g.sum(axis=axes), -gx.sum(axis=axes),
                (g * c * gamma * r * r * r).sum(axis=axes) * Fraction(-1, 2)]
        return gx, obj(np.stack([obj(row).reshape(p.shape[1]) for row in rows]))

    def exact_jvp(self, ts: Sequence[Arr], args: Sequence[Arr], out: Arr, alpha: Any) -> Arr:
        (x, p), (tx, tp) = args, ts
        gamma, _, m, _ = _rows(p, x.ndim)
        tg, tb, tm, tv = _rows(tp, x.ndim)
        r = _channel(_rsqrt(p[VAR], alpha), x.ndim)
        c = x - m
        return obj((tx - tm) * gamma * r + c * tg * r + tb
                   + c * gamma * r * r * r * tv * Fraction(-1, 2))

    # the exact interpreter's error bounds (the enclosure of r, and tanh upstream)

    def error(self, args: Sequence[Arr], errs: Sequence[Fraction], out: Arr,
              alpha: Fraction | None) -> Fraction:
        """``|Δc| G R + C |Δγ| R + C G |Δr| + |Δβ|``."""
        if not args[0].size:
            return ZERO
        assert alpha is not None
        s = _Sizes.of(args, errs, alpha)
        return (s.ex + s.ep) * s.G * s.R + s.C * s.ep * s.R + s.C * s.G * s.dr + s.ep

    def error_vjp(self, at: Site, g: Arr, g_err: Fraction) -> tuple[Fraction, ...]:
        """Each product's error as for the forward; the rows' sums over the channel's
        elements multiply by their count."""
        x = at.args[0]
        if not x.size:
            return ZERO, ZERO
        s = _Sizes.of(at.args, at.errs, at.alpha)
        big_g, n = mag(g) + g_err, _spans(x)
        gx = g_err * s.G * s.R + big_g * (s.ep * s.R + s.G * s.dr)
        gamma = g_err * s.C * s.R + big_g * ((s.ex + s.ep) * s.R + s.C * s.dr)
        r3, dr3 = s.R**3, 3 * s.R**2 * s.dr
        var = (g_err * s.C * s.G * r3 + big_g * ((s.ex + s.ep) * s.G * r3 + s.C * s.ep * r3
                                                 + s.C * s.G * dr3)) / 2
        return gx, n * max(gx, gamma, g_err, var)

    def error_jvp(self, at: Site, ts: Sequence[Arr], t_errs: Sequence[Fraction]) -> Fraction:
        """``(ṫx - ṫμ) γ r + c ṫγ r + ṫβ - ½ c γ r³ ṫσ²``, each product's error."""
        if not at.args[0].size:
            return ZERO
        s = _Sizes.of(at.args, at.errs, at.alpha)
        (tx, tp), (ex, ep) = ts, t_errs
        big_t = mag(tx) + ex + (mag(tp) if tp.size else ZERO) + ep
        centred = (ex + ep) * s.G * s.R + big_t * (s.ep * s.R + s.G * s.dr)
        scaled = ep * s.C * s.R + big_t * ((s.ex + s.ep) * s.R + s.C * s.dr)
        r3, dr3 = s.R**3, 3 * s.R**2 * s.dr
        var = (ep * s.C * s.G * r3 + big_t * ((s.ex + s.ep) * s.G * r3 + s.C * s.ep * r3
                                              + s.C * s.G * dr3)) / 2
        return centred + scaled + ep + var

    # the floating-point budget

    def budget(self, c: Ctx, at: Site, a: Sequence[Bound]) -> Bound:
        """``x α + (β - μ α)`` with ``α = γ r`` (torch) or ``(x - μ) r γ + β`` (or with a
        division by the square root): every order is at most three products and two
        additions on terms ``x γ r``, ``μ γ r`` and ``β``, so ``gamma(6)`` of their hats,
        plus the propagated errors of x, p and r (:func:`_root`)."""
        x, p = a
        if not x.mag.size:
            return Bound(np.zeros_like(x.mag), np.zeros_like(x.mag))
        q = _Terms.of(c, at, x, p)
        terms = (x.hat + q.mean_hat) * q.gamma_hat * q.big_r + q.beta_hat
        err = (q.e_c * q.gamma_hat * q.big_r + q.centred * (q.e_gamma * q.big_r
                                                              + q.gamma * q.r_err)
               + q.e_beta + c.gamma(6) * terms + 4 * c.tiny)
        mag_ = q.centred * q.gamma * q.r_up + q.beta
        return c.done(mag_, np.where(q.bad, INF, err), 6)

    def budget_vjp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, g: Bound
                   ) -> list[Bound]:
        """``x̄ = ḡ γ r`` (two products); the rows of ``p̄`` are sums over the channel's
        elements of terms each made of a few roundings (``k``: 3 for ``ḡ c r``, 3 for
        ``ḡ γ r``, 12 for ``ḡ c γ r³``, whose algorithms vary most), charged
        ``(1 + gamma(k))(1 + s) - 1`` of their hats with ``s`` the sum's rounding
        (:meth:`Ctx.summed`: torch sums in float32 for bfloat16)."""
        x, p = a
        if not x.mag.size:
            return [Bound(np.zeros_like(x.mag), np.zeros_like(x.mag)),
                    Bound(np.zeros_like(p.mag), np.zeros_like(p.mag))]
        q = _Terms.of(c, at, x, p)
        gx_prop = g.err * q.gamma_hat * q.big_r + g.mag * (q.e_gamma * q.big_r
                                                            + q.gamma * q.r_err)
        gx_err = gx_prop + c.gamma(3) * g.hat * q.gamma_hat * q.big_r + 2 * c.tiny
        gx = c.done(g.mag * q.gamma * q.r_up, np.where(q.bad, INF, gx_err), 3)
        r3, dr3 = q.big_r**3, 3 * q.big_r**2 * q.r_err
        c_hat = q.centred + q.e_c
        rows = [  # (magnitude, propagated error, hat of the terms, roundings per term)
            (g.mag * q.centred * q.r_up,
             g.err * c_hat * q.big_r + g.mag * (q.e_c * q.big_r + q.centred * q.r_err),
             g.hat * c_hat * q.big_r, 3),
            (g.mag, g.err, g.hat, 0),
            (g.mag * q.gamma * q.r_up, gx_prop, g.hat * q.gamma_hat * q.big_r, 3),
            (g.mag * q.centred * q.gamma * q.r_up**3 / 2,
             (g.err * c_hat * q.gamma_hat * r3 + g.mag * (q.e_c * q.gamma_hat * r3
              + q.centred * q.e_gamma * r3 + q.centred * q.gamma * dr3)) / 2,
             g.hat * c_hat * q.gamma_hat * r3 / 2, 12),
        ]
        summed = [_summed(c, *row, x.mag.ndim) for row in rows]
        mag_ = np.stack([s.mag for s in summed])
        err = np.stack([s.err for s in summed])
        return [gx, Bound(mag_, np.where(q.bad_row, INF, err))]

    def budget_jvp(self, c: Ctx, at: Site, a: Sequence[Bound], y: Bound, ts: Sequence[Bound]
                   ) -> Bound:
        """The four terms of the tangent, each a few products (``gamma(12)`` of the hats,
        whatever the order), plus the propagated errors."""
        x, p = a
        tx, tp = ts
        if not x.mag.size:
            return Bound(np.zeros_like(x.mag), np.zeros_like(x.mag))
        q = _Terms.of(c, at, x, p)
        tg, tb, tm, tv = (_channel(v, x.mag.ndim) for v in tp.mag)
        eg, eb, em, ev = (_channel(v, x.mag.ndim) for v in tp.err)
        r3, dr3 = q.big_r**3, 3 * q.big_r**2 * q.r_err
        c_hat = q.centred + q.e_c
        d_hat = tx.hat + tm + em
        terms = (d_hat * q.gamma_hat * q.big_r + c_hat * (tg + eg) * q.big_r + tb + eb
                 + c_hat * q.gamma_hat * r3 * (tv + ev) / 2)
        err = ((tx.err + em) * q.gamma_hat * q.big_r
               + (tx.mag + tm) * (q.e_gamma * q.big_r + q.gamma * q.r_err)
               + eg * c_hat * q.big_r + tg * (q.e_c * q.big_r + q.centred * q.r_err) + eb
               + (ev * c_hat * q.gamma_hat * r3 + tv * (q.e_c * q.gamma_hat * r3
                  + q.centred * q.e_gamma * r3 + q.centred * q.gamma * dr3)) / 2
               + c.gamma(12) * terms + 8 * c.tiny)
        mag_ = ((tx.mag + tm) * q.gamma * q.r_up + q.centred * tg * q.r_up + tb
                + q.centred * q.gamma * q.r_up**3 * tv / 2)
        return c.done(mag_, np.where(q.bad, INF, err), 12)

    # the other forms

    def symbolic(self, sp: Any, args: Sequence[np.ndarray], alpha: Any) -> np.ndarray:
        x, p = args
        g, b, m, v = _rows(p, x.ndim)
        root = obj(np.vectorize(lambda e: sp.sqrt(e + alpha), otypes=[object])(v))
        return obj((x - m) * g / root + b)

    def numpy(self, args: Sequence[np.ndarray], alpha: Fraction | float | None
              ) -> tuple[np.ndarray, Pullback]:
        assert alpha is not None
        x, p = args
        g, b, m, v = _rows(p, x.ndim)
        r = cast(1, x) / np.sqrt(v + cast(float(alpha), x))
        c = x - m
        axes = _other_axes(x.ndim)

        def vjp(cot: np.ndarray) -> tuple[np.ndarray, ...]:
            gx = cast(cot * g * r, x)
            rows = [(cot * c * r).sum(axis=axes), cot.sum(axis=axes), -gx.sum(axis=axes),
                    (cot * c * g * r**3).sum(axis=axes) * cast(-0.5, x)]
            return gx, cast(np.stack([row.reshape(p.shape[1]) for row in rows]), p)

        return cast(c * r * g + b, x), vjp

    def numpy_jvp(self, ts: Sequence[np.ndarray], args: Sequence[np.ndarray], out: np.ndarray,
                  alpha: Fraction | float | None) -> np.ndarray:
        assert alpha is not None
        (x, p), (tx, tp) = args, ts
        g, _, m, v = _rows(p, x.ndim)
        tg, tb, tm, tv = _rows(tp, x.ndim)
        r = cast(1, x) / np.sqrt(v + cast(float(alpha), x))
        c = x - m
        return cast((tx - tm) * g * r + c * tg * r + tb - c * g * r**3 * tv * cast(0.5, x), x)

    def array(self, xp: ArrayNamespace, args: Sequence[Any], alpha: Fraction | None) -> Any:
        assert alpha is not None
        x, p = args
        shape = (1, x.shape[1], *(1,) * (len(x.shape) - 2))
        g, b, m, v = (xp.reshape(p[i], shape) for i in range(4))
        return (x - m) * g / (v + float(alpha)) ** 0.5 + b

    # the fast oracle's rules on balls

    def enclose(self, args: Sequence[Ball], alpha: Any) -> Ball:
        x, p = args
        g, b, m, r = _ball_rows(p, alpha, x.mid.ndim)
        return ball.add(ball.mul(ball.mul(ball.add(x, _neg(m)), g), r), b)

    def enclose_vjp(self, g: Ball, args: Sequence[Ball], out: Ball, alpha: Any
                    ) -> tuple[Ball, ...]:
        x, p = args
        gamma, _, m, r = _ball_rows(p, alpha, x.mid.ndim)
        axes = _other_axes(x.mid.ndim)
        c = ball.add(x, _neg(m))
        gx = ball.mul(ball.mul(g, gamma), r)
        gc = ball.mul(g, c)
        r3 = ball.mul(ball.mul(r, r), r)
        rows = [ball.mul(gc, r), g, _neg(gx),
                ball.mul(ball.mul(ball.mul(gc, gamma), r3), ball.constant(Fraction(-1, 2)))]
        sums = [ball.reduce_sum(row, axes) for row in rows]
        return gx, Ball(*(np.stack([getattr(s, f) for s in sums]) for f in ("mid", "rad", "lo")))


def _neg(b: Ball) -> Ball:
    return Ball(-b.mid, b.rad, -b.lo)


def _ball_rows(p: Ball, eps: Fraction, rank: int) -> tuple[Ball, Ball, Ball, Ball]:
    """γ, β, μ and a ball around ``r = 1/sqrt(σ² + ε)`` (around the spec's enclosed value
    too), each shaped to broadcast over axis 1."""
    rows = [Ball(*(_channel(v[i], rank) for v in (p.mid, p.rad, p.lo))) for i in range(4)]
    var = rows[VAR]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        centre = var.mid + var.lo
        low = np.nextafter(np.nextafter(centre - var.rad - abs(var.lo) * 2.0**-52, -BALL_INF)
                           + float(eps) * (1 - 2.0**-52), -BALL_INF)
        high = np.nextafter(np.nextafter(centre + var.rad + abs(var.lo) * 2.0**-52, BALL_INF)
                            + float(eps) * (1 + 2.0**-52), BALL_INF)
        if not np.all(low > 0):
            raise NotEnclosed("batch_norm: σ² + ε may not be positive over its ball")
    return rows[GAMMA], rows[BETA], rows[MEAN], ball.inverse_sqrt(low, high)


@dataclass(frozen=True)
class _Terms:
    """What the budget rules read, each shaped to broadcast over x: the centred value's
    magnitude (``|x| + |μ|``, which covers every order of the subtraction) and its error,
    γ's and β's magnitudes, errors and hats, the true ``r``'s upper bound, the computed
    r's upper bound and its error (:func:`_root`), where the budget is infinite."""

    centred: np.ndarray
    e_c: np.ndarray
    mean_hat: np.ndarray
    gamma: np.ndarray
    e_gamma: np.ndarray
    gamma_hat: np.ndarray
    beta: np.ndarray
    e_beta: np.ndarray
    beta_hat: np.ndarray
    r_up: np.ndarray
    big_r: np.ndarray
    r_err: np.ndarray
    bad: np.ndarray
    bad_row: np.ndarray

    @staticmethod
    def of(c: Ctx, at: Site, x: Bound, p: Bound) -> _Terms:
        rank = x.mag.ndim
        mags = [_channel(v, rank) for v in p.mag]
        errs = [_channel(v, rank) for v in p.err]
        r_up, big_r, r_err, bad = _root(c, at, p)
        return _Terms(x.mag + mags[MEAN], x.err + errs[MEAN], mags[MEAN] + errs[MEAN],
                      mags[GAMMA], errs[GAMMA], mags[GAMMA] + errs[GAMMA],
                      mags[BETA], errs[BETA], mags[BETA] + errs[BETA],
                      _channel(r_up, rank), _channel(big_r, rank), _channel(r_err, rank),
                      _channel(bad, rank), np.broadcast_to(bad, p.mag.shape))


def _root(c: Ctx, at: Site, p: Bound) -> tuple[np.ndarray, ...]:
    """Per channel: an upper bound of the true ``r = 1/sqrt(σ² + ε)`` (σ² within the
    trace's slack of its value), an upper bound ``R`` of the computed one and its error
    ``e_r``: ``σ̂² + ε`` rounded (σ²'s error, ε's rounding, one addition) moves ``r`` by a
    relative ``ρ`` (as layer_norm's), and the square root and the division or reciprocal
    square root add ``2 SQRT_ULPS u``; inf where ``σ̂² + ε`` may not be positive."""
    assert at.alpha is not None
    slack = at.errs[1]
    values = [Fraction(v) for v in np.asarray(at.args[1])[VAR].tolist()]
    w_low = np.array([max(float(v - slack + at.alpha) * (1 - 2.0**-50), 0.0) for v in values])
    w_high = np.array([up(v + slack + at.alpha) for v in values])
    eps_miss = c.alpha(at.alpha)[1]
    e_v = p.err[VAR]
    e_w = e_v + eps_miss + c.u * (w_high + e_v + eps_miss)
    w_hat_low = w_low - e_w
    bad = (w_hat_low <= 0) | ~np.isfinite(e_w)
    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(bad, 1.0, w_hat_low)
        r_up = np.where(w_low > 0, 1 / np.sqrt(np.where(w_low > 0, w_low, 1.0)), INF)
        r_up = r_up * (1 + 2.0**-50)
        rho = e_w / (np.sqrt(safe) * (np.sqrt(np.where(w_low > 0, w_low, 1.0)) + np.sqrt(safe)))
    own = 2 * SQRT_ULPS * c.u
    big_r = r_up * (1 + rho) * (1 + own)
    return r_up, big_r, r_up * (rho + own * (1 + rho)), bad | ~np.isfinite(r_up)


def _summed(c: Ctx, mag_: np.ndarray, prop: np.ndarray, hat: np.ndarray, k: int, rank: int
            ) -> Bound:
    """A row of ``p̄``: terms over the channel's elements summed, each term ``k``
    roundings, the sum's rounding as the backend carries it out (:meth:`Ctx.summed`)."""
    axes = _other_axes(rank)
    shape = np.broadcast_shapes(mag_.shape, prop.shape, hat.shape)
    n = math.prod(shape[i] for i in axes)
    rel, last = c.summed(n - 1)
    total = (1 + c.gamma(k)) * (1 + rel) - 1
    sums = [np.broadcast_to(v, shape).sum(axis=axes) for v in (mag_, prop, hat)]
    err = sums[1] + total * sums[2] + n * (k + 1) * c.tiny + last
    return c.done(sums[0], err, n + k)
