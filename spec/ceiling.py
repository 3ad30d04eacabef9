"""Exact rationals rounded up to float64 in bulk: what :func:`resverify.spec.rounding.up`
gives one value at a time, for a whole array.

Why: the budget rules read sizes from the trace (``up(|v| + e)`` of a softmax's value, the
centred rows of a norm) element by element, in :class:`fractions.Fraction` arithmetic; on
a real layer that was most of the op-by-op judgement's time. The answer is a function of
the exact value only (the smallest float64 at least it), so any exact way of computing it
gives the same bits: here the values are read as integer ratios (a row of them over one
common denominator) and each is rounded by CPython's correctly rounded ``int / int`` and one
exact integer comparison, or, where the values are float64 already, with NumPy and Knuth's
two-sum. ``tests/spec/test_ceiling.py`` proves each function equal, bit for bit, to the
per-element Fraction form it replaces.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.ball import two_sum
from resverify.spec.rounding import INF, up


def ratio(value: Any) -> tuple[int, int]:
    """``(numerator, denominator > 0)`` of a Fraction, int or finite float, exactly."""
    if isinstance(value, float):
        return value.as_integer_ratio()
    return int(value.numerator), int(value.denominator)


def up_ratio(p: int, q: int) -> float:
    """The smallest float64 >= ``p / q`` (``q > 0``; ``inf`` beyond float64's range): the
    correctly rounded quotient, one ulp up where it is below the exact value."""
    try:
        f = p / q
    except OverflowError:
        return INF
    n, d = f.as_integer_ratio()
    return f if n * q >= p * d else math.nextafter(f, INF)


def up_abs_plus(values: np.ndarray, err: Fraction) -> np.ndarray:
    """``up(|v| + err)`` of every element (Fractions, ints or floats; ``err >= 0``), as a
    float64 array of ``values``' shape."""
    arr = np.asarray(values)
    if arr.dtype == np.float64 and np.isfinite(arr).all():
        return _floats_abs_plus(arr, err)
    ep, eq = ratio(err)
    flat = arr.reshape(-1).tolist()
    if ep == 0:
        out = [up_ratio(abs(p), q) for p, q in map(ratio, flat)]
    else:
        out = [up_ratio(abs(p) * eq + ep * q, q * eq) for p, q in map(ratio, flat)]
    return np.array(out, dtype=np.float64).reshape(arr.shape)


def _floats_abs_plus(arr: np.ndarray, err: Fraction) -> np.ndarray:
    """:func:`up_abs_plus` of finite float64 values: ``|v| + e`` two-summed where ``err`` is
    a float64 ``e``, one ulp up where the rounding lost a positive part."""
    size = np.abs(arr)
    if err == 0:
        return size + 0.0  # -0.0 is 0
    e = up(err)
    if e == INF:  # beyond float64's range: so is every sum
        return np.full(arr.shape, INF)
    if Fraction(e) != err:  # not a float64: the per-element form
        return np.array([up(abs(Fraction(v)) + err) for v in arr.reshape(-1).tolist()],
                        dtype=np.float64).reshape(arr.shape)
    s, t = two_sum(size, np.full(arr.shape, e))
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(s), INF, np.where(t > 0, np.nextafter(s, INF), s))


def row_moments(a: np.ndarray, centred: bool) -> tuple[np.ndarray, np.ndarray]:
    """For exact rows ``a`` (Fractions, ints or floats, shape ``(..., n)``, ``n >= 1``):
    ``up(|c_i|)`` of every element and ``up(Σ c_i² / n)`` per row (shape ``(..., 1)``),
    ``c`` the row less its mean where ``centred``, the row itself where not. Each row is
    read over one common denominator ``D``: ``c_i = (n a_i D - Σ a D) / (n D)``."""
    n = a.shape[-1]
    rows = a.reshape(-1, n).tolist()
    mags: list[float] = []
    squares: list[float] = []
    for row in rows:
        pairs = [ratio(v) for v in row]
        den = math.lcm(*(q for _, q in pairs))
        nums = [p * (den // q) for p, q in pairs]
        if centred:
            total = sum(nums)
            nums = [n * v - total for v in nums]
            den *= n
        mags.extend(up_ratio(abs(v), den) for v in nums)
        squares.append(up_ratio(sum(v * v for v in nums), den * den * n))
    return (np.array(mags, dtype=np.float64).reshape(a.shape),
            np.array(squares, dtype=np.float64).reshape((*a.shape[:-1], 1)))


def row_distances(x: np.ndarray, axis: int) -> np.ndarray | None:
    """``max x - x`` along ``axis`` for a finite float64 ``x``, as float64 subtraction
    rounds it (0 where equal), or None where ``x`` is not such an array (the caller's exact
    path): what ``up(-(x - max x))`` gives on float64 values, ``x - max x`` rounded."""
    if x.dtype != np.float64 or not np.isfinite(x).all() or not x.shape[axis]:
        return None
    with np.errstate(over="ignore"):
        out = np.max(x, axis=axis, keepdims=True) - x + 0.0
    return out if np.isfinite(out).all() else None


def up_negated(values: np.ndarray) -> np.ndarray:
    """``up(-v)`` of every element (Fractions, ints or floats), as a float64 array of
    ``values``' shape."""
    flat = np.asarray(values).reshape(-1).tolist()
    return np.array([up_ratio(-p, q) for p, q in map(ratio, flat)],
                    dtype=np.float64).reshape(np.shape(values))
