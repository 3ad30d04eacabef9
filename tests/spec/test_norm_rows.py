"""The norms' integer rows (:mod:`resverify.spec.norm_rows`) give, bit for bit, what the
Fraction forms gave: the enclosures' centres are the spec's own exact value and VJP
(``LayerNorm.exact``, ``exact_vjp`` on the exact ``mid + lo``) rounded by
``from_fractions``; the spread's statistics are the variance rounded down and the centred
values rounded to nearest; the budget's moments are ``up`` of the centred row and its mean
square. Rows are drawn as the fast oracle holds them (double-doubles) and as the exact
interpreter does (any rationals), centred (layer_norm) and not (rms_norm)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from resverify.spec.ball import Ball, fractions_of, from_fractions, ratios_of
from resverify.spec.norm_rows import centre, centre_vjp, row_moments, rows_of, spread_statistics
from resverify.spec.ops.layer_norm import LayerNorm
from resverify.spec.ops.rms_norm import RmsNorm
from resverify.spec.rational import obj
from resverify.spec.rounding import up

F = Fraction
small = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
rationals = st.fractions(max_denominator=10**12).filter(lambda v: abs(v) < 10**30)
eps = st.sampled_from([F(1, 10**5), F(1, 10**6), F(1, 3), F(2)])
norms = st.sampled_from([LayerNorm(), RmsNorm()])


def same_bits(actual: np.ndarray, expected: np.ndarray) -> bool:
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    return a.shape == e.shape and np.array_equal(a.view(np.int64), e.view(np.int64))


@st.composite
def balls(draw: st.DrawFn, rows: int, n: int) -> Ball:
    """Double-doubles ``mid + lo``, ``lo`` at most half an ulp of ``mid`` (0 at times)."""
    mid = np.array(draw(st.lists(small, min_size=rows * n, max_size=rows * n)))
    frac = np.array(draw(st.lists(st.one_of(st.just(0.0), st.floats(-0.5, 0.5)),
                                  min_size=rows * n, max_size=rows * n)))
    lo = frac * np.array([math.ulp(m) for m in mid])
    return Ball(mid.reshape(rows, n), np.zeros((rows, n)), lo.reshape(rows, n))


shapes = st.tuples(st.integers(1, 3), st.integers(1, 6))


@given(shapes.flatmap(lambda s: balls(*s)), norms, eps)
def test_centre_is_the_spec_value_rounded(x: Ball, op: LayerNorm, e: Fraction) -> None:
    want = from_fractions(op.exact([fractions_of(x)], e))
    rows = rows_of(ratios_of(x), x.mid.shape[-1], op.centred)
    mid, rad, lo = centre(rows, e, x.mid.shape)
    assert same_bits(mid, want.mid) and same_bits(lo, want.lo) and same_bits(rad, want.rad), \
        f"centre=({mid}, {lo}), but should be ({want.mid}, {want.lo}) [{op.name}, eps {e}]"


@given(shapes.flatmap(lambda s: st.tuples(balls(*s), balls(*s))), norms, eps)
def test_centre_vjp_is_the_spec_vjp_rounded(xg: tuple[Ball, Ball], op: LayerNorm,
                                            e: Fraction) -> None:
    x, g = xg
    a, cot = fractions_of(x), fractions_of(g)
    want = from_fractions(op.exact_vjp(cot, [a], op.exact([a], e), e)[0])
    rows = rows_of(ratios_of(x), x.mid.shape[-1], op.centred)
    mid, rad, lo = centre_vjp(rows, ratios_of(g), e, op.centred, x.mid.shape)
    assert same_bits(mid, want.mid) and same_bits(lo, want.lo) and same_bits(rad, want.rad), \
        f"centre_vjp=({mid}, {lo}), but should be ({want.mid}, {want.lo}) [{op.name}, eps {e}]"


@given(shapes.flatmap(lambda s: balls(*s)), st.booleans())
def test_spread_statistics_round_the_variance_down_and_the_centred_to_nearest(
        x: Ball, centred: bool) -> None:
    a = fractions_of(x)
    n = a.shape[-1]
    c = a - a.sum(axis=-1, keepdims=True) / n if centred else a
    variance = ((c * c).sum(axis=-1, keepdims=True) / n).reshape(-1).tolist()
    want_sigma = []
    for v in variance:  # the former per-row loop of norm_spread
        low = float(v)
        low = math.nextafter(low, 0.0) if F(low) > v else low
        want_sigma.append(math.nextafter(math.sqrt(low), 0.0) if low > 0 else 0.0)
    want_abs = [float(abs(v)) for v in c.reshape(-1).tolist()]
    sigma, c_abs = spread_statistics(rows_of(ratios_of(x), n, centred), x.mid.shape)
    assert same_bits(sigma.reshape(-1), np.array(want_sigma)), \
        f"σ={sigma.reshape(-1)}, but should be {want_sigma} [centred={centred}]"
    assert same_bits(c_abs.reshape(-1), np.array(want_abs)), \
        f"|c|={c_abs.reshape(-1)}, but should be {want_abs} [centred={centred}]"


@given(st.integers(1, 5).flatmap(lambda n: st.lists(
    st.one_of(balls(1, n).map(lambda b: fractions_of(b)[0].tolist()),
              st.lists(rationals, min_size=n, max_size=n)), min_size=1, max_size=3)),
       st.booleans())
def test_row_moments_are_the_fraction_rows_rounded_up(rows: list[list[Fraction]],
                                                      centred: bool) -> None:
    """The budget's ``up(|c_i|)`` and ``up(Σ c² / n)``, from rows of Fractions (the trace
    holds a norm's argument as Fractions, never as floats)."""
    a = obj(rows)
    n = a.shape[-1]
    cx = obj(a - a.sum(axis=-1, keepdims=True) / n) if centred else a
    want_mags = [up(abs(F(v))) for v in cx.reshape(-1).tolist()]
    want_squares = [up(F(v) / n) for v in (cx * cx).sum(axis=-1).reshape(-1).tolist()]
    mags, squares = row_moments(a, centred)
    assert same_bits(mags.reshape(-1), np.array(want_mags)), \
        f"|c|={mags}, but should be {want_mags} [{rows}]"
    assert same_bits(squares.reshape(-1), np.array(want_squares)), \
        f"mean c²={squares}, but should be {want_squares} [{rows}, centred={centred}]"
