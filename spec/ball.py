"""Balls: float64 enclosures of exact values, and the arithmetic the fast oracle runs on them.

A :class:`Ball` is a double-double ``mid + lo`` and a radius, ``|exact - (mid + lo)| <= rad``
element by element. The operations here are exact up to a bounded rounding:

* products are error-free transformed (Dekker's two-product: ``a*b == p + e`` exactly)
  and sums two-summed, so elementwise ops lose nothing but a rounding of the low part;
* dot products and reductions are summed exactly and rounded once (:func:`math.fsum` of
  the two-product terms) when short, and by Ogita, Rump and Oishi's Dot2 (error about an
  ulp, with a proven bound) when long, vectorised over the outputs;
* every remaining rounding is bounded by half an ulp (``np.spacing``), and sums of
  non-negative bounds are rounded up (``np.nextafter``).

Each op's own enclosure rule (``enclose`` and ``enclose_vjp`` on its entry in
:mod:`resverify.spec.ops`) is written with these; :mod:`resverify.spec.enclosure` runs the
rules over a program and judges a backend's answer from the balls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np

from resverify.spec.errors import ResverifyError
from resverify.spec.rational import of_mpf

__all__ = []

INF = math.inf
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
        return add_up(np.abs(self.mid), np.abs(self.lo), self.rad)


# ----------------------------------------------------------------------------------------
# rounding helpers: every result is an upper bound of the exact non-negative value


def clean(x: np.ndarray) -> np.ndarray:
    """NaN (from inf - inf or 0 * inf among bounds) means unknown: inf."""
    return np.where(np.isnan(x), INF, x)


def next_up(x: np.ndarray) -> np.ndarray:
    return np.nextafter(clean(x), INF)


def inverse_sqrt(low: np.ndarray, high: np.ndarray) -> Ball:
    """A ball around ``1/sqrt(v)`` for every ``v`` in ``[low, high]`` (``low > 0``, checked
    by the caller): ``1/sqrt`` at the two ends, each step rounded outward, a few ulps wide
    (the spec's own enclosure of ``1/sqrt`` is 2**-199 from it); rsqrt's and batch norm's."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        top = np.nextafter(np.nextafter(1 / np.nextafter(np.sqrt(low), 0.0), INF), INF)
        bottom = np.nextafter(np.nextafter(1 / np.nextafter(np.sqrt(high), INF), 0.0),
                              0.0) * (1 - 2.0**-52)
    mid = (top + bottom) / 2
    rad = next_up(np.maximum(top - mid, mid - bottom) * (1 + 2.0**-50))
    return Ball(mid, rad, np.zeros_like(mid))


def add_up(*terms: np.ndarray) -> np.ndarray:
    """An upper bound of the sum of non-negative ``terms``: the float sum of j terms is at
    least ``(1 - u)^(j-1)`` of the exact one (sums of floats do not underflow), and a float
    sum of 0 is exactly 0 (every term 0), so it stays 0: an exact value keeps radius 0."""
    total = np.asarray(terms[0], dtype=np.float64)
    if len(terms) == 1:
        return clean(total)
    with np.errstate(invalid="ignore", over="ignore"):
        for term in terms[1:]:
            total = total + term
        return np.where(total == 0, 0.0, next_up(total * (1 + len(terms) * 2.0**-51)))


def mul_up(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):
        return next_up(a * b)


def half_ulp(value: np.ndarray) -> np.ndarray:
    """At least the error of the one rounding (to nearest) that produced ``value``; at the
    largest finite magnitude (a causal mask's ``finfo.min``), half its binade's spacing."""
    size = np.abs(value)
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.spacing(size)
        top = np.isinf(spacing) & np.isfinite(size)
        spacing = np.where(top, np.spacing(np.nextafter(size, 0.0)), spacing)
        return clean(np.maximum(spacing / 2, 2.0**-1074))


def matmul_up(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An upper bound of ``a @ b`` for non-negative ``a`` and ``b``: the float product
    is at least ``(1 - γ_k)`` of the exact one, and each product may underflow."""
    k = a.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        out = a @ b
    return next_up(out * (1 + 4 * (k + 2) * 2.0**-53) + k * 2.0**-1074)


def sum_rounded(*terms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(t, e)``: the float sum of ``terms`` left to right and a bound of its rounding."""
    total, err = np.asarray(terms[0], dtype=np.float64), np.zeros(np.shape(terms[0]))
    with np.errstate(invalid="ignore", over="ignore"):
        for term in terms[1:]:
            total = total + term
            err = add_up(err, half_ulp(total))
    return total, err


# ----------------------------------------------------------------------------------------
# error-free transformations, dot products and sums


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(s, e)`` with ``a + b == s + e`` exactly (Knuth; finite, no overflow)."""
    with np.errstate(invalid="ignore", over="ignore"):
        s = a + b
        v = s - a
        return s, (a - (s - v)) + (b - v)


def two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    return hi, lo, half_ulp(lo)


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
        p, e, ok = two_product(a[i][:, None], b)
        mid[i], lo[i], err[i] = _fsum_pair(np.concatenate([p, e]).T)
        safe[i] = ok.all(axis=0)
    return mid, lo, err, safe


def _dot2(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(value, 0, error bound, safe)`` of ``a @ b`` by Dot2 (Ogita, Rump and Oishi,
    "Accurate sum and dot product", SIAM J. Sci. Comput. 26, 2005, Proposition 5.5):
    ``|res - aᵀb| <= u|aᵀb| + γ_k² |a|ᵀ|b|`` where no product underflows or overflows;
    vectorised over the outputs, one pass per term (:func:`_dot2_sums`)."""
    k = a.shape[1]
    safe = ((np.abs(a) < _SAFE_HI).all(axis=1)[:, None]
            & (np.abs(b) < _SAFE_HI).all(axis=0)[None, :])
    with np.errstate(over="ignore", invalid="ignore"):
        res = _dot2_sums(a, b)
        safe = safe & _products_safe(a, b)
    u = 2.0**-53
    gamma = k * u / (1 - k * u)
    err = add_up(u * np.abs(res), gamma * gamma * matmul_up(np.abs(a), np.abs(b)))
    return res, np.zeros_like(res), next_up(err * (1 + 4 * u)), safe & np.isfinite(res)


def _dot2_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dot2's sum ``p + s`` of every ``a[:, i] b[i]``: each product two-product split
    (``h + r``), ``h`` two-summed into ``p``, the errors summed into ``s``; the same
    operations in the same order on every element, written into reused buffers."""
    (ah, al), (bh, bl) = _split(a), _split(b)
    shape = (a.shape[0], b.shape[1])
    p, total, s = np.zeros(shape), np.empty(shape), np.zeros(shape)
    h, v, r, t1, t2 = (np.empty(shape) for _ in range(5))
    for i in range(a.shape[1]):
        x, xl, y, yl = ah[:, i:i + 1], al[:, i:i + 1], bh[i:i + 1], bl[i:i + 1]
        np.multiply(a[:, i:i + 1], b[i:i + 1], out=h)
        # TwoProduct: h + r exact, r = xl yl - (((h - x y) - xl y) - x yl)
        np.subtract(h, np.multiply(x, y, out=t1), out=t1)
        np.subtract(t1, np.multiply(xl, y, out=t2), out=t1)
        np.subtract(t1, np.multiply(x, yl, out=t2), out=t1)
        np.subtract(np.multiply(xl, yl, out=t2), t1, out=r)
        # TwoSum: p + h == total + q, q = (p - (total - v)) + (h - v), v = total - p
        np.add(p, h, out=total)
        np.subtract(total, p, out=v)
        np.subtract(p, np.subtract(total, v, out=t1), out=t1)
        np.add(t1, np.subtract(h, v, out=t2), out=t1)
        np.add(s, np.add(t1, r, out=t1), out=s)  # s + (q + r)
        p, total = total, p
    return p + s


def _products_safe(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per output of ``a @ b``: whether each of its products ``a[:, i] b[i]`` is 0 by a
    zero factor or has a float product strictly between ``_SAFE_LO`` and ``_SAFE_HI`` (no
    two-product error lost). All of them are where the largest factors' product is below
    half of ``_SAFE_HI`` and the smallest non-zero factors' above twice ``_SAFE_LO`` (each
    float product is within a rounding of its exact value, ``_SAFE_LO`` and ``_SAFE_HI``
    floats): one test instead of one per term; else term by term."""
    size_a, size_b = np.abs(a), np.abs(b)
    if not (size_a.any() and size_b.any()):
        return np.ones((a.shape[0], b.shape[1]), dtype=bool)  # every product 0 by a factor
    top = float(size_a.max()) * float(size_b.max())
    least = float(size_a[size_a > 0].min()) * float(size_b[size_b > 0].min())
    if top < _SAFE_HI / 2 and least > 2 * _SAFE_LO:
        return np.ones((a.shape[0], b.shape[1]), dtype=bool)
    safe = np.ones((a.shape[0], b.shape[1]), dtype=bool)
    for i in range(a.shape[1]):
        size = np.abs(a[:, i:i + 1] * b[i:i + 1])
        zero = (a[:, i:i + 1] == 0) | (b[i:i + 1] == 0)  # exact; an underflow is not
        safe &= zero | ((size > _SAFE_LO) & (size < _SAFE_HI))
    return safe


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
        low = add_up(matmul_up(np.abs(a.lo), b.size), matmul_up(np.abs(a.mid), np.abs(b.lo)))
        rad = add_up(rad, low)
    if a.rad.any() or b.rad.any():
        spread = add_up(matmul_up(a.size, b.rad), matmul_up(a.rad, b.size))
        rad = add_up(rad, spread)
    return Ball(mid, np.where(safe & np.isfinite(mid), rad, INF), lo)


def batched_dot(a: Ball, b: Ball) -> Ball:
    """``a @ b`` by :func:`dot`, batch by batch over the leading axes (the same in both)."""
    lead, (m, n) = a.mid.shape[:-2], (a.mid.shape[-2], b.mid.shape[-1])
    count = math.prod(lead)
    flat = [x.reshape((count, *x.mid.shape[-2:])) for x in (a, b)]
    parts = [dot(*(Ball(x.mid[i], x.rad[i], x.lo[i]) for x in flat)) for i in range(count)]
    if not parts:
        return Ball.exact(np.zeros((*lead, m, n)))
    return Ball(*(np.stack([getattr(p, f) for p in parts]).reshape((*lead, m, n))
                  for f in ("mid", "rad", "lo")))


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
    rad = add_up(err, matmul_up(flat[2], np.ones(count)))
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
    s, e = two_sum(a.mid, b.mid)
    lo, err = sum_rounded(e, a.lo, b.lo)
    ra, rb = np.broadcast_arrays(a.rad, b.rad)
    rad = add_up(ra, rb, err)
    return Ball(s, np.where(np.isfinite(s) & np.isfinite(lo), rad, INF), lo)


def mul(a: Ball, b: Ball) -> Ball:
    """``a * b``: the high parts two-multiplied, the cross terms rounded and bounded."""
    p, e, safe = two_product(a.mid, b.mid)
    with np.errstate(invalid="ignore", over="ignore"):
        cross = [a.mid * b.lo, a.lo * b.mid, a.lo * b.lo]
    lo, err = sum_rounded(e, *cross)
    rounding = add_up(err, *(half_ulp(c) for c in cross))
    rad = add_up(mul_up(a.size, b.rad), mul_up(a.rad, b.size), rounding)
    return Ball(p, np.where(safe & np.isfinite(lo), rad, INF), lo)


def constant(value: Fraction) -> Ball:
    """A rational constant as a double-double, with a bound of what is left over."""
    mid = float(value)
    lo = float(value - Fraction(mid))
    rad = 0.0 if Fraction(mid) + Fraction(lo) == value else math.ulp(lo)
    return Ball(np.array(mid), np.array(rad), np.array(lo))




# ----------------------------------------------------------------------------------------
# layer_norm and rms_norm: the spec's own rules at the midpoint, a proven spread around it


def fractions_of(b: Ball) -> np.ndarray:
    """``mid + lo`` of every element, exactly, as an object array of Fractions."""
    out = np.empty(b.mid.shape, dtype=object)
    out.reshape(-1)[:] = [Fraction(p, q) for p, q in ratios_of(b)]
    return out


def ratios_of(b: Ball) -> list[tuple[int, int]]:
    """``mid + lo`` of every element (row-major) as an integer ratio ``(p, q)``, ``q`` a
    power of two: the two ratios over the larger denominator (not reduced)."""
    out = []
    for m, low in zip(b.mid.reshape(-1).tolist(), b.lo.reshape(-1).tolist(), strict=True):
        a, q = m.as_integer_ratio()
        if low:
            c, d = low.as_integer_ratio()
            a, q = (a * (d // q) + c, d) if d >= q else (a + c * (q // d), q)
        out.append((a, q))
    return out


def from_fractions(values: np.ndarray) -> Ball:
    """Exact values rounded to double-doubles: ``mid`` the value rounded to nearest,
    ``lo`` the rest rounded to nearest, so the radius is an ulp of ``lo`` (at least the
    smallest subnormal); a value beyond float64's range is :class:`NotEnclosed`."""
    flat = np.asarray(values, dtype=object).reshape(-1).tolist()
    pairs = [v.as_integer_ratio() if isinstance(v, float)
             else (int(v.numerator), int(v.denominator)) for v in flat]
    return from_ratios(pairs, np.shape(values))


def from_ratios(pairs: Sequence[tuple[int, int]], shape: Sequence[int]) -> Ball:
    """:func:`from_fractions` of the values ``p / q`` (``q > 0``, row-major): ``p / q``
    correctly rounded (as ``float`` of a Fraction is), the rest ``p/q - mid`` too."""
    mid, lo = np.empty(len(pairs)), np.empty(len(pairs))
    try:
        for i, (p, q) in enumerate(pairs):
            high = p / q
            hn, hd = high.as_integer_ratio()
            mid[i], lo[i] = high, (p * hd - hn * q) / (q * hd)
    except OverflowError:
        raise NotEnclosed("a norm's value beyond float64's range") from None
    rad = np.spacing(np.abs(lo))  # ulp(lo) >= twice the rounding of the rest
    return Ball(mid.reshape(shape), rad.reshape(shape), lo.reshape(shape))


# ----------------------------------------------------------------------------------------
# exp and 1/x as balls, for the gates' narrow enclosures (silu's, sigmoid's)

_LN2_HI = 6.93147180369123816490e-01
"""ln 2's leading 32 bits (fdlibm's ``ln2_hi``): ``k * _LN2_HI`` is exact for ``|k| < 2**21``."""
_LN2_LO = 1.90821492927058770002e-10
"""The next 53 bits of ln 2 (fdlibm's ``ln2_lo``)."""
_EXP_DEGREE = 16
_EXP_REACH = 0.35
"""The largest ``|r|`` the reduced argument may have (``ln 2 / 2 = 0.3466`` and the
rounding of ``k``); beyond it (never, for a rounded ``k``) the radius is infinite."""
_EXP_FLOOR = -700.0
"""Below it ``exp`` is enclosed as ``0 ± 2**-1000`` (``exp(-700) < 2**-1009``), so every
scaled result above it is a normal float64."""


def _constants() -> tuple[tuple[float, ...], float, float, float]:
    """The Taylor coefficients ``1/j!`` rounded (``c_1 .. c_N``), and upper bounds, each
    exact in rationals and then rounded up: ``|ln 2 - _LN2_HI - _LN2_LO|`` (ln 2 from
    mpmath at 300 bits, within ``2**-290``); the coefficients' error per ``r²``
    (``Σ_j |c_j - 1/j!| R^(j-2)``) and the truncation per ``r²`` (``R^(N-1) e^R / (N+1)!``,
    ``e^R <= 3/2``), ``R`` = :data:`_EXP_REACH`."""
    with mpmath.workprec(300):
        ln2 = of_mpf(mpmath.log(2))
    rest = abs(ln2 - Fraction(_LN2_HI) - Fraction(_LN2_LO)) + Fraction(1, 2**290)
    reach = Fraction(_EXP_REACH)
    coefficients = tuple(float(Fraction(1, math.factorial(j)))
                         for j in range(1, _EXP_DEGREE + 1))
    coef = sum((abs(Fraction(c) - Fraction(1, math.factorial(j))) * reach ** (j - 2)
                for j, c in enumerate(coefficients, start=1) if j >= 2), Fraction(0))
    trunc = reach ** (_EXP_DEGREE - 1) * Fraction(3, 2) / math.factorial(_EXP_DEGREE + 1)
    return coefficients, _float_up(rest), _float_up(coef), _float_up(trunc)


def _float_up(value: Fraction) -> float:
    """The least float64 at or above a non-negative rational."""
    out = float(value)
    return out if Fraction(out) >= value else math.nextafter(out, INF)


_EXP_COEFFICIENTS, _LN2_REST, _EXP_COEF_ERR, _EXP_TRUNC = _constants()


def _reduce(t: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(k, r, r_lo, err)``: ``t = k ln 2 + r + r_lo ± err`` (Cody and Waite, each step
    error-free but the last two tiny sums), ``k`` an integer, ``|t| <= 745``."""
    k = np.rint(t * (1 / math.log(2)))
    hi, low = two_sum(t, -(k * _LN2_HI))  # k * _LN2_HI exact: at most 43 bits
    p, p_low, _ = two_product(k, np.full_like(k, _LN2_LO))  # exact: |p| >= 1.9e-10 or 0
    r, r_rest = two_sum(hi, -p)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        first = r_rest + low
        r_lo = first - p_low
    err = add_up(half_ulp(first), half_ulp(r_lo), mul_up(np.abs(k), np.full_like(k, _LN2_REST)))
    return k, r, r_lo, err


def _exp_reduced(r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(s, l, err)``: ``|exp(r) - s - l| <= err`` for ``|r| <= _EXP_REACH``; Horner's rule
    on ``(exp(r) - 1)/r`` with a running bound of every rounding, the last product and sum
    error-free."""
    size = np.abs(r)
    y = np.full_like(r, _EXP_COEFFICIENTS[-1])
    err = np.zeros_like(r)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        for c in reversed(_EXP_COEFFICIENTS[:-1]):
            p = y * r
            y = p + c
            err = add_up(mul_up(err, size), half_ulp(p), half_ulp(y))
        t, t_low, safe = two_product(y, r)
        s, s_low = two_sum(np.ones_like(r), t)
        low = s_low + t_low
    square = mul_up(size, size)
    err = add_up(mul_up(err, size), np.where(safe, 0.0, half_ulp(t)), half_ulp(low),
                 mul_up(square, np.full_like(r, _EXP_COEF_ERR)),
                 mul_up(square, np.full_like(r, _EXP_TRUNC)))
    return s, low, err


def exp_nonpositive(t: np.ndarray) -> Ball:
    """A ball around ``exp(t)`` for float64 ``t <= 0``, about half an ulp wide (its own
    argument reduction and polynomial, every rounding bounded, no libm trusted): ``exp(t)
    = 2**k exp(r) exp(r_lo)``, ``exp(r_lo) = 1 + r_lo ± r_lo²``; below :data:`_EXP_FLOOR`,
    ``0 ± 2**-1000``."""
    low_end = t < _EXP_FLOOR
    t = np.where(low_end, 0.0, t)
    k, r, r_lo, r_err = _reduce(t)
    s, low, err = _exp_reduced(r)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        moved = s * r_lo
        lo = low + moved
    tail = np.abs(r_lo) + r_err  # |r_true - r| <= tail, far below 2**-40
    rad = add_up(mul_up(err, np.full_like(t, 1 + 2.0**-39)), mul_up(np.abs(low), np.abs(r_lo)),
                 half_ulp(moved), half_ulp(lo), mul_up(4 * np.abs(s), mul_up(tail, tail)),
                 mul_up(4 * np.abs(s), r_err))
    reached = (np.abs(r) + np.abs(r_lo) <= _EXP_REACH) & (tail <= 2.0**-40)
    ks = k.astype(np.int64)
    mid = np.ldexp(s, ks)  # exact: 2**k s is normal above the floor
    lo_scaled = np.ldexp(lo, ks)
    rad = add_up(next_up(np.ldexp(rad, ks)),
                 np.where(np.abs(lo_scaled) < 2.0**-1022, 2.0**-1074, 0.0))
    rad = np.where(reached, rad, INF)
    return Ball(np.where(low_end, 0.0, mid), np.where(low_end, 2.0**-1000, rad),
                np.where(low_end, 0.0, lo_scaled))


def reciprocal(d: Ball) -> Ball:
    """A ball around ``1/x`` for every ``x`` in ``d`` (infinite radius where ``d`` is not
    above 1/2): ``q = 1/mid``, one Newton step ``q (1 + ρ)`` with ``ρ = 1 - q(mid + lo)`` as
    a ball, ``|1/v - q(1 + ρ)| <= 2q ρ²`` for ``|ρ| <= 1/2``, and ``rad/low²`` for the
    radius, ``low`` a lower bound of ``d``."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        q = 1 / d.mid
    exact_q = Ball.exact(q)
    product = mul(exact_q, Ball(d.mid, np.zeros_like(d.mid), d.lo))
    rho = add(Ball.exact(np.ones_like(q)), Ball(-product.mid, product.rad, -product.lo))
    out = add(exact_q, mul(exact_q, rho))
    reach = rho.size
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        low = np.nextafter(d.mid - add_up(np.abs(d.lo), d.rad), -INF)
        square = np.nextafter(low * low, 0.0)
        moved = next_up(d.rad / square)
    rad = add_up(out.rad, mul_up(2 * np.abs(q), mul_up(reach, reach)), moved)
    fine = (low >= 0.5) & (reach <= 0.5)
    return Ball(out.mid, np.where(fine, rad, INF), out.lo)


def mul_bounded(a: Ball, b: Ball) -> Ball:
    """:func:`mul`, or ``0 ± |a||b|`` (sizes, rounded up) where the product leaves the
    two-product's range (a tiny product, or a huge factor)."""
    product = mul(a, b)
    zero = np.zeros_like(product.mid)
    return select(np.isfinite(product.rad), product,
                  Ball(zero, mul_up(a.size, b.size) + zero, zero))


def select(where: np.ndarray, a: Ball, b: Ball) -> Ball:
    """``a`` where ``where`` holds, ``b`` elsewhere, element by element."""
    return Ball(*(np.where(where, getattr(a, f), getattr(b, f)) for f in ("mid", "rad", "lo")))


def recentred(mid: np.ndarray, rad: np.ndarray, tight: Ball) -> Ball:
    """The ball ``mid ± rad`` (``lo`` 0), or, element by element where that is no wider
    (``|lo| + rad'`` at most ``rad``), ``tight`` written around the same ``mid``: ``lo`` is
    ``tight``'s centre minus ``mid``, summed with its rounding bounded. So every midpoint is
    ``mid`` still, and every element's distance ``|lo| + rad`` from it no larger."""
    gap, gap_low = two_sum(tight.mid, -mid)
    lo, err = sum_rounded(gap, gap_low, tight.lo)
    spread = add_up(tight.rad, err)
    take = np.isfinite(spread) & np.isfinite(lo) & (add_up(np.abs(lo), spread) <= rad)
    return Ball(mid, np.where(take, spread, rad), np.where(take, lo, 0.0))


def point(a: Ball) -> tuple[np.ndarray, np.ndarray]:
    """``(v, d)``: ``v`` the float64 ``mid + lo`` rounds to, ``d >= |x - v|`` for every
    ``x`` in the ball (its radius and what the rounding left, exactly)."""
    value, rest = two_sum(a.mid, a.lo)
    return value, add_up(a.rad, np.abs(rest))
