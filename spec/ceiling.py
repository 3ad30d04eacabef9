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


def row_distances(x: np.ndarray, axis: int) -> np.ndarray | None:
    """``up(max x - x)`` along ``axis`` as the per-element form gives it, or None where it
    is not found here (the caller's per-element path): ``x`` finite float64 values, or an
    object array of floats and Fractions that are float64 values (a masked softmax's
    scores with its far stand-in). The per-element form subtracts in the arrays' own
    arithmetic: a difference with a float in it is a float difference, rounded to nearest
    (Python's Fraction arithmetic with a float operand is float arithmetic), two Fractions'
    is exact (then rounded up here with Knuth's two-sum). None where a row's largest value
    is both a float and a Fraction (which of them ``np.max`` keeps decides the arithmetic),
    and where a float difference overflows (the per-element form refuses it)."""
    if not x.size or not x.shape[axis]:
        return None
    split = _float_valued(x)
    if split is None:
        return None
    values, exact = split
    top = np.max(values, axis=axis, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = top - values + 0.0  # -0.0 is 0
        if exact is None:
            return rounded if np.isfinite(rounded).all() else None
        at_top = values == top
        top_exact = np.any(at_top & exact, axis=axis, keepdims=True)
        if np.any(top_exact & np.any(at_top & ~exact, axis=axis, keepdims=True)):
            return None
        floats = ~exact | ~top_exact  # a float on either side: float arithmetic
        high, rest = two_sum(np.broadcast_to(top, values.shape), -values)
        ceiling = np.where(np.isinf(high), INF,
                           np.where(rest > 0, np.nextafter(high, INF), high)) + 0.0
    if not np.isfinite(rounded[floats]).all():
        return None
    return np.where(floats, rounded, ceiling)


def _float_valued(x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``(values, exact)``: ``x``'s values as float64 and which of them are Fractions
    (None: none is), or None where one is neither a finite float nor a Fraction with a
    float64 value."""
    if x.dtype == np.float64:
        return (x, None) if np.isfinite(x).all() else None
    if x.dtype != object:
        return None
    flat = x.reshape(-1).tolist()
    seen: dict[int, float | None] = {}  # the far stand-in is one object, many times over
    values: list[float | None] = []
    for v in flat:
        if isinstance(v, float):
            values.append(v)
        else:
            if id(v) not in seen:
                seen[id(v)] = _exact_float(v)
            values.append(seen[id(v)])
    if any(v is None for v in values):
        return None
    out = np.array(values, dtype=np.float64).reshape(x.shape)
    if not np.isfinite(out).all():
        return None
    exact = np.array([not isinstance(v, float) for v in flat]).reshape(x.shape)
    return out, exact


def _exact_float(value: object) -> float | None:
    """A Fraction's value as a float64 where it is one exactly, else None."""
    if not isinstance(value, Fraction):
        return None
    try:
        f = value.numerator / value.denominator
    except OverflowError:
        return None
    return f if Fraction(f) == value else None


def up_negated(values: np.ndarray) -> np.ndarray:
    """``up(-v)`` of every element (Fractions, ints or floats), as a float64 array of
    ``values``' shape."""
    flat = np.asarray(values).reshape(-1).tolist()
    return np.array([up_ratio(-p, q) for p, q in map(ratio, flat)],
                    dtype=np.float64).reshape(np.shape(values))
