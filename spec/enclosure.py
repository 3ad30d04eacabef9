"""A fast, sound oracle: float64 enclosures of the exact values, exact rationals only where needed.

Why: the exact interpreter (:mod:`resverify.spec.exact`) computes every value as a
Fraction, which costs seconds for one residual block of width 256, thousands of times what
the backend it checks spends. A verdict does not need the exact value itself, only on
which side of ``actual ± bound`` it lies. Here every value of the program and of its
reverse pass is enclosed in a *ball* (a double-double ``mid + lo`` and a radius,
``|exact - (mid + lo)| <= rad``), computed with NumPy on whole arrays:

* products are error-free transformed (Dekker's two-product: ``a*b == p + e`` exactly)
  and sums two-summed, so elementwise ops lose nothing but a rounding of the low part;
* dot products and reductions are summed exactly and rounded once (:func:`math.fsum` of
  the two-product terms) when short, and by Ogita, Rump and Oishi's Dot2 (error about an
  ulp, with a proven bound) when long, vectorised over the outputs;
* every remaining rounding is bounded by half an ulp (``np.spacing``), and sums of
  non-negative bounds are rounded up (``np.nextafter``);
* tanh is 1-Lipschitz, so the input's radius carries through; the platform's tanh is
  trusted to :data:`LIBM_TANH_ULPS` ulps (glibc documents 2) and the spec's own tanh
  value (an mpmath enclosure's midpoint, ``2**-200`` relative) is one ulp more;
* layer_norm and rms_norm are centred on the spec's own rule run on the exact midpoints
  (dyadic Fractions, one row at a time, the ``1/sqrt`` enclosed as the spec encloses it),
  and widened by a proven bound of the norm's Jacobian over the argument's ball and by
  the spec's ``2**-199`` relative error of ``1/sqrt`` (:func:`_norm`).

The ball contains both the spec's value (the Fraction :mod:`resverify.spec.exact` returns)
and the true real value. :func:`verify` decides ``|actual - exact| <= bound`` from the
ball for every element it can (almost all: a ball is an ulp or two wide, a budget many
ulps), and only if some element is too close to call does it run the exact interpreter
and decide those elements with :func:`resverify.spec.compare.within`. So the verdict on
every element is the exact verdict for the bound used.

The bound is the error budget of :mod:`resverify.spec.budget`, computed from a trace of
the balls (midpoints, with radii as the trace's slack) instead of the exact trace. Its
rules are built to take approximate traces (the exact interpreter's tanh is one), so it is
sound, and it is at least the exact trace's budget (the radius only widens relu's "sign
uncertain" set and tanh's slope bound); ``tests/test_perf_enclosure.py`` checks both
containment and this, and that the verdicts equal the exact path's.

Ops without a rule here (:data:`RULES`), non-finite inputs, shape errors and products
that could overflow or underflow in the two-product send the whole request to the exact
path.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.budget import Budget, Miss, error_budget
from resverify.spec.compare import within
from resverify.spec.errors import ResverifyError, ShapeMismatch
from resverify.spec.exact import ExactResult, Trace, evaluate
from resverify.spec.ir import Node, Program, infer_shapes
from resverify.spec.ops import OP_TABLE, LayerNorm, Site
from resverify.spec.rational import TANH_PRECISION_BITS, exact_rsqrt
from resverify.spec.request import Request
from resverify.spec.rounding import up

__all__ = ["LIBM_TANH_ULPS", "RULES", "Ball", "NotEnclosed", "Verdict", "enclose",
           "fast_budget", "verify"]

INF = math.inf
LIBM_TANH_ULPS = 8
"""Ulps of error allowed to ``np.tanh`` (glibc documents at most 2; NumPy measured 1.05)."""
_SPLIT = 134217729.0  # 2**27 + 1, Dekker's splitter
_SAFE_HI, _SAFE_LO = 2.0**995, 2.0**-969  # two-product exact between these magnitudes
_CHUNK = 1 << 20  # floats handed to fsum per batch


class NotEnclosed(ResverifyError):
    """The request is outside what the enclosure covers; use the exact interpreter."""


@dataclass(frozen=True)
class Ball:
    """``|exact - (mid + lo)| <= rad`` element by element, ``mid + lo`` read exactly.

    ``lo`` carries what an error-free transformation left over (a double-double), so a
    chain of ops keeps its value to about 106 bits and its radius far below an ulp.
    """

    mid: np.ndarray
    rad: np.ndarray
    lo: np.ndarray

    @staticmethod
    def exact(values: np.ndarray) -> Ball:
        mid = np.asarray(values, dtype=np.float64)
        return Ball(mid, np.zeros_like(mid), np.zeros_like(mid))

    @staticmethod
    def of(mid: np.ndarray, rad: np.ndarray) -> Ball:
        return Ball(mid, rad, np.zeros_like(mid))

    def reshape(self, shape: Sequence[int]) -> Ball:
        return Ball(self.mid.reshape(shape), self.rad.reshape(shape), self.lo.reshape(shape))

    @property
    def T(self) -> Ball:
        return Ball(self.mid.T, self.rad.T, self.lo.T)

    @property
    def size(self) -> np.ndarray:
        """An upper bound of ``|exact|``."""
        return _add_up(np.abs(self.mid), np.abs(self.lo), self.rad)


# ----------------------------------------------------------------------------------------
# rounding helpers: every result is an upper bound of the exact non-negative value


def _clean(x: np.ndarray) -> np.ndarray:
    """NaN (from inf - inf or 0 * inf among bounds) means unknown: inf."""
    return np.where(np.isnan(x), INF, x)


def _up(x: np.ndarray) -> np.ndarray:
    return np.nextafter(_clean(x), INF)


def _add_up(*terms: np.ndarray) -> np.ndarray:
    """An upper bound of the sum of non-negative ``terms``: the float sum of j terms is at
    least ``(1 - u)^(j-1)`` of the exact one (sums of floats do not underflow), and a float
    sum of 0 is exactly 0 (every term 0), so it stays 0: an exact value keeps radius 0."""
    total = np.asarray(terms[0], dtype=np.float64)
    if len(terms) == 1:
        return _clean(total)
    with np.errstate(invalid="ignore", over="ignore"):
        for term in terms[1:]:
            total = total + term
        return np.where(total == 0, 0.0, _up(total * (1 + len(terms) * 2.0**-51)))


def _mul_up(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return _up(a * b)


def _half_ulp(value: np.ndarray) -> np.ndarray:
    """At least the error of the one rounding (to nearest) that produced ``value``."""
    with np.errstate(invalid="ignore"):
        return _clean(np.maximum(np.spacing(np.abs(value)) / 2, 2.0**-1074))


def _matmul_up(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An upper bound of ``a @ b`` for non-negative ``a`` and ``b``: the float product
    is at least ``(1 - γ_k)`` of the exact one, and each product may underflow."""
    k = a.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        out = a @ b
    return _up(out * (1 + 4 * (k + 2) * 2.0**-53) + k * 2.0**-1074)


def _sum_rounded(*terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(t, e)``: the float sum of ``terms`` left to right and a bound of its rounding."""
    total, err = np.asarray(terms[0], dtype=np.float64), np.zeros(np.shape(terms[0]))
    with np.errstate(invalid="ignore", over="ignore"):
        for term in terms[1:]:
            total = total + term
            err = _add_up(err, _half_ulp(total))
    return total, err


# ----------------------------------------------------------------------------------------
# error-free transformations, dot products and sums


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(s, e)`` with ``a + b == s + e`` exactly (Knuth; finite, no overflow)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        v = s - a
        return s, (a - (s - v)) + (b - v)


def _two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(p, e, safe)``: ``a*b == p + e`` exactly where ``safe`` (Dekker, no FMA needed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        p = a * b
        ah, bh = a * _SPLIT, b * _SPLIT
        ah, bh = ah - (ah - a), bh - (bh - b)
        al, bl = a - ah, b - bh
        e = al * bl - (((p - ah * bh) - al * bh) - ah * bl)
        size = np.abs(p)
        safe = (np.isfinite(e) & (size < _SAFE_HI) & (np.abs(a) < _SAFE_HI)
                & (np.abs(b) < _SAFE_HI) & (size > _SAFE_LO))
        safe |= (a == 0) | (b == 0)
    return p, np.where(safe, e, 0.0), safe


def _fsum_rows(terms: np.ndarray) -> np.ndarray:
    """Each row of ``terms`` summed exactly and rounded once (``math.fsum``)."""
    rows, width = terms.shape
    out = np.empty(rows, dtype=np.float64)
    step = max(1, _CHUNK // max(width, 1))
    for start in range(0, rows, step):
        block = terms[start:start + step].tolist()
        out[start:start + step] = list(map(math.fsum, block))
    return out


def _fsum_pair(terms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(hi, lo, err)`` per row: the exact row sum rounded once (hi), what is left over
    rounded once (lo), and half an ulp of lo: ``|sum - hi - lo| <= err``."""
    hi = _fsum_rows(terms)
    lo = _fsum_rows(np.concatenate([terms, -hi[:, None]], axis=1))
    return hi, lo, _half_ulp(lo)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's split: ``a == hi + lo`` with both halves of at most 26 bits."""
    with np.errstate(over="ignore", invalid="ignore"):
        c = a * _SPLIT
        hi = c - (c - a)
    return hi, a - hi


def _fsum_dot(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(hi, lo, error bound, safe)`` of ``a @ b``: every product two-product split and
    all of them summed by ``math.fsum`` (:func:`_fsum_pair`)."""
    (m, _), n = a.shape, b.shape[1]
    mid, lo, err = np.empty((m, n)), np.empty((m, n)), np.empty((m, n))
    safe = np.ones((m, n), dtype=bool)
    for i in range(m):
        p, e, ok = _two_product(a[i][:, None], b)
        mid[i], lo[i], err[i] = _fsum_pair(np.concatenate([p, e]).T)
        safe[i] = ok.all(axis=0)
    return mid, lo, err, safe


def _dot2(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(value, 0, error bound, safe)`` of ``a @ b`` by Dot2 (Ogita, Rump and Oishi,
    "Accurate sum and dot product", SIAM J. Sci. Comput. 26, 2005, Proposition 5.5):
    ``|res - aᵀb| <= u|aᵀb| + γ_k² |a|ᵀ|b|`` where no product underflows or overflows;
    vectorised over the outputs, one pass per term."""
    k = a.shape[1]
    (ah, al), (bh, bl) = _split(a), _split(b)
    safe = ((np.abs(a) < _SAFE_HI).all(axis=1)[:, None]
            & (np.abs(b) < _SAFE_HI).all(axis=0)[None, :])
    with np.errstate(over="ignore", invalid="ignore"):
        p = s = np.zeros((a.shape[0], b.shape[1]))
        for i in range(k):
            x, xl, y, yl = ah[:, i:i + 1], al[:, i:i + 1], bh[i:i + 1], bl[i:i + 1]
            h = a[:, i:i + 1] * b[i:i + 1]
            size = np.abs(h)
            zero = (a[:, i:i + 1] == 0) | (b[i:i + 1] == 0)  # exact; an underflow is not
            safe &= zero | ((size > _SAFE_LO) & (size < _SAFE_HI))
            r = xl * yl - (((h - x * y) - xl * y) - x * yl)  # TwoProduct: h + r exact
            total = p + h
            v = total - p
            q = (p - (total - v)) + (h - v)  # TwoSum: p + h == total + q
            p, s = total, s + (q + r)
        res = p + s
    u = 2.0**-53
    gamma = k * u / (1 - k * u)
    err = _add_up(u * np.abs(res), gamma * gamma * _matmul_up(np.abs(a), np.abs(b)))
    return res, np.zeros_like(res), _up(err * (1 + 4 * u)), safe & np.isfinite(res)


def dot(a: Ball, b: Ball) -> Ball:
    """``a @ b`` for 2-D balls: the dot of the midpoints nearly exactly (``fsum`` of the
    two-product terms for short ones, Dot2 for long ones); the low parts' products and
    the radii (``|a|·rad_b + rad_a·|b|``, sizes including the radii) bounded with
    rounded-up matrix products of magnitudes."""
    (m, k), n = a.mid.shape, b.mid.shape[1]
    if k == 0:
        return Ball.exact(np.zeros((m, n)))
    if k == 1:  # an outer product: each element is one product, kept exactly as p + e
        return mul(Ball(a.mid, a.rad, a.lo), Ball(b.mid, b.rad, b.lo))
    small = k <= 8 or m * n <= 64
    mid, lo, rad, safe = (_fsum_dot if small else _dot2)(a.mid, b.mid)
    if a.lo.any() or b.lo.any():  # the low parts' products, bounded rather than summed
        low = _add_up(_matmul_up(np.abs(a.lo), b.size), _matmul_up(np.abs(a.mid), np.abs(b.lo)))
        rad = _add_up(rad, low)
    if a.rad.any() or b.rad.any():
        spread = _add_up(_matmul_up(a.size, b.rad), _matmul_up(a.rad, b.size))
        rad = _add_up(rad, spread)
    return Ball(mid, np.where(safe & np.isfinite(mid), rad, INF), lo)


def reduce_sum(x: Ball, axes: tuple[int, ...]) -> Ball:
    """Sum over ``axes`` (kept out of the result): exact sum of ``mid + lo`` rounded once."""
    if not axes:
        return x
    keep = [i for i in range(x.mid.ndim) if i not in axes]
    order = keep + list(axes)
    shape = tuple(x.mid.shape[i] for i in keep)
    count = math.prod(x.mid.shape[i] for i in axes)
    if count == 0:
        return Ball.exact(np.zeros(shape))
    flat = [np.transpose(v, order).reshape(math.prod(shape), count)
            for v in (x.mid, x.lo, x.rad)]
    mid, lo, err = _fsum_pair(np.concatenate(flat[:2], axis=1))
    rad = _add_up(err, _matmul_up(flat[2], np.ones(count)))
    return Ball(mid.reshape(shape), np.where(np.isfinite(mid), rad, INF).reshape(shape),
                lo.reshape(shape))


def unbroadcast(g: Ball, shape: tuple[int, ...]) -> Ball:
    """Sum a gradient over the axes broadcasting added or stretched (as the ops do)."""
    extra = g.mid.ndim - len(shape)
    out = reduce_sum(g, tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and out.mid.shape[i] != 1)
    return reduce_sum(out, stretched).reshape(shape)


# ----------------------------------------------------------------------------------------
# elementwise ops


def add(a: Ball, b: Ball) -> Ball:
    """``a + b``: the high parts two-summed, the low parts added with their rounding bound."""
    s, e = _two_sum(a.mid, b.mid)
    lo, err = _sum_rounded(e, a.lo, b.lo)
    ra, rb = np.broadcast_arrays(a.rad, b.rad)
    rad = _add_up(ra, rb, err)
    return Ball(s, np.where(np.isfinite(s) & np.isfinite(lo), rad, INF), lo)


def mul(a: Ball, b: Ball) -> Ball:
    """``a * b``: the high parts two-multiplied, the cross terms rounded and bounded."""
    p, e, safe = _two_product(a.mid, b.mid)
    with np.errstate(invalid="ignore", over="ignore"):
        cross = [a.mid * b.lo, a.lo * b.mid, a.lo * b.lo]
    lo, err = _sum_rounded(e, *cross)
    rounding = _add_up(err, *(_half_ulp(c) for c in cross))
    rad = _add_up(_mul_up(a.size, b.rad), _mul_up(a.rad, b.size), rounding)
    return Ball(p, np.where(safe & np.isfinite(lo), rad, INF), lo)


def constant(value: Fraction) -> Ball:
    """A rational constant as a double-double, with a bound of what is left over."""
    mid = float(value)
    lo = float(value - Fraction(mid))
    rad = 0.0 if Fraction(mid) + Fraction(lo) == value else math.ulp(lo)
    return Ball(np.array(mid), np.array(rad), np.array(lo))


def _signs(a: Ball) -> tuple[np.ndarray, np.ndarray]:
    """(surely > 0, surely <= 0) for the exact value in ``a``. A sum ``mid + lo`` that
    rounds to 0 is exactly 0 (gradual underflow), so a point ball at 0 is surely <= 0, as
    the exact interpreter has it: relu's derivative there is the declared 0."""
    with np.errstate(invalid="ignore", over="ignore"):
        value = a.mid + a.lo
    reach = _add_up(a.rad, np.where(value == 0, 0.0, _half_ulp(value)))
    return value > reach, value <= -reach


def relu(a: Ball) -> Ball:
    """The ball itself where surely positive, exactly 0 where surely not, else the hull."""
    positive, negative = _signs(a)
    unsure = ~(positive | negative)
    return Ball(np.where(positive, a.mid, 0.0), np.where(positive, a.rad,
                np.where(unsure, a.size, 0.0)), np.where(positive, a.lo, 0.0))


def tanh(a: Ball) -> Ball:
    """1-Lipschitz: ``tanh(mid + lo) ± (rad + the rounding of mid + lo + ulps of the
    platform's tanh and of the spec's)``."""
    with np.errstate(invalid="ignore", over="ignore"):
        value = a.mid + a.lo
    mid = np.tanh(value)
    spread = _add_up(a.rad, _half_ulp(value), 2 * (LIBM_TANH_ULPS + 1) * _half_ulp(mid))
    return Ball.of(mid, spread)


def relu_vjp(g: Ball, x: Ball) -> Ball:
    """``g`` where the exact input is surely > 0, 0 where surely <= 0, and the hull of
    both (``0 ± |g|``) where the ball straddles 0."""
    positive, negative = _signs(x)
    unsure = ~(positive | negative)
    rad = np.where(positive, g.rad, np.where(unsure, g.size, 0.0))
    return Ball(np.where(positive, g.mid, 0.0), rad, np.where(positive, g.lo, 0.0))


def tanh_vjp(g: Ball, t: Ball) -> Ball:
    """``g (1 - t²)`` with t the spec's tanh value, enclosed by the ball ``t`` (lo = 0)."""
    square, square_lo, exact = _two_product(t.mid, t.mid)
    slope, slope_lo = _two_sum(np.ones_like(square), -square)
    lo, err = _sum_rounded(slope_lo, -square_lo)
    underflow = np.where(exact, 0.0, _half_ulp(square))  # |t| < 2**-484: t² rounded once
    rad = _add_up(_mul_up(t.rad, _add_up(2 * np.abs(t.mid), t.rad)), err, underflow)
    return mul(g, Ball(slope, rad, lo))


# ----------------------------------------------------------------------------------------
# the rules per op: forward, and reverse (cotangent, argument balls, output ball)

Forward = Callable[[Sequence[Ball], Any], Ball]
Reverse = Callable[[Ball, Sequence[Ball], Ball, Any], tuple[Ball, ...]]


# ----------------------------------------------------------------------------------------
# layer_norm and rms_norm: the spec's own rules at the midpoint, a proven spread around it


def _fractions_of(b: Ball) -> np.ndarray:
    """``mid + lo`` of every element, exactly, as an object array of Fractions."""
    out = np.empty(b.mid.shape, dtype=object)
    out.reshape(-1)[:] = [Fraction(m) + Fraction(low) for m, low in
                          zip(b.mid.reshape(-1).tolist(), b.lo.reshape(-1).tolist(), strict=True)]
    return out


def _from_fractions(values: np.ndarray) -> Ball:
    """Exact values rounded to double-doubles: ``mid`` the value rounded to nearest,
    ``lo`` the rest rounded to nearest, so the radius is an ulp of ``lo`` (at least the
    smallest subnormal); a value beyond float64's range is :class:`NotEnclosed`."""
    flat = np.asarray(values, dtype=object).reshape(-1).tolist()
    mid, lo = np.empty(len(flat)), np.empty(len(flat))
    try:
        for i, value in enumerate(flat):
            v = Fraction(value)
            mid[i] = float(v)
            lo[i] = float(v - Fraction(mid[i]))
    except OverflowError:
        raise NotEnclosed("a norm's value beyond float64's range") from None
    shape = np.shape(values)
    rad = np.spacing(np.abs(lo))  # ulp(lo) >= twice the rounding of the rest
    return Ball(mid.reshape(shape), rad.reshape(shape), lo.reshape(shape))


_SPEC_R = 2.0 ** (10 - TANH_PRECISION_BITS)
"""Above the spec's relative error of ``1/sqrt`` (``2**-199``; :func:`exact_rsqrt`)."""


def _rms_up(v: np.ndarray) -> np.ndarray:
    """Upper bounds of the root mean square of each row of non-negative ``v`` (``(..., 1)``)."""
    n = v.shape[-1]
    total = _matmul_up(_mul_up(v, v), np.ones((n, 1)))
    return _up(np.sqrt(_up(total / n)))


def _mean_up(v: np.ndarray) -> np.ndarray:
    """Upper bounds of the mean of each row of non-negative ``v`` (``(..., 1)``)."""
    return _up(_matmul_up(v, np.ones((v.shape[-1], 1))) / v.shape[-1])


@dataclass(frozen=True)
class _NormSpread:
    """What bounds a norm over its argument's ball ``|a - m| <= R`` (``m = mid + lo``).

    ``r_max`` (per row) bounds ``r = 1/sqrt(σ² + ε)`` anywhere in the ball: σ, the rms of
    the centred row, moves by at most ``rms(R)`` (centring is an orthogonal projection),
    so ``r <= min(1/sqrt(ε), 1/(σ(m) - rms(R)))``. ``y_top`` bounds ``|y_i|`` there:
    ``r_max (|c_i(m)| + R_i + mean R)`` (the mean only when centred), at most ``sqrt(n)``
    rounded up to an integer.
    """

    r_max: np.ndarray
    y_top: np.ndarray
    centred: bool

    def through(self, rad: np.ndarray) -> np.ndarray:
        """A bound of ``|J(ξ) δ|_i`` for ``|δ| <= rad`` and any ξ in the ball, with
        ``J = r (I - y yᵀ/n) P`` (or its transpose: ``P`` commutes, ``P y = y``):
        ``r_max (rad_i + mean rad + y_top_i rms(rad))``. By the mean value theorem per
        component this bounds how far each output moves over the ball (``rad = R``)."""
        rad = _clean(rad)
        own = _add_up(rad, _mean_up(rad)) if self.centred else rad
        return _mul_up(self.r_max, _add_up(own, _mul_up(self.y_top, _rms_up(rad))))


def _norm_spread(op: LayerNorm, a: np.ndarray, x: Ball, eps: Fraction) -> _NormSpread:
    n = a.shape[-1]
    centred = a - a.sum(axis=-1, keepdims=True) / n if op.centred else a
    variance = (centred * centred).sum(axis=-1, keepdims=True) / n
    sigma = np.empty(variance.shape)
    r_eps, half = exact_rsqrt(eps)
    try:
        for index, v in zip(np.ndindex(*variance.shape), variance.reshape(-1).tolist(),
                            strict=True):
            low = float(v)
            low = math.nextafter(low, 0.0) if Fraction(low) > v else low
            sigma[index] = math.nextafter(math.sqrt(low), 0.0) if low > 0 else 0.0
        r_top = math.nextafter(float(r_eps + half), INF)
        c_abs = np.array([float(abs(v)) for v in centred.reshape(-1).tolist()])
    except OverflowError:
        raise NotEnclosed("a norm's variance, centred value or 1/sqrt(ε) beyond float64"
                          ) from None
    rad = _clean(x.rad)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gap = np.nextafter(sigma - _rms_up(rad), -INF)
        r_max = np.where(gap > 0, np.minimum(r_top, _up(1 / np.where(gap > 0, gap, 1.0))),
                         r_top)
    c_top = _up(c_abs.reshape(a.shape))
    spread = _add_up(c_top, rad, _mean_up(rad)) if op.centred else _add_up(c_top, rad)
    root_n = float(math.isqrt(n) + (math.isqrt(n) ** 2 != n))
    y_top = np.minimum(_mul_up(r_max, spread), root_n)
    return _NormSpread(r_max, y_top, op.centred)


def _norm(name: str) -> tuple[Forward, Reverse]:
    """The forward and reverse rules of ``layer_norm`` or ``rms_norm`` (ε the attribute).

    The centre is the spec's own rule (:meth:`LayerNorm.exact`, :meth:`LayerNorm.exact_vjp`)
    on the exact midpoints ``mid + lo`` (dyadic Fractions: a row costs a few Fraction
    operations per element and one integer square root), rounded to a double-double.
    The radius adds, rounded up, with ``s`` the spec's relative error of ``1/sqrt``
    (:class:`_NormSpread` for ``r_max``, ``y_top`` and ``through``):

    * forward: ``through(R)``, and twice ``y_top s`` (the spec's value against the true
      one, ``|c_i| |r_spec - r| <= |y_i| s``, at both ends);
    * reverse, ``ā = r (P ḡ - y m)``, ``m = mean(ḡ y)``, with ``G`` bounding ``|ḡ|`` in
      the row: the cotangent's radius, ``through(rad_ḡ)``; the argument's,
      ``|Δr| |Pḡ - y m| + r |Δy_i| |m| + r |y_i| |Δm|`` with ``|Δr| <= r_max² rms(R)``
      (``|dr/dσ| <= r²``), ``|Pḡ| <= k G`` (k 2 centred, 1 not), ``|m| <= G``,
      ``|Δy| <= dy = through(R)``, ``|Δm| <= G mean(dy)``; and the spec against the true
      value at both ends, ``2 r_max G (k + 4 y_top) s`` (``r_spec = r (1 + ρ)``, ``|ρ| <= s``,
      carries ``(1 + ρ)³`` into ``y m``).
    """
    op = OP_TABLE[name]
    assert isinstance(op, LayerNorm)
    k = 2.0 if op.centred else 1.0

    def forward(args: Sequence[Ball], eps: Any) -> Ball:
        x = args[0]
        if not x.mid.size:
            return Ball.exact(np.zeros(x.mid.shape))
        a = _fractions_of(x)
        centre = _from_fractions(op.exact([a], eps))
        spread = _norm_spread(op, a, x, eps)
        spec = _mul_up(spread.y_top, np.array(2 * _SPEC_R))
        return Ball(centre.mid, _add_up(centre.rad, spread.through(x.rad), spec), centre.lo)

    def reverse(g: Ball, args: Sequence[Ball], out: Ball, eps: Any) -> tuple[Ball, ...]:
        x = args[0]
        if not x.mid.size:
            return (Ball.exact(np.zeros(x.mid.shape)),)
        a, cot = _fractions_of(x), _fractions_of(g)
        centre = _from_fractions(op.exact_vjp(cot, [a], op.exact([a], eps), eps)[0])
        s = _norm_spread(op, a, x, eps)
        size = _clean(g.size.max(axis=-1, keepdims=True))
        dy = s.through(x.rad)
        d_r = _mul_up(_mul_up(s.r_max, s.r_max), _rms_up(_clean(x.rad)))
        moved = _add_up(_mul_up(d_r, _mul_up(size, _add_up(np.array(k), s.y_top))),
                        _mul_up(s.r_max, _mul_up(size, _add_up(
                            dy, _mul_up(s.y_top, _mean_up(dy))))))
        spec = _mul_up(_mul_up(s.r_max, size),
                       _mul_up(_add_up(np.array(k), 4 * s.y_top), np.array(2 * _SPEC_R)))
        rad = _add_up(centre.rad, s.through(g.rad), moved, spec)
        return (Ball(centre.mid, rad, centre.lo),)

    return forward, reverse


def _linear(args: Sequence[Ball], attr: Any) -> Ball:
    x, w = args
    flat = x.reshape((math.prod(x.mid.shape[:-1]), x.mid.shape[-1]))  # d_in may be 0
    return dot(flat, w).reshape(x.mid.shape[:-1] + w.mid.shape[1:])


def _linear_vjp(g: Ball, args: Sequence[Ball], out: Ball, attr: Any) -> tuple[Ball, ...]:
    x, w = args
    d_in, d_out = w.mid.shape
    count = math.prod(x.mid.shape[:-1])
    gx = dot(g.reshape((count, d_out)), w.T).reshape(x.mid.shape)
    gw = dot(x.reshape((count, d_in)).T, g.reshape((count, d_out)))
    return gx, gw


def _sum_vjp(g: Ball, args: Sequence[Ball], out: Ball, attr: Any) -> tuple[Ball, ...]:
    shape = args[0].mid.shape
    return (Ball(*(np.broadcast_to(v, shape).copy() for v in (g.mid, g.rad, g.lo))),)


RULES: Mapping[str, tuple[Forward, Reverse]] = {
    "add": (lambda a, _: add(*a),
            lambda g, a, o, _: (unbroadcast(g, a[0].mid.shape), unbroadcast(g, a[1].mid.shape))),
    "residual_add": (lambda a, _: add(*a), lambda g, a, o, _: (g, g)),
    "mul": (lambda a, _: mul(*a),
            lambda g, a, o, _: (unbroadcast(mul(g, a[1]), a[0].mid.shape),
                                unbroadcast(mul(g, a[0]), a[1].mid.shape))),
    "scale": (lambda a, k: mul(a[0], constant(Fraction(k))),
              lambda g, a, o, k: (mul(g, constant(Fraction(k))),)),
    "linear": (_linear, _linear_vjp),
    "relu": (lambda a, _: relu(a[0]), lambda g, a, o, _: (relu_vjp(g, a[0]),)),
    "tanh": (lambda a, _: tanh(a[0]), lambda g, a, o, _: (tanh_vjp(g, o),)),
    "sum": (lambda a, _: reduce_sum(a[0], tuple(range(a[0].mid.ndim))), _sum_vjp),
    "layer_norm": _norm("layer_norm"),
    "rms_norm": _norm("rms_norm"),
}
"""Op name -> (forward rule, reverse rule) on balls; other ops go to the exact path."""


def _attr(node: Node) -> Any:
    """The node's constant (``alpha`` of scale), whatever the IR calls the field."""
    return getattr(node, "attribute", getattr(node, "alpha", None))


# ----------------------------------------------------------------------------------------
# the program


@dataclass(frozen=True)
class Enclosed:
    """Balls for every forward value (inputs and nodes) and every input's gradient."""

    values: dict[str, Ball]
    grads: dict[str, Ball]
    output: Ball
    cotangents: dict[str, Ball]
    """The cotangent each node's reverse rule received (every part summed)."""


def enclose(request: Request, reverse: bool = True) -> Enclosed:
    """Balls around every value and gradient of ``request`` (raises :class:`NotEnclosed`).

    ``reverse=False`` encloses the forward values only (``grads`` and ``cotangents`` are
    empty); :func:`fast_budget` then bounds only the output (the gradients' bounds are
    infinite: the reverse pass's share of the spec's slack is not known)."""
    program, cot = request.program, request.cotangent
    if cot is None or any(node.op not in RULES for node in program.nodes):
        raise NotEnclosed("an op without an enclosure rule, or no cotangent")
    try:
        infer_shapes(program)
    except ShapeMismatch:
        raise NotEnclosed("shape mismatch") from None
    arrays = [*request.inputs.values(), cot]
    if not all(np.isfinite(np.asarray(a, dtype=np.float64)).all() for a in arrays):
        raise NotEnclosed("non-finite input")
    values = {name: Ball.exact(v) for name, v in request.inputs.items()}
    for node in program.order:
        values[node.name] = RULES[node.op][0]([values[a] for a in node.args], _attr(node))
    cotangents: dict[str, Ball] = {}
    grads = _reverse(program, values, Ball.exact(cot), cotangents) if reverse else {}
    balls = [*values.values(), *grads.values()]
    if not all(np.isfinite(b.rad).all() and np.isfinite(b.mid).all() for b in balls):
        raise NotEnclosed("a value beyond the two-product's safe range")
    return Enclosed(values, grads, values[program.output], cotangents)


def _reverse(program: Program, values: dict[str, Ball], cot: Ball,
             seen: dict[str, Ball]) -> dict[str, Ball]:
    grads: dict[str, Ball] = {program.output: cot}
    for node in reversed(program.order):
        if node.name not in grads:
            continue
        g = seen[node.name] = grads.pop(node.name)
        args = [values[a] for a in node.args]
        parts = RULES[node.op][1](g, args, values[node.name], _attr(node))
        for arg, part in zip(node.args, parts, strict=True):
            grads[arg] = part if arg not in grads else add(grads[arg], part)
    for name in program.input_names:
        if name not in grads:
            grads[name] = Ball.exact(np.zeros(values[name].mid.shape))
    return {name: grads[name] for name in program.input_names}


# ----------------------------------------------------------------------------------------
# the budget from the balls, and the verdict


def _trace(program: Program, enclosed: Enclosed) -> Trace:
    """A trace the budget rules can read: midpoints, each node's largest radius as its
    slack; tanh outputs as exact Fractions (their slope rule computes with them), and a
    norm's argument as the exact ``mid + lo`` (its rule centres and squares the row, which
    in float64 would round below the exact trace's sizes where the row's mean is large)."""
    values: dict[str, Any] = {}
    slack: dict[str, Fraction] = {}
    tanh_out = {n.name for n in program.nodes if n.op == "tanh"}
    normed = {n.args[0] for n in program.nodes if n.op in _NORMS}
    for name, ball in enclosed.values.items():
        mid = ball.mid
        values[name] = _fractions(mid) if name in tanh_out else mid
        if name in normed:
            values[name] = _fractions_of(ball)
        radius = float(_add_up(np.abs(ball.lo), ball.rad).max()) if ball.rad.size else 0.0
        slack[name] = Fraction(radius) if math.isfinite(radius) else Fraction(2**1100)
    return Trace(values, slack)


def _fractions(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.shape, dtype=object)
    out.reshape(-1)[:] = [Fraction(v) for v in values.reshape(-1).tolist()]
    return out


def _spec_slack(program: Program, enclosed: Enclosed) -> Fraction:
    """An upper bound of the exact interpreter's own slack (0 without tanh).

    The interpreter's error rules (each op's ``error`` and ``error_vjp``) are monotone in
    the magnitudes they read, so they are run here exactly as :mod:`resverify.spec.exact`
    runs them, on the balls' magnitude bounds ``|mid| + rad`` (float arrays) instead of the
    values; their float roundings are covered by doubling the result. Two exceptions:
    relu's VJP asks whether some input is within its error of 0, so it reads lower bounds
    of the magnitudes (:func:`_least`); the norms read their centred rows and ``1/sqrt``
    enclosures, bounded by :data:`_SLACK_RULES`.
    """
    if all(OP_TABLE[node.op].rational for node in program.nodes):
        return Fraction(0)
    size = {n: _stand_in(b.size) for n, b in enclosed.values.items()}
    slack: dict[str, Any] = dict.fromkeys(program.input_names, Fraction(0))
    for node in program.order:
        args = [size[a] for a in node.args]
        slack[node.name] = _SLACK_RULES.get(node.op, OP_TABLE[node.op]).error(
            args, [slack[a] for a in node.args], size[node.name], _attr(node))
    errs: dict[str, Any] = {program.output: Fraction(0)} if enclosed.grads else {}
    for node in reversed(program.order):
        if node.name not in errs:
            continue
        ball, eg = enclosed.cotangents[node.name], errs.pop(node.name)
        g = _stand_in(ball.size)
        args = ([_least(enclosed.values[node.args[0]])] if node.op == "relu"
                else [size[a] for a in node.args])
        at = Site(_attr(node), args, [slack[a] for a in node.args], size[node.name],
                  slack[node.name])
        rules = _SLACK_RULES.get(node.op, OP_TABLE[node.op])
        zero = rules.rational and not (eg or any(at.errs) or at.err)  # as the interpreter
        parts = [Fraction(0)] * len(node.args) if zero else rules.error_vjp(at, g, eg)
        for arg, part in zip(node.args, parts, strict=True):
            errs[arg] = errs.get(arg, Fraction(0)) + part
    worst = max([slack[program.output], *(errs.get(n, 0) for n in program.input_names)])
    return Fraction(up(2 * Fraction(worst)))


class _StandInLayerNorm(LayerNorm):
    """layer_norm's error rules read the centred row and the ``1/sqrt`` enclosure's
    half-width, which a stand-in (every element the largest magnitude) does not have:
    here ``|c_i| <= k max a`` (the stand-ins are sizes, never negative) and the half-width
    ``<= r 2**-200 <= 2**-199/sqrt(ε)``."""

    def _centred(self, a: np.ndarray) -> np.ndarray:
        top = Fraction(float(np.max(a))) if a.size else Fraction(0)
        return np.array([(2 if self.centred else 1) * top], dtype=object)

    def _rsqrt(self, c: np.ndarray, eps: Any) -> tuple[np.ndarray, Fraction]:
        r_eps, half = exact_rsqrt(eps)
        return c, (r_eps + half) / 2**(TANH_PRECISION_BITS - 1)


class _StandInRmsNorm(_StandInLayerNorm):
    name = "rms_norm"
    centred = False


_NORMS = ("layer_norm", "rms_norm")
_SLACK_RULES = {"layer_norm": _StandInLayerNorm(), "rms_norm": _StandInRmsNorm()}
"""The norms' error rules on stand-ins (:func:`_spec_slack`)."""


def _least(ball: Ball) -> np.ndarray:
    """Lower bounds of ``|exact|`` per element (relu's "sign unknown" test reads them)."""
    with np.errstate(invalid="ignore", over="ignore"):
        low = np.nextafter(np.abs(ball.mid) - _add_up(np.abs(ball.lo), ball.rad), -INF)
    return np.maximum(np.where(np.isnan(low), 0.0, low), 0.0)


def _stand_in(size: np.ndarray) -> np.ndarray:
    """An array of ``size``'s shape holding its largest element everywhere (a broadcast
    view): the error rules read only shapes and the largest magnitude."""
    top = float(size.max()) if size.size else 0.0
    return np.broadcast_to(np.float64(top), size.shape)


def fast_budget(request: Request, enclosed: Enclosed, with_spec_slack: bool = True) -> Budget:
    """The error budget computed from the balls' trace instead of the exact one.

    ``with_spec_slack=False`` leaves out the exact interpreter's own slack (non-zero only
    with tanh, about ``2**-190`` relative), which every bound would carry: the bounds are
    then no larger, so an element inside them is inside the full ones too.
    """
    slack = _spec_slack(request.program, enclosed) if with_spec_slack else Fraction(0)
    stand_in = ExactResult(None, None, slack, None, _trace(request.program, enclosed))
    budget = error_budget(request, exact=stand_in)
    if enclosed.grads or not request.program.input_names:
        return budget
    unknown = {n: np.full(np.shape(g), INF) for n, g in budget.grads.items()}
    return dataclasses.replace(budget, grads=unknown)


def decide(actual: np.ndarray, ball: Ball, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(inside, unsure)`` per element: ``inside`` is the verdict of
    :func:`resverify.spec.compare.within` wherever ``unsure`` is False."""
    a = np.asarray(actual, dtype=np.float64)
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), a.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        d, tail = _two_sum(a, -ball.mid)  # a - mid == d + tail
        u, eu = _two_sum(tail, -ball.lo)
        v, ev = _two_sum(d, u)  # a - (mid + lo) == v + ev + eu, exactly
        slop = _add_up(np.abs(ev), np.abs(eu), ball.rad)
        diff = np.abs(v)
        exact = slop == 0  # then |a - exact value| is diff itself
        far = np.where(exact, diff, _add_up(diff, slop))  # >= |a - exact|
        near = np.where(exact, diff, np.nextafter(diff - slop, -INF))  # <= |a - exact|
    checked = np.isfinite(b) & np.isfinite(a)
    inside = (b == INF) | (checked & (far <= b))
    outside = ~(b == INF) & (~checked | (near > b))
    return inside, ~(inside | outside)


@dataclass(frozen=True)
class Verdict:
    """Every element outside its budget, and how the verdict was reached."""

    misses: list[Miss]
    budget: Budget
    decided_exactly: int
    """Elements the balls could not decide, decided with the exact interpreter."""
    exact_path: bool
    """True when the whole request went to the exact interpreter (:class:`NotEnclosed`)."""


def verify(request: Request, output: np.ndarray, grads: Mapping[str, np.ndarray],
           tangent: np.ndarray | None = None) -> Verdict:
    """Judge a backend's ``output`` and ``grads`` (and ``tangent``, for a forward-mode
    request) for ``request`` against its budget.

    The budget without the spec's slack is tried first (cheaper): when every element is
    inside it, every element is inside the full budget too. Forward-mode requests take the
    exact path (the balls carry no tangents).
    """
    try:
        if request.forward_mode:
            raise NotEnclosed("forward mode: tangents are not enclosed")
        enclosed = enclose(request)
    except NotEnclosed:
        exact = evaluate(request)
        budget = error_budget(request, exact=exact)
        return Verdict(budget.misses(exact, output, grads, tangent), budget, 0, True)
    budget = fast_budget(request, enclosed, with_spec_slack=False)
    misses, unsure = _judge(request, enclosed, budget, output, grads)
    if (misses or unsure) and not all(OP_TABLE[n.op].rational for n in request.program.nodes):
        budget = fast_budget(request, enclosed)
        misses, unsure = _judge(request, enclosed, budget, output, grads)
    count = sum(int(d.sum()) for *_, d in unsure)
    if unsure:
        misses += _decide_exactly(request, unsure)
    return Verdict(misses, budget, count, False)


Unsure = list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]
"""Per array: where, the actual values, the bounds, and the mask of undecided elements."""


def _judge(request: Request, enclosed: Enclosed, budget: Budget, output: np.ndarray,
           grads: Mapping[str, np.ndarray]) -> tuple[list[Miss], Unsure]:
    """The elements the balls decide are outside (their ``expected`` is the ball's
    midpoint, within its radius of the exact value), and those they cannot decide."""
    pending: list[tuple[str, np.ndarray | None, Ball, np.ndarray]] = [
        ("output", output, enclosed.output, budget.output)]
    pending += [(f"grad[{n}]", grads.get(n), enclosed.grads[n], budget.grads[n])
                for n in request.program.input_names]
    misses: list[Miss] = []
    unsure: Unsure = []
    for where, actual, ball, bound in pending:
        if actual is None or np.shape(actual) != ball.mid.shape:
            misses.append(Miss(f"{where}.shape", (), math.nan, Fraction(0), 0.0))
            continue
        inside, doubt = decide(actual, ball, bound)
        bounds = np.broadcast_to(bound, ball.mid.shape)
        misses += [Miss(where, index, float(actual[index]),
                        Fraction(float(ball.mid[index])), float(bounds[index]))
                   for index in _indices(~inside & ~doubt)]
        if doubt.any():
            unsure.append((where, np.asarray(actual), bounds, doubt))
    return misses, unsure


def _indices(mask: np.ndarray) -> list[tuple[int, ...]]:
    """Where ``mask`` is true, as index tuples (``()`` for a true 0-d mask)."""
    return [tuple(int(i) for i in row) for row in np.argwhere(mask)]


def _decide_exactly(request: Request, unsure: Unsure) -> list[Miss]:
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    found = []
    for where, actual, bounds, doubt in unsure:
        want = exact.output if where == "output" else exact.grads[where[5:-1]]
        for idx in _indices(doubt):
            if not within(float(actual[idx]), want[idx], float(bounds[idx])):
                found.append(Miss(where, idx, float(actual[idx]), want[idx],
                                  float(bounds[idx])))
    return found

