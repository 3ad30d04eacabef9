"""The norms' radius formulas of the fast oracle, pinned term by term (docs/strength.md §3).

``tests/spec/test_strength_enclosure.py`` checks that a norm's ball holds the image of sample
points of its argument's ball. Those points move the output far less than the proven bound,
so a rule that drops or weakens one term of its radius still passes there. Here each radius
is compared with the formula its docstring states (:class:`~resverify.spec.ops.layer_norm.
NormSpread`, :meth:`~resverify.spec.ops.layer_norm.LayerNorm.enclose`), recomputed
independently in exact Fractions from the same exact row ``mid + lo`` and radii, as
``tests/spec/test_strength_budget_rules.py`` does for the budget rules:

* ``norm_spread``: ``r_max = min(1/sqrt(ε), 1/(σ(m) - rms(R)))`` where the gap is positive
  (else ``1/sqrt(ε)``), and ``y_top = min(r_max (|c_i(m)| + R_i + mean R), ceil(sqrt(n)))``;
* ``NormSpread.through``: ``r_max (rad_i + mean rad + y_top_i rms(rad))``;
* ``enclose`` and ``enclose_vjp``'s radii: the centre's own radius plus every documented term;
* the stand-ins of the spec's slack (``slack_rules()``) and the trace the budget reads.

How close "equal" is: the code rounds every step up, so its result is at least the formula
and, on these rows of width at most 6, at most ``2**-40`` above it (``MARGIN``; measured:
below ``2**-45``). The formulas' square roots are integer square roots good to ``2**-220``,
so the lower check allows ``2**-200`` (``ROOT``), and the upper one ``2**-500`` absolute
(``FLOOR``): the code's bound of ``rms`` of a zero radius is about ``2**-537``, not 0. The
inputs are chosen so that each term is a visible share (above ``2**-12``) of the radius it
is part of: the spec's ``2**-190`` terms only show where the radii are near ``2**-200`` and
the spec's value is a float (``1/sqrt(σ² + ε)`` a power of two), the centre's own radius only
where the argument is exact.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from resverify.spec import ball as ball_ops
from resverify.spec import enclosure
from resverify.spec.enclosure import Ball, Enclosed
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, LayerNorm
from resverify.spec.ops import layer_norm as norm_rules
from resverify.spec.rational import TANH_PRECISION_BITS, exact_rsqrt


def _rules(name: str) -> tuple[Any, Any]:
    """An op's enclosure rules, forward and reverse."""
    return OP_TABLE[name].enclose, OP_TABLE[name].enclose_vjp

F = Fraction
MARGIN = F(1, 2**40)
"""How far above the formula the code's rounded-up result may lie (relative)."""
ROOT = F(1, 2**200)
"""How far below it: the formula's own accuracy (its square roots are good to 2**-220)."""
FLOOR = F(1, 2**500)
"""Absolute room above it: the code bounds ``rms`` of a zero radius by about 2**-537."""
S = F(2) ** (10 - TANH_PRECISION_BITS)
"""``s``, the bound of the spec's relative error of ``1/sqrt`` the docstring uses (2**-190)."""
NAMES = ("layer_norm", "rms_norm")
Row = list[Fraction]


# ----------------------------------------------------------------------------------------
# the formulas, in Fractions


def _sqrt(x: Fraction) -> Fraction:
    """``sqrt(x)`` within ``2**-220`` relative (just above it), by an integer square root."""
    if not x:
        return F(0)
    p, q = x.numerator, x.denominator
    return F(math.isqrt((p * q) << 440) + 1, q << 220)


def _mean(v: Row) -> Fraction:
    return sum(v, F(0)) / len(v)


def _rms(v: Row) -> Fraction:
    return _sqrt(_mean([e * e for e in v]))


def _root_n(n: int) -> Fraction:
    """``sqrt(n)`` rounded up to an integer (as ``LayerNorm._constants`` rounds it)."""
    root = math.isqrt(n)
    return F(root + (root * root != n))


def _gap(centred: bool, a: Row, big_r: Row) -> Fraction:
    """``σ(m) - rms(R)``: σ the rms of the row, centred when the norm centres."""
    mean = _mean(a) if centred else F(0)
    return _rms([v - mean for v in a]) - _rms(big_r)


def _r_max(centred: bool, a: Row, big_r: Row, eps: Fraction) -> Fraction:
    """``min(1/sqrt(ε), 1/(σ(m) - rms(R)))`` where the gap is positive, else ``1/sqrt(ε)``."""
    gap = _gap(centred, a, big_r)
    r_eps = 1 / _sqrt(eps)
    return min(r_eps, 1 / gap) if gap > 0 else r_eps


def _y_top(centred: bool, a: Row, big_r: Row, r_max: Fraction) -> Row:
    """``min(r_max (|c_i(m)| + R_i + mean R), sqrt(n) rounded up)``, the mean when centred."""
    mean = _mean(a) if centred else F(0)
    shift = _mean(big_r) if centred else F(0)
    return [min(r_max * (abs(v - mean) + r + shift), _root_n(len(a)))
            for v, r in zip(a, big_r, strict=True)]


def _through(centred: bool, r_max: Fraction, y_top: Row, rad: Row) -> Row:
    """``r_max (rad_i + mean rad + y_top_i rms(rad))``, the mean only when centred."""
    mean = _mean(rad) if centred else F(0)
    rms = _rms(rad)
    return [r_max * (d + mean + y * rms) for d, y in zip(rad, y_top, strict=True)]


@dataclass(frozen=True)
class Spread:
    """One row's ``r_max`` and ``y_top`` by the formulas."""

    r_max: Fraction
    y_top: Row


def _spread(centred: bool, a: Row, big_r: Row, eps: Fraction) -> Spread:
    r_max = _r_max(centred, a, big_r, eps)
    return Spread(r_max, _y_top(centred, a, big_r, r_max))


def _forward_rad(centred: bool, a: Row, big_r: Row, eps: Fraction, centre: Row) -> Row:
    """``centre.rad + through(R) + 2 y_top s``."""
    s = _spread(centred, a, big_r, eps)
    dy = _through(centred, s.r_max, s.y_top, big_r)
    return [c + d + 2 * y * S for c, d, y in zip(centre, dy, s.y_top, strict=True)]


def _reverse_rad(centred: bool, a: Row, big_r: Row, eps: Fraction, g_size: Row, g_rad: Row,
                 centre: Row) -> Row:
    """``centre.rad + through(rad_ḡ) + moved + spec``: ``moved`` is ``|Δr| |Pḡ - y m|
    + r |Δy_i| |m| + r |y_i| |Δm|`` with ``|Δr| <= r_max² rms(R)``, ``|Pḡ| <= k G``,
    ``|m| <= G``, ``|Δy| <= dy = through(R)``, ``|Δm| <= G mean(dy)``; ``spec`` is
    ``2 r_max G (k + 4 y_top) s``."""
    k = 2 if centred else 1
    s = _spread(centred, a, big_r, eps)
    big_g = max(g_size)
    dy = _through(centred, s.r_max, s.y_top, big_r)
    d_r = s.r_max * s.r_max * _rms(big_r)
    mean_dy = _mean(dy)
    moved = [d_r * (k * big_g + y * big_g) + s.r_max * d * big_g + s.r_max * y * big_g * mean_dy
             for d, y in zip(dy, s.y_top, strict=True)]
    spec = [2 * s.r_max * big_g * (k + 4 * y) * S for y in s.y_top]
    own = _through(centred, s.r_max, s.y_top, g_rad)
    return [c + o + m + p for c, o, m, p in zip(centre, own, moved, spec, strict=True)]


# ----------------------------------------------------------------------------------------
# reading arrays, and the check


def _rows(values: np.ndarray) -> list[Row]:
    """The rows (last axis) of a float array, as Fractions."""
    flat = np.asarray(values, dtype=np.float64)
    return [[F(v) for v in row] for row in flat.reshape(-1, flat.shape[-1]).tolist()]


def _exact_rows(ball: Ball) -> list[Row]:
    """The rows of ``mid + lo``, exactly."""
    return [[m + low for m, low in zip(mr, lr, strict=True)]
            for mr, lr in zip(_rows(ball.mid), _rows(ball.lo), strict=True)]


def _sizes(ball: Ball) -> list[Row]:
    """``|mid| + |lo| + rad`` per element, exactly."""
    return [[abs(m) + abs(low) + r for m, low, r in zip(mr, lr, rr, strict=True)]
            for mr, lr, rr in zip(_rows(ball.mid), _rows(ball.lo), _rows(ball.rad),
                                  strict=True)]


def _double_double(value: Fraction) -> tuple[float, float, Fraction]:
    """``value`` rounded to ``mid + lo`` (each to nearest) and the radius the docstring of
    ``_from_fractions`` gives it: an ulp of ``lo`` (the least subnormal for ``lo = 0``)."""
    mid = float(value)
    lo = float(value - F(mid))
    return mid, lo, F(math.ulp(abs(lo)))


def _assert_rounded_up(actual: np.ndarray, formula: Sequence[Row], call: str) -> None:
    """Every element of ``actual`` (rows on the last axis) is its formula rounded up:
    at least ``formula (1 - ROOT)``, at most ``formula (1 + MARGIN) + FLOOR``."""
    __tracebackhide__ = True
    got = _rows(actual)
    assert len(got) == len(formula), f"{call}: {len(got)} rows, but should be {len(formula)}"
    for r, (got_row, want_row) in enumerate(zip(got, formula, strict=True)):
        assert len(got_row) == len(want_row), (
            f"{call}: row {r} has {len(got_row)} elements, but should have {len(want_row)}")
        for i, (value, want) in enumerate(zip(got_row, want_row, strict=True)):
            low, high = want * (1 - ROOT), want * (1 + MARGIN) + FLOOR
            assert low <= value <= high, (
                f"{call}[row {r}, {i}]={float(value)!r}, but should be the formula "
                f"{float(want)!r} rounded up (relative {float(value / want - 1) if want else 0:.3g}"
                f", allowed [-2**-200, 2**-40])")


# ----------------------------------------------------------------------------------------
# _norm_spread: r_max and y_top


@dataclass(frozen=True)
class Case:
    """An argument ball (``mid``, ``lo``, ``rad``, rows on the last axis) and ``ε``."""

    mid: list[list[float]]
    lo: list[list[float]]
    rad: list[list[float]]
    eps: Fraction
    shape: tuple[int, ...]

    def ball(self) -> Ball:
        return Ball(*(np.array(v, dtype=np.float64).reshape(self.shape)
                      for v in (self.mid, self.rad, self.lo)))


def _case(mid: list[list[float]], rad: list[list[float]], eps: Fraction,
          lo: list[list[float]] | None = None, shape: tuple[int, ...] | None = None) -> Case:
    low = lo if lo is not None else [[0.0] * len(row) for row in mid]
    return Case(mid, low, rad, eps, shape or (len(mid), len(mid[0])))


EPS = F(1, 10**5)
T = 2.0**-51
SPREAD_CASES = {
    # σ(m) well above rms(R), 1/gap far below 1/sqrt(ε), a centred element 0 (there y_top is
    # r_max (R_i + mean R) alone), low parts in the second row
    "1/gap, two rows with low parts": _case(
        [[2.0, 0.5, 3.5, 2.0, -1.0, 5.0], [10.0, 10.5, 9.0, 10.0, 11.0, 9.5]],
        [[0.25, 0.5, 0.125, 0.375, 0.25, 0.5], [2.0**-10, 2.0**-9, 2.0**-10, 0.0, 2.0**-8, 0.0]],
        EPS, lo=[[0.0] * 6, [T, 0.0, -T / 2, 0.0, T, 0.0]]),
    # three rows under two leading axes: gap <= 0 (r_max = 1/sqrt(ε), every y_top clipped),
    # a gap below sqrt(ε) (1/gap above 1/sqrt(ε)), and an outlier whose y_top alone is clipped
    "gap <= 0, gap below sqrt(eps), one clipped": _case(
        [[0.5, -0.5, 0.5, -0.5], [2.0**-40, -(2.0**-40), 2.0**-41, 0.0], [0.0, 0.0, 0.0, 4.0]],
        [[1.0, 0.5, 0.75, 1.0], [2.0**-44, 2.0**-43, 2.0**-44, 2.0**-45], [0.3, 0.3, 0.2, 0.3]],
        EPS, shape=(3, 1, 4)),
    # ε = 1/3: float64's nearest to 1/sqrt(ε) lies below it (for 10**-5 it lies above), so
    # r_max = 1/sqrt(ε) in the gap <= 0 row shows whether it is rounded up
    "eps 1/3": _case([[1.0, -1.0, 0.5, -0.5], [0.5, -0.5, 0.5, -0.5]],
                     [[0.125, 0.0, 0.25, 0.125], [1.0, 1.0, 1.0, 1.0]], F(1, 3)),
    # n = 9, a perfect square: an outlier's y_top clipped at exactly 3; a constant exact
    # row, whose centred variance is 0 (σ = 0, r_max = 1/sqrt(ε) = 2, not 1/(1 - rms R))
    "width 9, a constant row": _case([[3.0] * 9, [0.0] * 8 + [4.0]], [[0.0] * 9, [1.0] * 9],
                                     F(1, 4)),
}


def _op(name: str) -> LayerNorm:
    op = OP_TABLE[name]
    assert isinstance(op, LayerNorm)
    return op


def _code_spread(name: str, case: Case) -> norm_rules.NormSpread:
    x = case.ball()
    return norm_rules.norm_spread(_op(name), ball_ops.fractions_of(x), x, case.eps)


@pytest.mark.parametrize("case", sorted(SPREAD_CASES))
@pytest.mark.parametrize("name", NAMES)
def test_r_max_is_the_smaller_of_the_reciprocal_gap_and_of_1_over_sqrt_eps_rounded_up(
        name: str, case: str) -> None:
    c = SPREAD_CASES[case]
    centred = _op(name).centred
    got = _code_spread(name, c)
    x = c.ball()
    rows = zip(_exact_rows(x), _rows(x.rad), strict=True)
    want = [[_r_max(centred, a, big_r, c.eps)] for a, big_r in rows]
    assert got.r_max.shape == (*c.shape[:-1], 1), f"r_max shape {got.r_max.shape} [{case}]"
    assert got.centred is centred, f"centred={got.centred}, but should be {centred} [{name}]"
    _assert_rounded_up(got.r_max, want, f"_norm_spread({name}, {case}).r_max")


@pytest.mark.parametrize("case", sorted(SPREAD_CASES))
@pytest.mark.parametrize("name", NAMES)
def test_y_top_is_r_max_times_the_row_bound_clipped_at_sqrt_n_rounded_up(
        name: str, case: str) -> None:
    """Against the code's own ``r_max`` (pinned by the test above), so each term shows."""
    c = SPREAD_CASES[case]
    centred = _op(name).centred
    got = _code_spread(name, c)
    x = c.ball()
    r_max = [row[0] for row in _rows(got.r_max)]
    rows = zip(_exact_rows(x), _rows(x.rad), r_max, strict=True)
    want = [_y_top(centred, a, big_r, r) for a, big_r, r in rows]
    call = f"_norm_spread({name}, {case}).y_top"
    assert got.y_top.shape == c.shape, f"{call}: shape {got.y_top.shape}, should be {c.shape}"
    _assert_rounded_up(got.y_top, want, call)
    root_n = _root_n(len(c.mid[0]))
    for r, (got_row, want_row) in enumerate(zip(_rows(got.y_top), want, strict=True)):
        for i, (value, expected) in enumerate(zip(got_row, want_row, strict=True)):
            if expected == root_n:  # clipped: exactly ceil(sqrt(n))
                assert value == root_n, f"{call}[row {r}, {i}]={value}, but should be {root_n}"


def test_the_spread_cases_reach_every_branch() -> None:
    """The cases above hold a positive gap with ``1/gap`` the minimum, one with ``1/sqrt(ε)``
    the minimum, a gap <= 0, and y_top clipped and not (so no branch is left unchecked)."""
    seen = set()
    for c in SPREAD_CASES.values():
        x = c.ball()
        for a, big_r in zip(_exact_rows(x), _rows(x.rad), strict=True):
            for centred in (True, False):
                gap = _gap(centred, a, big_r)
                r_eps = 1 / _sqrt(c.eps)
                seen.add("gap <= 0" if gap <= 0 else "1/gap" if 1 / gap < r_eps else "r_eps")
                y = _y_top(centred, a, big_r, _r_max(centred, a, big_r, c.eps))
                seen |= {"clipped" if v == _root_n(len(a)) else "not clipped" for v in y}
    assert seen == {"gap <= 0", "1/gap", "r_eps", "clipped", "not clipped"}, seen


# ----------------------------------------------------------------------------------------
# _NormSpread.through


THROUGH_RAD = np.array([[1.0, 2.0, 0.5, 3.0, 0.25], [0.0, 1.5, 4.0, 0.75, 1.0]]) * 2.0**-20
THROUGH_R_MAX = np.array([[1.25], [3.0]])
THROUGH_Y_TOP = np.array([[0.5, 1.0, 2.0, 0.25, 1.5], [3.0, 0.125, 1.0, 2.5, 0.0]])


@pytest.mark.parametrize("centred", [True, False])
def test_through_is_r_max_times_rad_plus_its_mean_plus_y_top_times_its_rms(
        centred: bool) -> None:
    spread = norm_rules.NormSpread(THROUGH_R_MAX, THROUGH_Y_TOP, centred)
    got = spread.through(THROUGH_RAD)
    want = [_through(centred, r[0], y, rad) for r, y, rad in
            zip(_rows(THROUGH_R_MAX), _rows(THROUGH_Y_TOP), _rows(THROUGH_RAD), strict=True)]
    _assert_rounded_up(got, want, f"_NormSpread(centred={centred}).through(rad)")


# ----------------------------------------------------------------------------------------
# _norm: the forward and reverse radii


@dataclass(frozen=True)
class NormCase:
    """An argument ball and a cotangent ball (rows of equal width), and ``ε``."""

    x: Case
    g_mid: list[list[float]]
    g_rad: list[list[float]]
    g_lo: list[list[float]]

    def g(self) -> Ball:
        return Ball(*(np.array(v, dtype=np.float64).reshape(self.x.shape)
                      for v in (self.g_mid, self.g_rad, self.g_lo)))


def _scaled(rows: list[list[float]], scale: float) -> list[list[float]]:
    return [[v * scale for v in row] for row in rows]


# c with mean 0 and mean c² = 5/8 and 29/8: with ε = 3/8, σ² + ε is 1 and 4, so
# 1/sqrt(σ² + ε) is exact (1 and 1/2), the spec's value a float and its centre radius the
# least subnormal: the spec's 2**-190 terms and the radii near 2**-200 are what is left.
EXACT_C = [[1.0, -1.0, 0.5, -0.5], [2.5, -2.5, 1.0, -1.0]]
SHIFT = [[2.0] * 4, [10.0] * 4]
TINY_R = [[1.0, 3.0, 2.0, 1.0], [2.0, 1.0, 1.0, 3.0]]
G_MID = [[1.5, -4.0, 2.0, 0.5], [3.0, 1.0, -2.0, 0.25]]
GENERAL = [[0.3, -1.2, 2.5, 0.7, -0.1, 1.9], [40.0, 41.5, 38.0, 40.25, 39.0, 42.0]]
GENERAL_G = [[10.0, -30.0, 2.0, 50.0, -7.0, 1.0], [0.5, -0.25, 1.0, 2.0, -1.5, 0.75]]
GENERAL_G_LO = [[2.0**-60, 0.0, 2.0**-55, -(2.0**-50), 0.0, 0.0], [0.0] * 6]


def _norm_cases(name: str) -> dict[str, NormCase]:
    centred = _op(name).centred
    exact_rows = ([[c + s for c, s in zip(cr, sr, strict=True)]
                   for cr, sr in zip(EXACT_C, SHIFT, strict=True)] if centred else EXACT_C)
    zeros4, zeros6 = [[0.0] * 4] * 2, [[0.0] * 6] * 2
    return {
        "radii near 2**-200, the spec's value a float": NormCase(
            _case(exact_rows, _scaled(TINY_R, 2.0**-200), F(3, 8)),
            G_MID, _scaled(TINY_R, 2.0**-201), zeros4),
        "radii 2**-20 and 2**-30, cotangent large, low parts": NormCase(
            _case(GENERAL, _scaled([[1.0, 2.0, 3.0] * 2] * 2, 2.0**-20), EPS,
                  lo=[[2.0**-56, 0.0, -(2.0**-54), 0.0, 0.0, 2.0**-55], [0.0] * 6]),
            GENERAL_G, _scaled([[3.0, 1.0, 2.0] * 2] * 2, 2.0**-30), GENERAL_G_LO),
        "exact argument and cotangent": NormCase(
            _case(GENERAL, zeros6, EPS), GENERAL_G, zeros6, zeros6),
        "a ball wider than the row's spread": NormCase(
            _case([[0.5, -0.5, 0.5, -0.5], [0.0, 0.0, 0.0, 4.0]],
                  [[1.0, 0.5, 0.75, 1.0], [0.3, 0.3, 0.2, 0.3]], EPS, shape=(2, 1, 4)),
            G_MID, _scaled(TINY_R, 2.0**-8), zeros4),
    }


CASE_NAMES = sorted(_norm_cases("layer_norm"))


def _centres(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[Row]]:
    """The spec's exact values as ``_from_fractions`` documents them: ``mid``, ``lo`` and
    the centre's radius per row."""
    flat = [_double_double(F(v)) for v in np.asarray(values, dtype=object).reshape(-1)]
    shape = np.shape(values)
    width = shape[-1]
    mid = np.array([m for m, _, _ in flat]).reshape(shape)
    lo = np.array([low for _, low, _ in flat]).reshape(shape)
    rads = [r for _, _, r in flat]
    return mid, lo, [rads[i:i + width] for i in range(0, len(rads), width)]


def _assert_centre(out: Ball, mid: np.ndarray, lo: np.ndarray, call: str) -> None:
    __tracebackhide__ = True
    assert np.array_equal(out.mid, mid) and np.array_equal(out.lo, lo), (
        f"{call}: centre {out.mid.tolist()} + {out.lo.tolist()}, but should be the spec's "
        f"value rounded to {mid.tolist()} + {lo.tolist()}")


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("name", NAMES)
def test_norm_forward_radius_is_the_centres_plus_through_r_plus_twice_y_top_s(
        name: str, case: str) -> None:
    op = _op(name)
    c = _norm_cases(name)[case].x
    x = c.ball()
    forward, _ = _rules(name)
    out = forward([x], c.eps)
    mid, lo, centre = _centres(op.exact([ball_ops.fractions_of(x)], c.eps))
    call = f"_norm({name}) forward [{case}]"
    _assert_centre(out, mid, lo, call)
    rows = zip(_exact_rows(x), _rows(x.rad), centre, strict=True)
    want = [_forward_rad(op.centred, a, big_r, c.eps, cr) for a, big_r, cr in rows]
    _assert_rounded_up(out.rad, want, f"{call}.rad")


@pytest.mark.parametrize("case", CASE_NAMES)
@pytest.mark.parametrize("name", NAMES)
def test_norm_reverse_radius_is_the_centres_plus_through_cotangent_plus_moved_plus_spec(
        name: str, case: str) -> None:
    op = _op(name)
    nc = _norm_cases(name)[case]
    x, g, eps = nc.x.ball(), nc.g(), nc.x.eps
    forward, reverse = _rules(name)
    (out,) = reverse(g, [x], forward([x], eps), eps)
    a = ball_ops.fractions_of(x)
    spec = op.exact_vjp(ball_ops.fractions_of(g), [a], op.exact([a], eps), eps)[0]
    mid, lo, centre = _centres(spec)
    call = f"_norm({name}) reverse [{case}]"
    _assert_centre(out, mid, lo, call)
    rows = zip(_exact_rows(x), _rows(x.rad), _sizes(g), _rows(g.rad), centre, strict=True)
    want = [_reverse_rad(op.centred, a_row, big_r, eps, gs, gr, cr)
            for a_row, big_r, gs, gr, cr in rows]
    _assert_rounded_up(out.rad, want, f"{call}.rad")


def _shares(name: str, case: str) -> dict[str, Fraction]:
    """The largest share, over the elements, of each term in the reverse radius and (the
    terms named ``forward ...``) in the forward one."""
    op = _op(name)
    nc = _norm_cases(name)[case]
    x, g, eps = nc.x.ball(), nc.g(), nc.x.eps
    k = 2 if op.centred else 1
    a = ball_ops.fractions_of(x)
    _, _, centre = _centres(op.exact_vjp(ball_ops.fractions_of(g), [a],
                                         op.exact([a], eps), eps)[0])
    _, _, centre_x = _centres(op.exact([a], eps))
    out: dict[str, Fraction] = {}
    rows = zip(_exact_rows(x), _rows(x.rad), _sizes(g), _rows(g.rad), centre, centre_x,
               strict=True)
    for a_row, big_r, gs, gr, cr, cr_x in rows:
        total = _reverse_rad(op.centred, a_row, big_r, eps, gs, gr, cr)
        s = _spread(op.centred, a_row, big_r, eps)
        big_g = max(gs)
        dy = _through(op.centred, s.r_max, s.y_top, big_r)
        terms = {
            "centre": cr,
            "through(rad_g)": _through(op.centred, s.r_max, s.y_top, gr),
            "|dr| (k + y_top) G": [s.r_max**2 * _rms(big_r) * (k + y) * big_g for y in s.y_top],
            "r |dy| G": [s.r_max * d * big_g for d in dy],
            "r y_top G mean(dy)": [s.r_max * y * big_g * _mean(dy) for y in s.y_top],
            "spec": [2 * s.r_max * big_g * (k + 4 * y) * S for y in s.y_top],
        }
        forward = _forward_rad(op.centred, a_row, big_r, eps, cr_x)
        terms |= {"forward centre": cr_x,
                  "forward through(R)": _through(op.centred, s.r_max, s.y_top, big_r),
                  "forward 2 y_top s": [2 * y * S for y in s.y_top]}
        for term, values in terms.items():
            whole = forward if term.startswith("forward") else total
            share = max(v / t for v, t in zip(values, whole, strict=True))
            out[term] = max(out.get(term, F(0)), share)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_every_radius_term_is_a_visible_share_of_the_radius_in_some_case(name: str) -> None:
    """A guard on the cases above: a rule that drops any one term of the forward or the
    reverse radius fails their test by far more than MARGIN."""
    best: dict[str, Fraction] = {}
    for case in CASE_NAMES:
        for term, share in _shares(name, case).items():
            best[term] = max(best.get(term, F(0)), share)
    hidden = {t: float(s) for t, s in best.items() if s < 2**-12}
    assert not hidden, f"{name}: terms below 2**-12 of the radius in every case: {hidden}"


# ----------------------------------------------------------------------------------------
# the stand-ins of the spec's slack


@pytest.mark.parametrize(("name", "k"), [("layer_norm", 2), ("rms_norm", 1)])
def test_the_stand_in_centred_row_is_k_times_the_largest_magnitude(name: str, k: int) -> None:
    rule = OP_TABLE[name].slack_rules()
    assert isinstance(rule, LayerNorm)
    assert rule.name == name and rule.centred is (name == "layer_norm"), (
        f"OP_TABLE[{name}].slack_rules() is {rule.name}, centred={rule.centred}")
    for sizes, top in [(np.broadcast_to(np.float64(0.75), (2, 3)), F(3, 4)),
                       (np.array([[0.5, 3.0, 1.25]]), F(3)),
                       (np.array([2.0**-1074, 0.0]), F(2) ** -1074),
                       (np.zeros((2, 0)), F(0))]:
        got = rule._centred(sizes)
        assert got.shape == (1,) and got[0] == k * top and isinstance(got[0], Fraction), (
            f"OP_TABLE[{name}].slack_rules()._centred({sizes.tolist()})={got!r}, but should be "
            f"[{k * top}] (k={k} times the largest magnitude)")


@pytest.mark.parametrize("eps", [F(1, 10**5), F(3, 8), F(1, 4), F(7, 3)])
@pytest.mark.parametrize("name", NAMES)
def test_the_stand_in_rsqrt_half_width_is_1_over_sqrt_eps_rounded_up_over_2_pow_199(
        name: str, eps: Fraction) -> None:
    """``(1/sqrt(ε) + its enclosure's half-width) / 2**199``, exactly; it is at least
    ``2**-199/sqrt(ε)``, twice the spec's ``2**-200`` relative half-width of any row's
    ``1/sqrt(σ² + ε) <= 1/sqrt(ε)``."""
    rule = OP_TABLE[name].slack_rules()
    assert isinstance(rule, LayerNorm)
    c = np.array([F(5)], dtype=object)
    same, half = rule._rsqrt(c, eps)
    r_eps, e = exact_rsqrt(eps)
    want = (r_eps + e) / 2 ** (TANH_PRECISION_BITS - 1)
    call = f"OP_TABLE[{name}].slack_rules()._rsqrt([5], {eps})"
    assert same is c, f"{call}: the row {same!r}, but should be the argument itself"
    assert half == want, f"{call}: half-width {float(half)!r}, but should be {float(want)!r}"
    assert half * _sqrt(eps) >= F(1, 2**199) * (1 - ROOT), (
        f"{call}: half-width {float(half)!r} below 2**-199/sqrt(ε)")
    for variance in (F(0), F(1, 3), F(10)):
        assert half >= 2 * exact_rsqrt(variance + eps)[1], (
            f"{call}: half-width {float(half)!r} below twice the spec's at σ²={variance}")


# ----------------------------------------------------------------------------------------
# _trace: the values and slacks the budget reads


def _trace_case() -> tuple[Program, Enclosed]:
    """``x`` an input, ``t = tanh(x)``, ``s = add(t, x)`` the argument of
    ``n = layer_norm(s)``: balls with low parts and radii chosen so that the largest
    ``|lo| + rad`` is neither the largest ``|lo|`` nor the largest ``rad``, and is not a
    float (``2**-59 (1 + 2**-53)``: a sum rounded to nearest falls below it); ``n``'s
    radius is infinite."""
    program = Program((Input("x", (2, 3)),),
                      (Node("t", "tanh", ("x",)), Node("s", "add", ("t", "x")),
                       Node("n", "layer_norm", ("s",), eps=EPS)), "n")
    e = 2.0**-60
    lo = np.array([[e, 0.0, -e], [0.0, e / 2, 0.0]])
    rad = np.array([[0.0, 1.5 * e, e * (1 + 2.0**-52)], [0.0, e, 0.0]])  # |lo| + rad: no float
    mid = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])
    values = {
        "x": Ball.exact(mid),
        "t": Ball.of(np.tanh(mid), rad),
        "s": Ball(mid * 2, rad, lo),
        "n": Ball(mid / 2, np.array([[0.0, math.inf, 1.0], [0.0, 0.0, 0.0]]), lo),
    }
    return program, Enclosed(values, {}, values["n"], {})


def test_trace_values_are_midpoints_tanh_outputs_fractions_and_norm_arguments_exact() -> None:
    program, enclosed = _trace_case()
    trace = enclosure._trace(program, enclosed)
    for name in ("x", "n"):  # plain midpoints, float64
        got = np.asarray(trace.values[name])
        assert got.dtype == np.float64 and np.array_equal(got, enclosed.values[name].mid), (
            f"_trace values[{name}]={got.tolist()}, but should be the midpoints")
    t, s = enclosed.values["t"], enclosed.values["s"]
    for name, want in (("t", [[F(m) for m in row] for row in t.mid.tolist()]),
                       ("s", _exact_rows(s))):
        got = np.asarray(trace.values[name])
        kinds = {type(v) for v in got.reshape(-1)}
        assert kinds == {Fraction} and got.tolist() == want, (
            f"_trace values[{name}]={got.tolist()} of {kinds}, but should be the Fractions "
            f"{want} ({'the midpoints' if name == 't' else 'mid + lo, exactly'})")


def test_trace_slack_is_the_largest_lo_plus_rad_rounded_up_and_2_pow_1100_if_infinite() -> None:
    program, enclosed = _trace_case()
    trace = enclosure._trace(program, enclosed)
    assert trace.slack["x"] == 0, f"slack[x]={trace.slack['x']}, but an exact ball's is 0"
    assert trace.slack["n"] == F(2) ** 1100, (
        f"slack[n]={float(trace.slack['n'])!r}, but an infinite radius gives 2**1100")
    for name in ("t", "s"):
        ball = enclosed.values[name]
        want = max(abs(low) + r for lr, rr in zip(_rows(ball.lo), _rows(ball.rad), strict=True)
                   for low, r in zip(lr, rr, strict=True))
        got = trace.slack[name]
        assert isinstance(got, Fraction) and F(float(got)) == got, (
            f"slack[{name}]={got!r}, but should be a float64 value as a Fraction")
        assert want <= got <= want * (1 + MARGIN), (
            f"slack[{name}]={float(got)!r}, but should be max(|lo| + rad)={float(want)!r} "
            f"rounded up")


def test_trace_slack_of_an_empty_value_is_0() -> None:
    program = Program((Input("x", (0, 3)),), (Node("t", "tanh", ("x",)),), "t")
    values = {"x": Ball.exact(np.zeros((0, 3))), "t": Ball.exact(np.zeros((0, 3)))}
    trace = enclosure._trace(program, Enclosed(values, {}, values["t"], {}))
    assert trace.slack == {"x": 0, "t": 0}, f"slack {trace.slack}, but should be 0 for both"
