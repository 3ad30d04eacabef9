"""Chi-square acceptance regions with a stated false-alarm probability, computed with mpmath.

If ``y_1..y_n`` are independent ``N(0, v)``, then ``S = Σ y_i² / v`` has the chi-square
distribution with n degrees of freedom: ``P(S <= q) = P(n/2, q/2)``, the regularized
lower incomplete gamma function. :func:`acceptance` returns ``[q_lo, q_hi]`` with
``P(S < q_lo) <= p/2`` and ``P(S > q_hi) <= p/2`` (bisection at 40 digits, each end
rounded outward), so a test that rejects only when S is outside has false-alarm
probability at most ``p`` (1e-9 by default). :func:`miss_probability` is the chance that
``r·S`` still lands inside, used to show that a wrong variance (ratio ``r``) is detected.

:func:`shifted_acceptance` does the same for ``S = |μ + g|²`` with ``g`` standard normal in
n dimensions and ``|μ|² = λ`` (noncentral chi-square): with ``z = g·μ/|μ|``,
``S = (√λ + z)² + C`` where ``C`` is chi-square(n-1) and independent of z, so splitting the
false alarm in halves between ``z²`` (chi-square(1), upper tail only) and ``C`` bounds it
without the noncentral distribution function (a union bound: slightly conservative).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import mpmath

__all__ = []

FALSE_ALARM = Fraction(1, 10**9)


def _cdf(n: int, q: mpmath.mpf) -> mpmath.mpf:
    return mpmath.gammainc(mpmath.mpf(n) / 2, 0, q / 2, regularized=True)


def _solve(n: int, target: mpmath.mpf, lo: mpmath.mpf, hi: mpmath.mpf) -> mpmath.mpf:
    """q in [lo, hi] with cdf(q) = target (the cdf increases), by 200 bisection steps."""
    for _ in range(200):
        mid = (lo + hi) / 2
        if _cdf(n, mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@functools.lru_cache(maxsize=64)
def acceptance(n: int, false_alarm: Fraction = FALSE_ALARM) -> tuple[float, float]:
    """``(q_lo, q_hi)``: chi-square(n) lies outside with probability at most ``false_alarm``."""
    with mpmath.workdps(40):
        half = mpmath.mpf(false_alarm.numerator) / false_alarm.denominator / 2
        top = mpmath.mpf(n) * 10 + 1000
        q_lo = _solve(n, half, mpmath.mpf(0), mpmath.mpf(n))
        q_hi = _solve(n, 1 - half, mpmath.mpf(n), top)
        lo, hi = float(q_lo) * (1 - 1e-12), float(q_hi) * (1 + 1e-12)
        assert _cdf(n, mpmath.mpf(lo)) <= half and 1 - _cdf(n, mpmath.mpf(hi)) <= half
        return lo, hi


def miss_probability(n: int, ratio: Fraction, false_alarm: Fraction = FALSE_ALARM) -> float:
    """``P(q_lo <= ratio·S <= q_hi)`` for chi-square(n) S: a wrong variance going unnoticed."""
    lo, hi = acceptance(n, false_alarm)
    with mpmath.workdps(40):
        r = mpmath.mpf(ratio.numerator) / ratio.denominator
        return float(_cdf(n, mpmath.mpf(hi) / r) - _cdf(n, mpmath.mpf(lo) / r))


def shifted_acceptance(n: int, shift: Fraction, false_alarm: Fraction = FALSE_ALARM
                       ) -> tuple[float, float]:
    """``(q_lo, q_hi)``: ``|μ + g|²`` (g standard normal in n >= 2 dimensions, ``|μ|² = shift``)
    lies outside with probability at most ``false_alarm``."""
    z = math.sqrt(acceptance(1, false_alarm)[1])  # P(z² > q) <= false_alarm / 2
    lo, hi = acceptance(n - 1, false_alarm / 2)
    root = math.sqrt(shift)
    return ((max(root - z, 0.0) ** 2 + lo) * (1 - 1e-12), ((root + z) ** 2 + hi) * (1 + 1e-12))
