"""The bulk upward roundings (:mod:`resverify.spec.ceiling`) equal, bit for bit, the
per-element Fraction forms the budget rules computed before (``up`` of each exact value):
generated float64 values from every binade (subnormals, -0.0, the largest finite), double-
double sums ``mid + lo`` as the fast oracle's trace holds them, and arbitrary rationals as
the exact interpreter's trace holds them. Bits are compared (``-0.0`` is not ``0.0``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from resverify.spec.ceiling import (
    ratio,
    row_distances,
    row_moments,
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


def fraction_rows(a: np.ndarray, centred: bool) -> tuple[np.ndarray, np.ndarray]:
    """The norms' former per-element form: the centred row in Fractions, each rounded up
    (the trace holds a norm's argument as Fractions, never as floats)."""
    n = a.shape[-1]
    cx = obj(a - a.sum(axis=-1, keepdims=True) / n) if centred else a
    mags = per_element(cx, lambda v: up(abs(F(v))))
    sums = (cx * cx).sum(axis=-1, keepdims=True)
    return mags, per_element(sums, lambda v: up(F(v) / n))


@given(st.integers(1, 5).flatmap(lambda n: st.lists(
    st.one_of(double_doubles(n), st.lists(rationals, min_size=n, max_size=n),
              st.lists(floats.map(F), min_size=n, max_size=n)), min_size=1, max_size=3)),
       st.booleans())
def test_row_moments_are_the_fraction_rows_rounded_up(rows: list[list[object]],
                                                      centred: bool) -> None:
    a = obj(rows)
    want_mags, want_squares = fraction_rows(a, centred)
    mags, squares = row_moments(a, centred)
    assert same_bits(mags, want_mags), f"|c|={mags}, but should be {want_mags} [{rows}]"
    assert same_bits(squares, want_squares), \
        f"mean c²={squares}, but should be {want_squares} [{rows}, centred={centred}]"


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


def test_row_distances_leave_other_arrays_to_the_exact_path() -> None:
    assert row_distances(obj([[F(1, 3), F(0)]]), 1) is None
    assert row_distances(np.zeros((2, 0)), 1) is None


@given(st.lists(st.one_of(floats, rationals), min_size=1, max_size=8))
def test_up_negated_is_up_of_each_negated_value(values: list[object]) -> None:
    x = obj(values)
    want = per_element(x, lambda v: up(-F(v)))
    got = up_negated(x)
    assert same_bits(got, want), f"up_negated={got}, but should be {want} [{values}]"
