"""A norm's exact rows over one common denominator: what layer_norm's and rms_norm's
enclosures and budget read from a row, in integer arithmetic.

Why: the enclosures' centres are the spec's exact value and VJP at the ball's midpoint,
rounded to a double-double, and the budget reads the centred row and its mean square from
the trace; in :class:`fractions.Fraction` arithmetic every step reduces by a gcd, which was
most of a real layer's judgement. A row ``a`` is read once as integers over one common
denominator ``D`` (its centred values ``c_i = (n a_i D - Σ a D) / (n D)``), and every value
derived from it is one integer ratio, rounded by CPython's correctly rounded ``int / int``:
the same exact rationals as the Fraction form, rounded the same way, so every ball and
bound is bit for bit what it was (``tests/spec/test_norm_rows.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from resverify.spec.ball import NotEnclosed, from_ratios
from resverify.spec.ceiling import ratio, up_ratio
from resverify.spec.rational import exact_rsqrt


@dataclass(frozen=True)
class Row:
    """One row's (centred) values ``nums[i] / den``, ``den > 0``."""

    nums: list[int]
    den: int

    def square_sum(self) -> int:
        return sum(v * v for v in self.nums)

    def rsqrt(self, eps: Fraction) -> Fraction:
        """The spec's ``r``: :func:`exact_rsqrt` of ``Σ c² / n + ε``."""
        n, (ep, eq) = len(self.nums), ratio(eps)
        scale = self.den * self.den * n
        return exact_rsqrt(Fraction(self.square_sum() * eq + ep * scale, scale * eq))[0]


def rows_of(pairs: Sequence[tuple[int, int]], n: int, centred: bool) -> list[Row]:
    """The rows of ``n`` values ``p / q`` each (row-major), centred where asked."""
    out = []
    for start in range(0, len(pairs), n):
        row = pairs[start:start + n]
        den = math.lcm(*(q for _, q in row))
        nums = [p * (den // q) for p, q in row]
        if centred:
            total = sum(nums)
            nums, den = [n * v - total for v in nums], den * n
        out.append(Row(nums, den))
    return out


def row_moments(a: np.ndarray, centred: bool) -> tuple[np.ndarray, np.ndarray]:
    """For exact rows ``a`` (Fractions or ints, shape ``(..., n)``, ``n >= 1``): ``up(|c_i|)``
    of every element and ``up(Σ c_i² / n)`` per row (shape ``(..., 1)``), ``c`` the row less
    its mean where ``centred``, the row itself where not (``inf`` beyond float64's range)."""
    n = a.shape[-1]
    rows = rows_of([ratio(v) for v in a.reshape(-1).tolist()], n, centred)
    mags = [up_ratio(abs(v), row.den) for row in rows for v in row.nums]
    squares = [up_ratio(row.square_sum(), row.den * row.den * n) for row in rows]
    return (np.array(mags, dtype=np.float64).reshape(a.shape),
            np.array(squares, dtype=np.float64).reshape((*a.shape[:-1], 1)))


def centre(rows: Sequence[Row], eps: Fraction, shape: Sequence[int]) -> tuple[
        np.ndarray, np.ndarray, np.ndarray]:
    """``(mid, rad, lo)`` of the spec's value ``y_i = c_i r`` of every row, rounded to a
    double-double as :func:`~resverify.spec.ball.from_fractions` rounds it."""
    pairs = []
    for row in rows:
        r = row.rsqrt(eps)
        q = row.den * r.denominator
        pairs += [(v * r.numerator, q) for v in row.nums]
    ball = from_ratios(pairs, shape)
    return ball.mid, ball.rad, ball.lo


def centre_vjp(rows: Sequence[Row], g: Sequence[tuple[int, int]], eps: Fraction,
               centred: bool, shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray,
                                                             np.ndarray]:
    """``(mid, rad, lo)`` of the spec's VJP ``ā = r (ḡ - y Σ ḡ y / n - Σ ḡ / n)`` (the last
    term where ``centred``) of every row for the cotangent ``g`` (integer ratios, row-major),
    ``y = c r``: with ``y_i = Y_i / E`` and ``ḡ_i = G_i / D_g`` over the row,
    ``ā_i = r (G_i E² n - Y_i Σ G Y - Σ G E²) / (D_g E² n)``."""
    pairs = []
    for row, cot in zip(rows, rows_of(g, len(rows[0].nums), False), strict=True):
        n, r = len(row.nums), row.rsqrt(eps)
        e = row.den * r.denominator
        ys = [v * r.numerator for v in row.nums]
        dot = sum(gi * yi for gi, yi in zip(cot.nums, ys, strict=True))
        e2n = e * e * n
        shift = sum(cot.nums) * e * e if centred else 0
        q = r.denominator * cot.den * e2n
        pairs += [(r.numerator * (gi * e2n - yi * dot - shift), q)
                  for gi, yi in zip(cot.nums, ys, strict=True)]
    ball = from_ratios(pairs, shape)
    return ball.mid, ball.rad, ball.lo


def spread_statistics(rows: Sequence[Row], shape: Sequence[int]) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """``(σ, |c|)`` as :func:`~resverify.spec.ops.layer_norm.norm_spread` reads them: per
    row (shape ``(..., 1)``) a float64 at most the square root of the variance ``Σ c²/n``
    (the variance rounded down, its square root one ulp down, 0 where it is 0), and every
    ``|c_i|`` rounded to nearest; :class:`NotEnclosed` beyond float64's range."""
    sigma, c_abs = [], []
    try:
        for row in rows:
            p, q = row.square_sum(), row.den * row.den * len(row.nums)
            low = p / q
            ln, ld = low.as_integer_ratio()
            low = math.nextafter(low, 0.0) if ln * q > p * ld else low
            sigma.append(math.nextafter(math.sqrt(low), 0.0) if low > 0 else 0.0)
            c_abs += [abs(v) / row.den for v in row.nums]
    except OverflowError:
        raise NotEnclosed("a norm's variance, centred value or 1/sqrt(ε) beyond float64"
                          ) from None
    return (np.array(sigma).reshape((*shape[:-1], 1)),
            np.array(c_abs, dtype=np.float64).reshape(shape))
