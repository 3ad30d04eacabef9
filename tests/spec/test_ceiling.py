"""The bulk upward roundings (:mod:`resverify.spec.ceiling`) equal, bit for bit, the
per-element Fraction forms the budget rules computed before (``up`` of each exact value):
generated float64 values from every binade (subnormals, -0.0, the largest finite), double-
double sums ``mid + lo`` as the fast oracle's trace holds them, and arbitrary rationals as
the exact interpreter's trace holds them; and the norms' exact midpoints
(:func:`~resverify.spec.ball.fractions_of`, :func:`~resverify.spec.ball.from_fractions`)
equal the Fraction sums and roundings they replace. Bits are compared (``-0.0`` is not
``0.0``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from resverify.spec.ball import Ball, fractions_of, from_fractions
from resverify.spec.ceiling import (
    ratio,
    row_distances,
    up_abs_plus,
    up_negated,
    up_ratio,
)
from resverify.spec.rational import obj
from resverify.spec.rounding import up

F = Fraction
floats = st.floats(allow_nan=False, allow_infinity=False)
small = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
rationals = st.fractions(max_denominator=10**12).filter(lambda v: abs(v) < 10**300)
errs = st.one_of(st.just(F(0)), floats.map(lambda v: F(abs(v))),
                 rationals.map(abs), st.just(F(2**1100)))


def same_bits(actual: np.ndarray, expected: np.ndarray) -> bool:
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    return a.shape == e.shape and np.array_equal(a.view(np.int64), e.view(np.int64))


def per_element(values: np.ndarray, rule: Callable[[Any], float]) -> np.ndarray:
    flat = [rule(v) for v in np.asarray(values).reshape(-1).tolist()]
    return np.array(flat, dtype=np.float64).reshape(np.shape(values))


@given(st.integers(-(2**1100), 2**1100), st.integers(1, 2**1100))
def test_up_ratio_is_up_of_the_fraction(p: int, q: int) -> None:
    got, want = up_ratio(p, q), up(F(p, q))
    assert same_bits(np.array(got), np.array(want)), f"up_ratio({p}, {q})={got!r}, but " \
        f"should be {want!r} [up(Fraction(p, q))]"


@given(st.one_of(floats, rationals, st.integers(-(10**30), 10**30)))
def test_ratio_is_the_exact_value(v: float | Fraction | int) -> None:
    p, q = ratio(v)
    assert q > 0 and F(p, q) == F(v), f"ratio({v!r})={(p, q)}, but should be {F(v)!r}"


@given(st.lists(floats, min_size=1, max_size=12), errs)
def test_up_abs_plus_of_floats_is_up_of_each_exact_sum(values: list[float], err: Fraction
                                                       ) -> None:
    x = np.array([*values, -0.0])
    want = per_element(x, lambda v: up(abs(F(v)) + err))
    got = up_abs_plus(x, err)
    assert same_bits(got, want), f"up_abs_plus={got}, but should be {want} [err={err}]"


@given(st.lists(rationals, min_size=1, max_size=12), errs)
def test_up_abs_plus_of_fractions_is_up_of_each_exact_sum(values: list[Fraction],
                                                          err: Fraction) -> None:
    x = obj(values).reshape(1, -1)
    want = per_element(x, lambda v: up(abs(F(v)) + err))
    got = up_abs_plus(x, err)
    assert same_bits(got, want), f"up_abs_plus={got}, but should be {want} [err={err}]"


def test_up_abs_plus_rounds_up_where_the_nearest_float_is_below() -> None:
    """The float sum rounds ``1 + 2**-60`` to 1; the bound must be the next float."""
    got = up_abs_plus(np.array([1.0]), F(2.0**-60))
    assert float(got[0]) == math.nextafter(1.0, 2.0) and 1.0 + 2.0**-60 == 1.0, \
        f"up_abs_plus([1], 2**-60)={got}, but should be [{math.nextafter(1.0, 2.0)}]"


def double_doubles(n: int) -> st.SearchStrategy[list[Fraction]]:
    """Rows of exact ``mid + lo`` values, ``lo`` at most half an ulp of ``mid``."""
    pair = st.tuples(small, st.floats(-0.5, 0.5)).map(
        lambda p: F(p[0]) + F(p[1] * math.ulp(p[0])))
    return st.lists(pair, min_size=n, max_size=n)


@given(st.lists(st.lists(floats, min_size=3, max_size=3), min_size=1, max_size=3),
       st.integers(0, 1))
def test_row_distances_are_the_rounded_differences(rows: list[list[float]], axis: int
                                                   ) -> None:
    x = np.array(rows)
    shifted = obj(x - np.max(x, axis=axis, keepdims=True))
    with np.errstate(over="ignore"):
        finite = bool(np.isfinite(x - np.max(x, axis=axis, keepdims=True)).all())
    got = row_distances(x, axis)
    if not finite:  # the per-element form refuses an overflowed difference: not taken here
        assert got is None, f"row_distances={got}, but should be None [{rows}]"
        return
    want = per_element(shifted, lambda v: up(-F(v)))
    assert got is not None and same_bits(got, want), \
        f"row_distances={got}, but should be {want} [{rows}, axis {axis}]"


@given(st.lists(st.lists(st.tuples(st.one_of(small, st.just(-1e300), st.just(1e300)),
                                    st.booleans()), min_size=3, max_size=3),
                min_size=1, max_size=3), st.integers(0, 1))
def test_row_distances_of_floats_and_fractions_follow_each_subtraction(
        rows: list[list[tuple[float, bool]]], axis: int) -> None:
    """A masked softmax's scores: floats, and Fractions (a float64 value, one object
    shared); a difference with a float rounded to nearest, two Fractions' exact, then
    rounded up."""
    far = F(-1e300)
    x = obj([[far if v == -1e300 and as_fraction else F(v) if as_fraction else v
              for v, as_fraction in row] for row in rows])
    got = row_distances(x, axis)
    try:
        want = per_element(obj(x - np.max(x, axis=axis, keepdims=True)),
                           lambda v: up(-F(v)))
    except OverflowError:  # two floats' difference overflowed: the per-element form refuses
        assert got is None, f"row_distances={got}, but should be None [{rows}]"
        return
    if got is not None:  # None: a row's top is a float and a Fraction (np.max's pick)
        assert same_bits(got, want), f"row_distances={got}, but should be {want} [{rows}]"


def test_row_distances_of_a_masked_row_are_found() -> None:
    """The far stand-in's distance to a float top is the float difference (rounded to
    nearest); in a row of Fractions only it is exact, rounded up."""
    far = F(-(4096 + 2 * 0.1))
    x = obj([[0.1, far, -0.3], [far, 0.2, far], [F(1), F(-(2.0**-60)), F(-(2.0**-60))]])
    got = row_distances(x, 1)
    want = per_element(obj(x - np.max(x, axis=1, keepdims=True)), lambda v: up(-F(v)))
    assert got is not None and same_bits(got, want), f"row_distances={got}, but should be {want}"
    assert float(got[0, 1]) == 0.1 - float(far), f"{got[0, 1]} is not the float difference"
    assert float(got[2, 1]) == math.nextafter(1.0, 2.0), f"{got[2, 1]} is the nearest, not up"


def test_row_distances_leave_other_arrays_to_the_exact_path() -> None:
    assert row_distances(obj([[F(1, 3), F(0)]]), 1) is None  # 1/3 is no float64
    assert row_distances(obj([[1.0, F(1)]]), 1) is None  # the top both a float and a Fraction
    assert row_distances(np.zeros((2, 0)), 1) is None


@given(st.lists(st.one_of(floats, rationals), min_size=1, max_size=8))
def test_up_negated_is_up_of_each_negated_value(values: list[object]) -> None:
    x = obj(values)
    want = per_element(x, lambda v: up(-F(v)))
    got = up_negated(x)
    assert same_bits(got, want), f"up_negated={got}, but should be {want} [{values}]"


@given(st.lists(st.tuples(floats, floats), min_size=1, max_size=8))
def test_fractions_of_is_the_exact_sum_of_mid_and_lo(pairs: list[tuple[float, float]]
                                                      ) -> None:
    """The norms' exact midpoints ``mid + lo``, built from integer ratios, are the sums of
    the two Fractions (any two floats, not only a double-double's)."""
    mid, lo = np.array([m for m, _ in pairs]), np.array([low for _, low in pairs])
    got = fractions_of(Ball(mid, np.zeros_like(mid), lo)).tolist()
    want = [F(m) + F(low) for m, low in pairs]
    assert got == want, f"fractions_of={got}, but should be {want}"


@given(st.lists(st.one_of(rationals, floats, double_doubles(1).map(lambda r: r[0])),
                min_size=1, max_size=8))
def test_from_fractions_rounds_the_value_then_the_rest(values: list[Fraction | float]
                                                       ) -> None:
    """``mid`` the value rounded to nearest, ``lo`` the rest rounded to nearest, as
    ``float`` of the Fractions gives them."""
    got = from_fractions(obj(values))
    mids = [float(F(v)) for v in values]
    los = [float(F(v) - F(m)) for v, m in zip(values, mids, strict=True)]
    assert same_bits(got.mid, np.array(mids)) and same_bits(got.lo, np.array(los)), \
        f"from_fractions=({got.mid}, {got.lo}), but should be ({mids}, {los}) [{values}]"
