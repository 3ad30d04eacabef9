"""Exact arithmetic on NumPy object arrays of Fractions, tanh, sigmoid and exp enclosed with mpmath.

The exact rules of every op (in :mod:`resverify.spec.ops`) are written with these
helpers; :mod:`resverify.spec.exact` runs them. Every op except ``tanh`` maps rationals to
rationals and stays in :class:`fractions.Fraction` arithmetic (NumPy object arrays give
NumPy's own shapes and broadcasting, rank 0 and empty axes included). ``tanh`` is enclosed
with mpmath's interval arithmetic (outward-rounded ``exp``) at a working precision that
grows until the enclosure is narrower than ``2**-TANH_PRECISION_BITS`` relative to the
value; the midpoint becomes the Fraction carried on, half the width its error.

``layer_norm`` and ``rms_norm`` divide by a square root, ``1/sqrt(w)`` for a rational
``w > 0``: :func:`exact_rsqrt` encloses it with integer square roots (``math.isqrt`` is
the exact floor, so the enclosure is rigorous at any size) to the same relative
``2**-TANH_PRECISION_BITS``, and a short dyadic inside it is carried on, its distance to
either end its error.

The error helpers (:func:`mag`, :func:`times`) bound how such approximation errors spread:
one absolute bound per array, ``|ab - a'b'| <= |a'|e_b + |b'|e_a + e_a e_b``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
from mpmath import libmp

from resverify.spec.errors import InvalidRequest, Shape

__all__ = ["exact_rsqrt"]

TANH_PRECISION_BITS = 200
"""Each tanh element is enclosed to within ``2**-200`` of its own magnitude (relative)."""

ZERO = Fraction(0)
ZERO_OBJ = np.array(ZERO, dtype=object)
Arr = np.ndarray


def fraction(value: object) -> Fraction:
    """One finite number as an exact Fraction (NaN, infinities and non-numbers refused)."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise InvalidRequest(f"expected a number, got {value!r}")
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if number != number or number in (float("inf"), float("-inf")):
            raise InvalidRequest(f"the exact interpreter needs finite values, got {number!r}")
        return Fraction(number)
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    if isinstance(value, str):
        return Fraction(value)
    raise InvalidRequest(f"expected a number, got {type(value).__name__} {value!r}")


def objects(values: Sequence[object], shape: Shape) -> Arr:
    """An object array of ``shape`` holding ``values`` (in row-major order)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out.reshape(shape)


def obj(value: Any) -> Arr:
    """``value`` as an object array (NumPy's scalar results become rank-0 arrays)."""
    return np.asarray(value, dtype=object)


def as_fractions(array: object) -> Arr:
    """An object array of exact Fractions with the same shape (-0.0 becomes Fraction(0)).

    Floats convert exactly (every finite float is a dyadic rational); NaN and infinities
    are refused with :class:`~resverify.spec.errors.InvalidRequest`.
    """
    raw = array if isinstance(array, np.ndarray) else np.array(array, dtype=object)
    return objects([fraction(v) for v in raw.reshape(-1).tolist()], raw.shape)


def normalize(array: Arr) -> Arr:
    """Object arrays whose elements are all Fractions (NumPy's empty sums yield int 0)."""
    flat = np.asarray(array, dtype=object).reshape(-1).tolist()
    return objects([v if isinstance(v, Fraction) else Fraction(v) for v in flat],
                   np.shape(array))


def _scaled(array: Arr) -> tuple[Arr, int] | None:
    """``(ints, d)`` with ``array == ints / d`` when every element is a Fraction or int."""
    flat = array.reshape(-1).tolist()
    if not all(isinstance(v, (Fraction, int)) for v in flat):
        return None
    d = math.lcm(*(v.denominator for v in flat)) if flat else 1
    ints = [v.numerator * (d // v.denominator) for v in flat]
    return objects(ints, array.shape), d


def matmul(a: Arr, b: Arr) -> Arr:
    """``a @ b``; on rationals, done on integers over a common denominator (no gcd per step)."""
    sa, sb = _scaled(a), _scaled(b)
    if sa is None or sb is None:
        return obj(a @ b)
    product = obj(sa[0] @ sb[0])
    d = sa[1] * sb[1]
    return objects([Fraction(v, d) for v in product.reshape(-1).tolist()], product.shape)


# ----------------------------------------------------------------------------------------
# tanh, enclosed


def _to_fraction(raw: tuple[int, int, int, int]) -> Fraction:
    p, q = libmp.to_rational(raw)
    return Fraction(p, q)


def of_mpf(value: mpmath.mpf) -> Fraction:
    """A finite mpmath number as the Fraction it is exactly."""
    return _to_fraction(value._mpf_)


@functools.lru_cache(maxsize=1 << 16)
def exact_tanh(x: Fraction) -> tuple[Fraction, Fraction]:
    """``(t, e)`` with ``|tanh(x) - t| <= e <= |t| * 2**-TANH_PRECISION_BITS``.

    Small and large arguments use bounds that need no evaluation:
    ``x - x**3/3 <= tanh x <= x`` for x >= 0, and ``0 < 1 - tanh x < 2 exp(-2x) < 2**-700``
    for x >= 256. Between, ``tanh x = 1 - 2/(exp(2x) + 1)`` with outward rounding, redone at
    double the precision until the enclosure is narrow enough. The result is cached.
    """
    if x < 0:
        t, e = exact_tanh(-x)
        return -t, e
    if x == 0:
        return ZERO, ZERO
    if x < Fraction(1, 2**TANH_PRECISION_BITS):
        return x, x**3 / 3
    if x >= 256:
        return Fraction(1), Fraction(1, 2**700)
    prec = TANH_PRECISION_BITS + 24 + max(0, -x.numerator.bit_length() + x.denominator.bit_length())
    while True:
        lo, hi = _tanh_enclosure(x, prec)
        mid, half = (lo + hi) / 2, (hi - lo) / 2
        if half <= abs(mid) / 2**TANH_PRECISION_BITS:
            return mid, half
        prec *= 2


def _tanh_enclosure(x: Fraction, prec: int) -> tuple[Fraction, Fraction]:
    """Bounds on tanh(x) for x > 0, as ``1 - 2/(exp(2x) + 1)`` with every step rounded outward.

    This is mpmath's interval ``exp`` (``mpf_exp`` rounded down and up) without the
    interval-object overhead; the expression is increasing in exp(2x), so the lower bound
    uses only lower bounds of its increasing parts and upper bounds of its decreasing ones.
    """
    down, up = libmp.round_floor, libmp.round_ceiling
    one, two = libmp.fone, libmp.from_int(2)
    bounds = []
    for rnd, other in ((down, up), (up, down)):
        twice = libmp.from_rational(2 * x.numerator, x.denominator, prec, rnd)
        grown = libmp.mpf_add(libmp.mpf_exp(twice, prec, rnd), one, prec, rnd)
        share = libmp.mpf_div(two, grown, prec, other)
        bounds.append(_to_fraction(libmp.mpf_sub(one, share, prec, rnd)))
    return bounds[0], bounds[1]


def tanh_error(out: Arr) -> Fraction:
    """The largest enclosure half-width among tanh values just computed (cached)."""
    return max((_tanh_value_error(v) for v in out.reshape(-1).tolist()), default=ZERO)


def _tanh_value_error(t: Fraction) -> Fraction:
    """A bound for the error of a tanh value t: ``|t| 2**-P`` (or ``2**-700`` at ±1)."""
    if abs(t) == 1:
        return Fraction(1, 2**700)
    return abs(t) / 2**TANH_PRECISION_BITS


# ----------------------------------------------------------------------------------------
# sigmoid, enclosed


@functools.lru_cache(maxsize=1 << 16)
def exact_sigmoid(x: Fraction) -> tuple[Fraction, Fraction]:
    """``(s, e)`` with ``|σ(x) - s| <= e``, ``σ(x) = 1/(1 + exp(-x))``, and
    ``e <= s * 2**-TANH_PRECISION_BITS`` for ``-1100 < x < 512``.

    ``1/(1 + exp(-x))`` never cancels, so the enclosure is relative everywhere; beyond that
    range ``σ(x) < exp(x) < 2**-1100`` (``s = 0``, far below every dtype's smallest
    subnormal) or ``1 - σ(x) < exp(-x) < 2**-700`` (``s = 1``), which bounds it without an
    evaluation (and without a Fraction of a million digits). Redone at double the
    precision until narrow enough; the result is cached.
    """
    if x == 0:
        return Fraction(1, 2), ZERO
    if x >= 512:
        return Fraction(1), Fraction(1, 2**700)
    if x <= -1100:
        return ZERO, Fraction(1, 2**1100)
    prec = TANH_PRECISION_BITS + 40
    while True:
        lo, hi = _sigmoid_enclosure(x, prec)
        mid, half = (lo + hi) / 2, (hi - lo) / 2
        if half <= mid / 2**TANH_PRECISION_BITS:
            return mid, half
        prec *= 2


def _sigmoid_enclosure(x: Fraction, prec: int) -> tuple[Fraction, Fraction]:
    """Bounds on σ(x) as ``1/(1 + exp(-x))`` with every step rounded outward: the lower
    bound divides by an upper bound of ``1 + exp(-x)``, the upper by a lower one."""
    bounds = []
    for rnd, other in ((libmp.round_floor, libmp.round_ceiling),
                       (libmp.round_ceiling, libmp.round_floor)):
        minus = libmp.from_rational(-x.numerator, x.denominator, prec, other)
        grown = libmp.mpf_add(libmp.mpf_exp(minus, prec, other), libmp.fone, prec, other)
        bounds.append(_to_fraction(libmp.mpf_div(libmp.fone, grown, prec, rnd)))
    return bounds[0], bounds[1]


def sigmoid_error(out: Arr) -> Fraction:
    """The largest enclosure half-width among sigmoid values just computed."""
    return max((_sigmoid_value_error(v) for v in out.reshape(-1).tolist()), default=ZERO)


def _sigmoid_value_error(s: Fraction) -> Fraction:
    """A bound for the error of a sigmoid value s (:func:`exact_sigmoid`)."""
    if s == 0:
        return Fraction(1, 2**1100)
    if s == 1:
        return Fraction(1, 2**700)
    return abs(s) / 2**TANH_PRECISION_BITS


# ----------------------------------------------------------------------------------------
# exp, enclosed

EXP_LIMIT = 1100
"""exp is carried for ``-1100 < x < 1100``: below, ``exp(x) < 2**-1586``, far under every
dtype's smallest subnormal, carried as 0; from 1100 on, ``exp(x) > 2**1586`` overflows every
dtype and the interpreter refuses it (its value would be a Fraction of ``x/ln 2`` bits)."""


@functools.lru_cache(maxsize=1 << 16)
def exact_exp(x: Fraction) -> tuple[Fraction, Fraction]:
    """``(v, e)`` with ``|exp(x) - v| <= e``, ``e <= v * 2**-TANH_PRECISION_BITS`` for
    ``-1100 < x < 1100`` (``v = 0``, ``e = 2**-1100`` below; InvalidRequest from 1100 on).

    mpmath's ``exp`` rounded down at an argument rounded down, and up at one rounded up
    (exp is increasing), redone at double the precision until narrow enough; cached.
    """
    if x == 0:
        return Fraction(1), ZERO
    if x <= -EXP_LIMIT:
        return ZERO, Fraction(1, 2**1100)
    if x >= EXP_LIMIT:
        raise InvalidRequest(f"exp({float(x)!r}) exceeds 2**1586 and overflows every dtype: "
                             f"the exact interpreter carries exp below {EXP_LIMIT} only")
    prec = TANH_PRECISION_BITS + 40
    while True:
        lo, hi = (_to_fraction(libmp.mpf_exp(
            libmp.from_rational(x.numerator, x.denominator, prec, rnd), prec, rnd))
            for rnd in (libmp.round_floor, libmp.round_ceiling))
        mid, half = (lo + hi) / 2, (hi - lo) / 2
        if half <= mid / 2**TANH_PRECISION_BITS:
            return mid, half
        prec *= 2


def exp_error(out: Arr) -> Fraction:
    """The largest enclosure half-width among exp values just computed (:func:`exact_exp`)."""
    return max((abs(v) / 2**TANH_PRECISION_BITS if v else Fraction(1, 2**1100)
                for v in out.reshape(-1).tolist()), default=ZERO)


# ----------------------------------------------------------------------------------------
# the normal distribution of GELU, enclosed

GUARD_BITS = 64
"""mpmath's ``erfc`` and ``pi`` are evaluated this many bits beyond the claimed width
(not rounded outward as ``exp`` is: an estimate with a wide margin, checked in the tests
against twice the precision)."""


def _constant(value: Any) -> Fraction:
    """A positive constant of mpmath's (a function of the working precision) as the Fraction
    of its value at ``TANH_PRECISION_BITS + GUARD_BITS`` bits."""
    with mpmath.workprec(TANH_PRECISION_BITS + GUARD_BITS):
        return of_mpf(mpmath.mpf(value()))


SQRT_2_OVER_PI = _constant(lambda: mpmath.sqrt(2 / mpmath.pi))
"""``√(2/π)`` (the tanh form's constant) within ``2**-TANH_PRECISION_BITS`` of itself."""
INV_SQRT_2PI = _constant(lambda: 1 / mpmath.sqrt(2 * mpmath.pi))
"""``1/√(2π)`` (the normal density's constant) within ``2**-TANH_PRECISION_BITS`` of itself."""


@functools.lru_cache(maxsize=1 << 16)
def exact_normal_cdf(x: Fraction) -> Fraction:
    """``Φ(x) = erfc(-x/√2)/2`` within ``Φ(x) 2**-TANH_PRECISION_BITS`` for ``|x| < 64``
    (erfc never cancels, so the width is relative on both sides); 0 below (``Φ(x) <
    2**-2900``) and 1 above (``1 - Φ(x) < 2**-2900``). Cached."""
    if x <= -64:
        return ZERO
    if x >= 64:
        return Fraction(1)
    with mpmath.workprec(TANH_PRECISION_BITS + GUARD_BITS):
        return of_mpf(mpmath.erfc(-mpmath.mpf(x.numerator) / x.denominator
                                  / mpmath.sqrt(2)) / 2)


# ----------------------------------------------------------------------------------------
# 1/sqrt, enclosed


@functools.lru_cache(maxsize=1 << 16)
def exact_rsqrt(w: Fraction) -> tuple[Fraction, Fraction]:
    """``(r, e)`` with ``|1/sqrt(w) - r| <= e <= r * 2**-TANH_PRECISION_BITS`` for ``w > 0``.

    For ``w = p/q``, ``1/sqrt(w) = sqrt(p q) / p``; with ``k = isqrt(p q 4**K)``,
    ``k <= 2**K sqrt(p q) < k + 1``, so ``[k, k + 1] / (p 2**K)`` encloses it, narrower
    than ``2**-K`` of it (``k >= 2**K``). The midpoint carried on is that interval's centre
    rounded to a dyadic of about ``TANH_PRECISION_BITS + 8`` significant bits, so that a
    stack of norms grows its numbers by a fixed number of bits per layer rather than
    doubling them; ``e`` covers the interval and the rounding, exactly. A perfect square
    ``p q`` gives the exact value (``w = 1/4``: ``r = 2``, ``e = 0``).
    """
    if w <= 0:
        raise InvalidRequest(f"1/sqrt needs a positive argument, got {w}")
    p, q = w.numerator, w.denominator
    if math.isqrt(p * q) ** 2 == p * q:
        return Fraction(math.isqrt(p * q), p), ZERO
    shift = TANH_PRECISION_BITS + 4
    k = math.isqrt((p * q) << (2 * shift))
    low, high = Fraction(k, p << shift), Fraction(k + 1, p << shift)
    bits = TANH_PRECISION_BITS + 8 - (low.numerator.bit_length() - low.denominator.bit_length())
    grid = Fraction(1, 2**bits) if bits >= 0 else Fraction(2 ** -bits)
    mid = round((low + high) / 2 / grid) * grid
    return mid, max(high - mid, mid - low)


# ----------------------------------------------------------------------------------------
# error bounds of approximate elements (only tanh makes them non-zero)


def mag(array: Arr) -> Fraction:
    """The largest magnitude in ``array`` (0 for an empty one)."""
    if array.dtype == np.float64:  # the fast oracle's stand-ins: exact in float64
        return float(np.max(np.abs(array))) if array.size else ZERO  # type: ignore[return-value]
    flat = array.reshape(-1).tolist()
    return max((abs(v) for v in flat), default=ZERO)


def times(ma: Fraction, ea: Fraction, mb: Fraction, eb: Fraction) -> Fraction:
    """Error of a product of approximations with magnitudes ma, mb and errors ea, eb."""
    return ma * eb + mb * ea + ea * eb
