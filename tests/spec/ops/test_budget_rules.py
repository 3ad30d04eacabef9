"""Tests that pin every op's floating-point budget rules, one rule at a time.

``spec/ops/``'s ``budget``, ``budget_vjp`` and ``budget_jvp`` rules are the error
analysis of docs/error-budget.md written as code. The budget's own tests
(``tests/spec/test_budget.py``, in reverse and forward mode and on the norms) run whole
programs on backends and take minutes, too slow for mutation testing, and a backend's
observed error is far below the bound, so a rule that dropped a term still passed them.
Here each rule is called alone on small hand-chosen bounds and its result is compared with
the formula of docs/error-budget.md, computed independently in exact Fractions.

How close "equal" is: every rule rounds its result up (docs/error-budget.md, "Rounding the
bound itself up"): ``x (1 + (n + 64) 2**-50)`` plus subnormals, then one float64 step, ``n``
the longest sum. The checks allow exactly that and the float64 rounding of the formula's
few steps (a relative ``2**-48``; the norms read ``w`` and ``r`` from the exact trace
through float64 steps with a documented ``2**-40`` margin, so ``2**-30`` there). The
requests are in bfloat16 (``u = 2**-8``), where every term of a formula, second-order
products of errors included, is far above those margins; the subnormal terms are pinned
on zero inputs, where they are all there is.

Beside the formulas, the law they implement, for add, mul and scale: a float16 result
rounded once from inputs off by up to their bounds lies inside, and the worst such result
reaches at least half of the bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from resverify.spec.budget import _accumulate
from resverify.spec.ops import OP_TABLE, Site
from resverify.spec.rational import of_mpf
from resverify.spec.rounding import LARGEST, TINY, UNIT_ROUNDOFF, Bound, Ctx, Parts

F = Fraction
DTYPE = "bfloat16"
U = UNIT_ROUNDOFF[DTYPE]
SUB = TINY[DTYPE]
EXACT = F(1, 2**48)
"""The relative error of the float64 steps of a rule on the dyadic inputs used here."""
NORM = F(1, 2**30)
"""The same for the norms, whose ``w`` and ``r`` are float64 values from the exact trace."""
TANH_ULPS = 4
"""docs/error-budget.md, "The tanh allowance"."""
SQRT_ULPS = 2
"""docs/error-budget.md, the norms' ``1/sqrt`` step."""

NONE = F(0)
Obj = np.ndarray  # object arrays of Fractions


def _ctx(dtype: str = DTYPE) -> Ctx:
    return Ctx(dtype, float(UNIT_ROUNDOFF[dtype]), float(TINY[dtype]))


def _obj(values: object) -> Obj:
    return np.vectorize(F, otypes=[object])(np.asarray(values, dtype=object))


def _bound(mag: object, err: object) -> Bound:
    return Bound(np.asarray(mag, dtype=np.float64), np.asarray(err, dtype=np.float64))


def _gamma(n: int, dtype: str = DTYPE) -> Fraction:
    nu = max(n, 0) * UNIT_ROUNDOFF[dtype]
    return nu / (1 - nu)


def _site(exact: object = 0, slack: Fraction = NONE, alpha: Fraction | None = None,
          out: object = 0, out_slack: Fraction = NONE) -> Site:
    return Site(alpha, [_obj(exact)], [slack], _obj(out), out_slack)


def _assert_rounded_up(actual: np.ndarray, formula: Obj, terms: int, call: str,
                       rel: Fraction = EXACT) -> None:
    """``actual`` is ``formula`` rounded up as docs/error-budget.md says, element by element:
    ``formula (1 + (terms + 64) 2**-50)`` within the relative ``rel`` of the float64 steps,
    plus ``terms + 64`` subnormals of room and one float64 step (exactly that for a 0)."""
    __tracebackhide__ = True
    formula = np.asarray(formula, dtype=object)
    assert actual.shape == formula.shape, (
        f"shape {actual.shape}, but should be {formula.shape} [{call}]")
    grow, room = 1 + (terms + 64) * F(1, 2**50), (terms + 64) * F(1, 2**1074)
    for index in np.ndindex(*formula.shape):
        got, want = F(float(actual.item(index))), F(formula.item(index)) * grow
        low, high = want * (1 - rel), want * (1 + rel) + room + F(1, 2**1074)
        if not want:  # only the absolute room, exact in subnormals, and one step up
            low = high
        assert low <= got <= high, (
            f"{call}[{list(index)}]={float(got)!r}, but should be {float(want)!r} "
            f"(the formula {float(formula.item(index))!r} rounded up, terms={terms}, "
            f"rel={float(rel):.3g})")


def _assert_bound(actual: Bound, mag: Obj, err: Obj, terms: int, call: str,
                  rel: Fraction = EXACT) -> None:
    __tracebackhide__ = True
    _assert_rounded_up(actual.mag, mag, terms, f"{call}.mag", rel)
    _assert_rounded_up(actual.err, err, terms, f"{call}.err", rel)


def _hat(b: Bound) -> Obj:
    return _obj(b.mag) + _obj(b.err)


def _m(b: Bound) -> Obj:
    return _obj(b.mag)


def _e(b: Bound) -> Obj:
    return _obj(b.err)


# ----------------------------------------------------------------------------------------
# add, residual_add, sum: sums and un-broadcasting


A = _bound([[1, 2, 4], [F(1, 2), 3, 0]], [[F(1, 16), F(1, 4), 0], [F(1, 8), F(1, 32), 1]])
B = _bound([F(3, 4), 5, 2], [F(1, 64), F(1, 2), F(1, 8)])


def test_add_budget_is_both_errors_plus_u_times_the_computed_sums_size() -> None:
    """``e_a + e_b + u z``, ``z = min(hat_a + hat_b, |v| + e_a + e_b)`` with ``v`` the exact
    sum (its slack added), b broadcast along the rows; the magnitude ``min(|a| + |b|, |v|)``.
    On the exact ``|a| - |b|`` (cancelling) the second term binds where the errors are
    small, and ``hat_a + hat_b`` where they are not."""
    slack = F(1, 1024)
    exact = _m(A) - _m(B)
    got = OP_TABLE["add"].budget(_ctx(), _site(out=exact, out_slack=slack), [A, B])
    size = np.vectorize(min, otypes=[object])(
        _hat(A) + _hat(B), abs(exact) + slack + _e(A) + _e(B))
    mag = np.vectorize(min, otypes=[object])(_m(A) + _m(B), abs(exact) + slack)
    _assert_bound(got, mag, _e(A) + _e(B) + U * size, 0, "add(A, B) at v = |a| - |b|")
    assert (size < _hat(A) + _hat(B)).any() and (size == _hat(A) + _hat(B)).any(), size
    got = OP_TABLE["add"].budget_jvp(_ctx(), _site(), [A, A], A, [B, A])
    _assert_bound(got, _m(B) + _m(A), _e(B) + _e(A) + U * (_hat(B) + _hat(A)), 0,
                  "add jvp(t=(B, A))")


def _sum_to(x: Obj, shape: tuple[int, ...]) -> Obj:
    """``x`` summed over the axes broadcasting added or stretched to reach it from ``shape``."""
    extra = x.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + i for i, n in enumerate(shape)
                                       if n == 1 and x.shape[extra + i] != 1)
    return np.asarray(x.sum(axis=axes), dtype=object).reshape(shape)


def _unbroadcast_formula(g: Bound, shape: tuple[int, ...]) -> tuple[Obj, Obj, int]:
    """Σ over the N copies of each element: ``Σ e + gamma_{N-1} Σ hat`` (and ``Σ |g|``)."""
    copies = g.mag.size // max(1, math.prod(shape))
    return (_sum_to(_m(g), shape),
            _sum_to(_e(g), shape) + _gamma(copies - 1) * _sum_to(_hat(g), shape), copies)


@pytest.mark.parametrize("shapes", [((2, 3), (3,)), ((2, 3), (2, 1)), ((2, 3), ()),
                                    ((2, 3), (1, 3)), ((2, 3), (1, 1)), ((2, 3), (2, 3))])
def test_add_vjp_charges_each_broadcast_argument_the_sum_of_its_copies(
        shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    """Un-broadcasting N copies is a sum of N: ``Σ e + gamma_{N-1} Σ hat``, N-term sums."""
    left, right = shapes
    args = [_bound(np.ones(left), np.zeros(left)), _bound(np.ones(right), np.zeros(right))]
    got = OP_TABLE["add"].budget_vjp(_ctx(), _site(), args, A, A)
    assert len(got) == 2, f"{len(got)} gradients, but should be 2 [add vjp {shapes}]"
    for grad, shape in zip(got, shapes, strict=True):
        mag, err, copies = _unbroadcast_formula(A, shape)
        _assert_bound(grad, mag, err, copies, f"add vjp {shapes} -> {shape}")


def test_residual_add_vjp_passes_the_cotangent_bound_unchanged_to_both() -> None:
    got = OP_TABLE["residual_add"].budget_vjp(_ctx(), _site(), [A, A], A, A)
    assert len(got) == 2, f"{len(got)} gradients, but should be 2 [residual_add vjp]"
    for grad in got:
        assert np.array_equal(grad.mag, A.mag) and np.array_equal(grad.err, A.err), (
            f"residual_add vjp gave {grad}, but should be the cotangent {A}")


def test_sum_budget_is_the_errors_plus_gamma_n_minus_1_of_the_computed_sizes() -> None:
    """A sum of N: ``Σ e + gamma_{N-1} Σ hat``, for the value and for the tangent."""
    n = A.mag.size
    want = (_obj(_m(A).sum()), _obj(_e(A).sum() + _gamma(n - 1) * _hat(A).sum()))
    _assert_bound(OP_TABLE["sum"].budget(_ctx(), _site(), [A]), *want, n, "sum budget(A)")
    got = OP_TABLE["sum"].budget_jvp(_ctx(), _site(), [B], B, [A])
    _assert_bound(got, *want, n, "sum jvp(B; t=A)")


def test_sum_vjp_copies_the_cotangent_bound_to_every_element() -> None:
    g = _bound(F(3, 2), F(1, 8))
    (got,) = OP_TABLE["sum"].budget_vjp(_ctx(), _site(), [A], g, g)
    assert np.array_equal(got.mag, np.full(A.mag.shape, 1.5)) and np.array_equal(
        got.err, np.full(A.mag.shape, 0.125)), f"sum vjp gave {got}, but should be copies of {g}"


# ----------------------------------------------------------------------------------------
# mul and scale: one rounded product


def _product(x: Bound, y: Bound) -> tuple[Obj, Obj]:
    """The mul rule: ``|a| e_b + |b| e_a + e_a e_b + u hat_a hat_b`` plus one subnormal."""
    return _m(x) * _m(y), (_m(x) * _e(y) + _m(y) * _e(x) + _e(x) * _e(y)
                           + U * _hat(x) * _hat(y) + SUB)


ZERO = _bound(np.zeros((2, 3)), np.zeros((2, 3)))


@pytest.mark.parametrize(("x", "y"), [(A, B), (B, A), (ZERO, B), (ZERO, ZERO)])
def test_mul_budget_is_the_product_rule_charged_on_the_computed_products_size(
        x: Bound, y: Bound) -> None:
    """``P + u z + tiny``, ``P = |a| e_b + |b| e_a + e_a e_b``, ``z = min(hat_a hat_b, |v| +
    P)`` with ``v`` the exact product (here half the magnitudes' product, its slack added):
    the rounding of the computed product, which is within ``P`` of ``v``; the magnitude
    ``min(|a| |b|, |v|)``. With ``v`` the magnitudes' product it is the plain product rule."""
    slack = F(1, 4096)
    for exact, call in ((_m(x) * _m(y) / 2, "at v = |a||b|/2"), (_m(x) * _m(y), "at |a||b|")):
        got = OP_TABLE["mul"].budget(_ctx(), _site(out=exact, out_slack=slack), [x, y])
        carried = _m(x) * _e(y) + _m(y) * _e(x) + _e(x) * _e(y)
        least = np.vectorize(min, otypes=[object])
        size = least(_hat(x) * _hat(y), abs(exact) + slack + carried)
        mag = least(_m(x) * _m(y), abs(exact) + slack)
        _assert_bound(got, mag, carried + U * size + SUB, 0, f"mul budget {call}")


def test_mul_jvp_is_two_products_and_their_rounded_sum() -> None:
    """``t_a b + a t_b``: ``E₁ + E₂ + u (hat₁ + hat₂)``."""
    ta, tb = _bound(np.full((2, 3), 2.0), np.full((2, 3), 0.25)), B
    got = OP_TABLE["mul"].budget_jvp(_ctx(), _site(), [A, B], A, [ta, tb])
    m1, e1 = _product(ta, B)
    m2, e2 = _product(A, tb)
    _assert_bound(got, m1 + m2, e1 + e2 + U * (m1 + e1 + m2 + e2), 0, "mul jvp")
    got = OP_TABLE["mul"].budget_jvp(_ctx(), _site(), [ZERO, ZERO], ZERO, [ZERO, ZERO])
    _assert_bound(got, _m(ZERO), _obj(np.full((2, 3), 2 * SUB * (1 + U))), 0, "mul jvp(0)")


@pytest.mark.parametrize(("left", "right"), [((2, 3), (3,)), ((3,), (2, 3)), ((2, 3), (2, 1)),
                                             ((2, 3), ()), ((2, 3), (2, 3))])
def test_mul_vjp_is_one_product_per_element_then_the_sum_of_its_copies(
        left: tuple[int, ...], right: tuple[int, ...]) -> None:
    """``ḡ b`` for a (and ``ḡ a`` for b): the product rule per element, then un-broadcast as
    a sum of N products: ``Σ E + gamma_{N-1} Σ (|ḡ||b| + E)``."""
    a = _bound(np.full(left, 1.5), np.full(left, 0.125))
    b = _bound(np.full(right, 3.0), np.full(right, 0.5))
    g = _bound(A.mag + 1, A.err + 0.25)
    got = OP_TABLE["mul"].budget_vjp(_ctx(), _site(), [a, b], g, g)
    assert len(got) == 2, f"{len(got)} gradients, but should be 2 [mul vjp]"
    for grad, (arg, other) in zip(got, ((a, b), (b, a)), strict=True):
        size, err = _product(g, _bound(np.broadcast_to(other.mag, g.mag.shape),
                                       np.broadcast_to(other.err, g.mag.shape)))
        shape = arg.mag.shape
        copies = size.size // max(1, arg.mag.size)
        total = _sum_to(err, shape) + _gamma(copies - 1) * _sum_to(size + err, shape)
        _assert_bound(grad, _sum_to(size, shape), total, copies,
                      f"mul vjp {left} x {right} -> {shape}")


def _alpha_miss(alpha: Fraction, dtype: str = DTYPE) -> Fraction:
    """``|α̂ - α|``: ``u|α|``, plus ``2**-53 |α|`` through float64, plus a subnormal."""
    extra = 0 if dtype == "float64" else F(1, 2**53)
    return (UNIT_ROUNDOFF[dtype] + extra) * abs(alpha) + TINY[dtype]


@pytest.mark.parametrize("alpha", [F(3, 2), F(-5, 4)])
@pytest.mark.parametrize("rule", ["budget", "budget_vjp", "budget_jvp"])
def test_scale_is_alpha_rounded_then_one_product(alpha: Fraction, rule: str) -> None:
    """``|α| e_a + |α̂ - α| hat_a + u |α̂| hat_a`` (``|α̂| <= |α| + |α̂ - α|``), a subnormal."""
    x = _bound([[2, 0], [F(1, 2), 8]], [[F(1, 4), 0], [F(1, 16), 1]])
    other = _bound([[7, 7], [7, 7]], [[3, 3], [3, 3]])  # what the rule must not read
    op = OP_TABLE["scale"]
    at = _site(alpha=alpha)
    got = (op.budget(_ctx(), at, [x]) if rule == "budget"
           else op.budget_vjp(_ctx(), at, [other], other, x)[0] if rule == "budget_vjp"
           else op.budget_jvp(_ctx(), at, [other], other, [x]))
    size, miss = abs(alpha), _alpha_miss(alpha)
    err = size * _e(x) + miss * _hat(x) + U * (size + miss) * _hat(x) + SUB
    _assert_bound(got, size * _m(x), err, 0, f"scale {rule}(alpha={alpha})")


# ----------------------------------------------------------------------------------------
# linear: dot products


def _dot(x: Bound, w: Bound, n: int) -> tuple[Obj, Obj]:
    """The mul rule's propagated part summed over n terms, ``gamma_n (x̂ @ ŵ)``, n subnormals."""
    mx, ex, mw, ew = _m(x), _e(x), _m(w), _e(w)
    err = mx @ ew + ex @ mw + ex @ ew + _gamma(n) * (_hat(x) @ _hat(w)) + n * SUB
    return mx @ mw, err


X = _bound([[[1, 2]], [[F(1, 2), 0]]], [[[F(1, 8), 0]], [[F(1, 4), F(1, 16)]]])  # (2, 1, 2)
W = _bound([[1, 2, 3], [F(1, 4), 0, 5]], [[0, F(1, 2), F(1, 32)], [F(1, 8), 1, 0]])  # (2, 3)
G = _bound(np.arange(6, dtype=float).reshape(2, 1, 3) / 2,
           np.array([[[F(1, 4), 0, 1]], [[F(1, 8), F(1, 2), 2]]], dtype=float))  # (2, 1, 3)


def _flat(b: Bound, width: int) -> Bound:
    return Bound(b.mag.reshape(-1, width), b.err.reshape(-1, width))


def _t(b: Bound) -> Bound:
    return Bound(b.mag.T, b.err.T)


def test_linear_budget_is_a_dot_product_of_length_d_in() -> None:
    got = OP_TABLE["linear"].budget(_ctx(), _site(), [X, W])
    mag, err = _dot(_flat(X, 2), W, 2)
    _assert_bound(got, mag.reshape(2, 1, 3), err.reshape(2, 1, 3), 2, "linear(X, W)", EXACT)


def test_linear_vjps_are_dot_products_over_d_out_and_over_the_rows() -> None:
    """``x̄ = ḡ wᵀ`` (length d_out = 3) and ``w̄ = xᵀ ḡ`` (length: the 2 rows of x)."""
    gx, gw = OP_TABLE["linear"].budget_vjp(_ctx(), _site(), [X, W], G, G)
    mag, err = _dot(_flat(G, 3), _t(W), 3)
    _assert_bound(gx, mag.reshape(2, 1, 2), err.reshape(2, 1, 2), 3, "linear vjp x̄")
    mag, err = _dot(_t(_flat(X, 2)), _flat(G, 3), 2)
    _assert_bound(gw, mag, err, 2, "linear vjp w̄")


def test_linear_jvp_is_2n_products_summed_in_any_order() -> None:
    """``t_x w + x t_w``: both propagated parts plus ``gamma_2n`` of both magnitude products
    and 2n subnormals."""
    tx = _bound([[[3, 1]], [[0, F(1, 2)]]], [[[F(1, 2), F(1, 64)]], [[0, F(1, 8)]]])
    tw = _bound([[2, 0, 1], [1, 1, F(1, 2)]], [[F(1, 4), 0, F(1, 8)], [0, F(1, 16), 1]])
    got = OP_TABLE["linear"].budget_jvp(_ctx(), _site(), [X, W], G, [tx, tw])
    pairs = [(_flat(tx, 2), W), (_flat(X, 2), tw)]
    mag = sum((_m(p) @ _m(q) for p, q in pairs), _obj(np.zeros((2, 3))))
    err = sum((_m(p) @ _e(q) + _e(p) @ _m(q) + _e(p) @ _e(q) for p, q in pairs),
              _obj(np.zeros((2, 3))))
    err = err + _gamma(4) * sum((_hat(p) @ _hat(q) for p, q in pairs), _obj(np.zeros((2, 3))))
    _assert_bound(got, mag.reshape(2, 1, 3), (err + 4 * SUB).reshape(2, 1, 3), 4, "linear jvp")


# ----------------------------------------------------------------------------------------
# relu: exact, with a sign that may flip within the error


RELU_IN = [F(2), F(-2), F(1, 16), F(-1, 16), F(0), F(1, 8), F(-1, 4)]
"""Far positive, far negative, near 0 on both sides, 0, at and beyond the error 1/8."""


def _relu_case(err: Sequence[float], slack: Fraction) -> tuple[Site, Bound, list[bool],
                                                                 list[bool]]:
    """The exact input, its bound, and which elements are positive and of uncertain sign
    (``|a| <= e_a + slack``, and some error at all); a column, so that every mask keeps
    the argument's shape."""
    at = _site([[v] for v in RELU_IN], slack)
    x = _bound([[abs(v)] for v in RELU_IN], [[e] for e in err])
    positive = [v > 0 for v in RELU_IN]
    unsure = [(e == math.inf or abs(v) <= F(e) + slack) and (e > 0 or slack > 0)
              for v, e in zip(RELU_IN, err, strict=True)]
    return at, x, positive, unsure


RELU_CASES = [([1 / 8] * 7, F(0)), ([0.0] * 7, F(1, 8)), ([0.0] * 7, F(0)),
              ([1 / 8, 0, 1 / 8, 0, 0, 0, 1 / 4], F(0)), ([math.inf] + [0.0] * 6, F(0))]


@pytest.mark.parametrize(("err", "slack"), RELU_CASES)
def test_relu_budget_keeps_the_input_bound_where_positive_or_of_uncertain_sign(
        err: list[float], slack: Fraction) -> None:
    at, x, positive, unsure = _relu_case(err, slack)
    got = OP_TABLE["relu"].budget(_ctx(), at, [x])
    keep = np.array([[p or s] for p, s in zip(positive, unsure, strict=True)])
    want = Bound(np.where(keep, x.mag, 0.0), np.where(keep, x.err, 0.0))
    assert np.array_equal(got.mag, want.mag) and np.array_equal(got.err, want.err), (
        f"relu budget = {got}, but should be {want} [exact {RELU_IN}, err {err}, "
        f"slack {slack}]")


@pytest.mark.parametrize(("err", "slack"), RELU_CASES)
def test_relu_vjp_and_jvp_charge_the_whole_cotangent_where_the_sign_may_flip(
        err: list[float], slack: Fraction) -> None:
    at, x, positive, unsure = _relu_case(err, slack)
    g = _bound([[3]] * 7, [[F(1, 2)]] * 7)
    want_err = [[3.5 if s else 0.5 if p else 0.0] for p, s in zip(positive, unsure,
                                                                  strict=True)]
    want_mag = [[3.0 if p or s else 0.0] for p, s in zip(positive, unsure, strict=True)]
    op = OP_TABLE["relu"]
    for rule, got in (("vjp", op.budget_vjp(_ctx(), at, [x], x, g)[0]),
                      ("jvp", op.budget_jvp(_ctx(), at, [x], x, [g]))):
        assert got.err.tolist() == want_err and got.mag.tolist() == want_mag, (
            f"relu {rule} = {got}, but should be mag {want_mag}, err {want_err} "
            f"[exact {RELU_IN}, err {err}, slack {slack}]")


# ----------------------------------------------------------------------------------------
# tanh


@pytest.mark.parametrize(("mag", "err"), [(F(1, 2), F(1, 8)), (F(3, 4), F(1, 2)),
                                          (F(3), F(1, 4)), (F(0), F(0))])
def test_tanh_budget_is_1_lipschitz_plus_tanh_ulps_of_the_result(mag: Fraction,
                                                                  err: Fraction) -> None:
    """``e_a + TANH_ULPS 2u min(hat_a, 1)`` plus TANH_ULPS subnormals; ``|t| <= min(|a|, 1)``."""
    x = _bound([mag], [err])
    got = OP_TABLE["tanh"].budget(_ctx(), _site([0]), [x])
    want = err + 2 * TANH_ULPS * U * min(mag + err, F(1)) + TANH_ULPS * SUB
    _assert_bound(got, _obj([min(mag, F(1))]), _obj([want]), 0, f"tanh budget(|a|={mag}, e={err})")


TANH_OUT = [F(1, 2), F(0), F(-3, 4), F(7, 8)]
"""Carried tanh values (the exact side's midpoints)."""


@pytest.mark.parametrize("slack", [F(0), F(1, 16)])
@pytest.mark.parametrize("rule", ["budget_vjp", "budget_jvp"])
def test_tanh_vjp_and_jvp_follow_the_slope_rule(slack: Fraction, rule: str) -> None:
    """``|ḡ| E + s e_ḡ + e_ḡ E + u hat_ḡ (s + E)``, ``E = e_t (2|t| + e_t) + 5u``, the slope
    ``s = 1 - t²`` from the carried t, widened by its slack σ: ``1 - t² + σ(2 + σ)``, at
    most 1."""
    y = _bound([F(1, 2), F(0), F(3, 4), F(2)], [F(1, 8), F(1, 4), 0, F(1, 2)])
    g = _bound([2, 3, F(1, 2), 1], [F(1, 4), 0, F(1, 32), 1])
    at = _site([0] * 4, F(0), None, TANH_OUT, slack)
    op = OP_TABLE["tanh"]
    got = (op.budget_vjp(_ctx(), at, [y], y, g)[0] if rule == "budget_vjp"
           else op.budget_jvp(_ctx(), at, [y], y, [g]))
    slope = _obj([min(F(1), 1 - v * v + slack * (2 + slack)) for v in TANH_OUT])
    t_size = _obj([min(v, F(1)) for v in _m(y)])
    big_e = _e(y) * (2 * t_size + _e(y)) + 5 * U
    err = _m(g) * big_e + slope * _e(g) + _e(g) * big_e + U * _hat(g) * (slope + big_e) + SUB
    _assert_bound(got, _m(g) * slope, err, 0, f"tanh {rule}(slack={slack})")


# ----------------------------------------------------------------------------------------
# the law behind the formulas: sound for a backend that rounds once, and attained


def _float16_inputs(rng: np.random.Generator, count: int) -> tuple[np.ndarray, list[Fraction]]:
    """Computed float16 inputs in [1, 4) and exact values they may be off from: 0 or a few
    float16 ulps below (an upstream error, in the direction that adds up)."""
    computed = (1 + rng.integers(0, 3 * 2**10, count) / 2**10).astype(np.float16)
    below = [int(k) * F(1, 2**11) for k in rng.integers(0, 4, count)]
    return computed, [F(float(v)) - d for v, d in zip(computed, below, strict=True)]


@pytest.mark.parametrize("name", ["add", "mul", "scale"])
def test_rounded_once_float16_results_lie_inside_and_reach_half_the_bound(name: str) -> None:
    """Sound: a float16 backend that rounds the op once (NumPy: exact in float32 for these
    operands, then one rounding to float16; α = 1/3 rounded to float16 through float64
    first), fed inputs off by up to their error bound in the same direction, lands inside
    the bound. Not loose: over the 2000 cases, those whose inputs are exact reach at least
    half of their bound (the op's own rounding, attained near a midpoint)."""
    rng = np.random.default_rng(20261130)
    (a16, a), (b16, b) = _float16_inputs(rng, 2000), _float16_inputs(rng, 2000)
    alpha = F(1, 3)

    def bound_of(computed: np.ndarray, exact: list[Fraction]) -> Bound:
        return Bound(np.array([float(v) for v in exact]),
                     np.array([float(F(float(c)) - v) for c, v in zip(computed, exact,
                                                                       strict=True)]))

    args = [bound_of(a16, a)]
    if name == "scale":
        out16 = a16 * np.float16(float(alpha))
        exact = [v * alpha for v in a]
    else:
        args.append(bound_of(b16, b))
        out16 = a16 + b16 if name == "add" else a16 * b16
        exact = [p + q if name == "add" else p * q for p, q in zip(a, b, strict=True)]
    assert out16.dtype == np.float16
    bound = OP_TABLE[name].budget(_ctx("float16"), _site(alpha=alpha, out=exact), args).err
    ratios = [abs(F(float(o)) - e) / F(float(m))
              for o, e, m in zip(out16, exact, bound.tolist(), strict=True)]
    worst = max(ratios)
    assert worst <= 1, (
        f"{name}: error {float(worst):.4g} of its bound at case {ratios.index(worst)}, "
        "but a once-rounded float16 result should lie inside [float16]")
    exact_inputs = [r for r, *errs in zip(ratios, *(arg.err for arg in args), strict=True)
                    if not any(errs)]
    reached = max(exact_inputs)
    assert len(exact_inputs) > 50 and reached >= F(1, 2), (
        f"{name}: the largest error over {len(exact_inputs)} cases with exact inputs is "
        f"{float(reached):.4g} of its bound, but should reach at least 1/2 (the bound is too "
        "loose) [float16]")


# ----------------------------------------------------------------------------------------
# underflow: on zero bounds only the subnormal terms remain


def _zeros(*shape: int) -> Bound:
    return _bound(np.zeros(shape), np.zeros(shape))


def _zero_cases() -> list[tuple[str, list[Bound], list[Fraction], list[int]]]:
    """(rule, its bounds on zero inputs, the error each must be, the terms each rounds)."""
    c, z = _ctx(), _site()
    tanh_at = _site([0, 0], F(0), None, [F(1, 2), F(0)])
    mul = OP_TABLE["mul"].budget_vjp(c, z, [_zeros(2, 3), _zeros(3)], _zeros(2, 3),
                                     _zeros(2, 3))
    linear = OP_TABLE["linear"]
    return [
        # ḡ·b for a: one product each; ḡ·a for b: two products summed, gamma_1 of their sizes
        ("mul vjp", mul, [SUB, 2 * SUB + _gamma(1) * 2 * SUB], [1, 2]),
        ("linear (n = 8)", [linear.budget(c, z, [_zeros(2, 8), _zeros(8, 3)])], [8 * SUB], [8]),
        ("linear vjp (d_out = 3, 2 rows)",
         linear.budget_vjp(c, z, [_zeros(2, 8), _zeros(8, 3)], _zeros(2, 3), _zeros(2, 3)),
         [3 * SUB, 2 * SUB], [3, 2]),
        ("linear jvp (2n = 16 products)",
         [linear.budget_jvp(c, z, [_zeros(2, 8), _zeros(8, 3)], _zeros(2, 3),
                            [_zeros(2, 8), _zeros(8, 3)])], [16 * SUB], [16]),
        ("tanh vjp", OP_TABLE["tanh"].budget_vjp(c, tanh_at, [_zeros(2)], _zeros(2),
                                                 _zeros(2)), [SUB], [0]),
        ("tanh jvp", [OP_TABLE["tanh"].budget_jvp(c, tanh_at, [_zeros(2)], _zeros(2),
                                                  [_zeros(2)])], [SUB], [0]),
    ]


@pytest.mark.parametrize("index", range(6))
def test_product_rules_charge_one_subnormal_per_product_on_zero_inputs(index: int) -> None:
    """A product may underflow: one smallest subnormal per product term, n for a dot
    product of length n, summed like any error (sums are exact in the subnormal range)."""
    name, got, errs, terms = _zero_cases()[index]
    assert len(got) == len(errs), f"{len(got)} bounds, but should be {len(errs)} [{name}]"
    for bound, err, n in zip(got, errs, terms, strict=True):
        _assert_bound(bound, _obj(np.zeros(bound.mag.shape)),
                      _obj(np.full(bound.err.shape, err)), n, f"{name} on zeros")


# ----------------------------------------------------------------------------------------
# layer_norm and rms_norm


def _mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


def _sqrt(x: Fraction) -> mpmath.mpf:
    return mpmath.sqrt(_mp(x))


@dataclass(frozen=True)
class Row:
    """One row's quantities from docs/error-budget.md's norm steps."""

    n: int
    c: list[Fraction]
    r: Fraction
    rho: Fraction
    big_r: Fraction
    e_r: Fraction
    e_c: list[Fraction]
    c_hat: list[Fraction]


def _row_formula(centred: bool, xs: list[Fraction], eps: Fraction, ex: list[Fraction],
                 hx: list[Fraction]) -> Row:
    """docs/error-budget.md's norm steps for one row, in Fractions (square roots at 200 bits):
    ``ex``, ``hx`` the argument's error and computed size."""
    n = len(xs)
    mean = sum(xs, F(0)) / n if centred else F(0)
    c = [v - mean for v in xs]
    w = sum((v * v for v in c), F(0)) / n + eps
    if centred:
        e_mu = sum(ex, F(0)) / n + _gamma(n + 2) * sum(hx, F(0)) / n + SUB
        e_c = [e + e_mu + U * (abs(v) + e + e_mu) for v, e in zip(c, ex, strict=True)]
    else:
        e_c = list(ex)
    c_hat = [abs(v) + e for v, e in zip(c, e_c, strict=True)]
    e_v = (sum((2 * abs(v) * e + e * e for v, e in zip(c, e_c, strict=True)), F(0)) / n
           + _gamma(n + 2) * sum((h * h for h in c_hat), F(0)) / n + 2 * SUB)
    e_eps = _alpha_miss(eps)
    e_w = e_v + e_eps + U * (w + e_v + e_eps)
    w_lo = max(w - e_w, eps * (1 - 3 * U))  # a rounded sum of squares is never negative
    with mpmath.workprec(200):
        rho = of_mpf(_mp(e_w) / (_sqrt(w_lo) * (_sqrt(w) + _sqrt(w_lo))))
        r = of_mpf(1 / _sqrt(w))
    own = 2 * SQRT_ULPS * U
    big_r = r * (1 + rho) * (1 + own)
    e_r = r * (rho + own * (1 + rho))
    return Row(n, c, r, rho, big_r, e_r, e_c, c_hat)


def _mean(v: list[Fraction]) -> Fraction:
    return sum(v, F(0)) / len(v)


def _norm_back(k: Row, centred: bool, t_mag: list[Fraction], t_err: list[Fraction],
               y_mag: list[Fraction], y_err: list[Fraction], jvp: bool
               ) -> tuple[list[Fraction], list[Fraction], list[Fraction]]:
    """The magnitude ``r (|t| + |y| mean(|t||y|))`` (plus the centring's mean), the
    error ``R (ΔA + gamma_{2n+16} T) + 3 e_r (1 + ρ)³ T`` of one row's VJP (``t``: ḡ) or
    JVP (``t``: the tangent, centred into d first), and ``T``."""
    n = k.n
    t_hat = [m + e for m, e in zip(t_mag, t_err, strict=True)]
    y_hat = [m + e for m, e in zip(y_mag, y_err, strict=True)]
    d_mag, d_hat, e_d = list(t_mag), t_hat, list(t_err)
    if centred and jvp:
        d_mag = [v + _mean(t_mag) for v in t_mag]
        d_hat = [v + _mean(t_hat) for v in t_hat]
        e_d = [v + _mean(t_err) for v in t_err]
    m_hat = _mean([a * b for a, b in zip(d_hat, y_hat, strict=True)])
    terms = [d + yh * m_hat for d, yh in zip(d_hat, y_hat, strict=True)]
    size_m = _mean([a * b for a, b in zip(d_mag, y_mag, strict=True)])
    size = [d + ym * size_m for d, ym in zip(d_mag, y_mag, strict=True)]
    inner = _mean([ed * yh + dh * ey for ed, yh, dh, ey in zip(e_d, y_hat, d_hat, y_err,
                                                               strict=True)])
    d_a = [ed + ey * m_hat + yh * inner for ed, ey, yh in zip(e_d, y_err, y_hat, strict=True)]
    if centred and not jvp:
        terms = [v + _mean(terms) for v in terms]
        size = [v + _mean(t_mag) for v in size]
        d_a = [v + _mean(t_err) for v in d_a]
    cubed = 3 * k.e_r * (1 + k.rho) ** 3
    err = [k.big_r * (a + _gamma(2 * n + 16) * t) + cubed * t + n * SUB
           for a, t in zip(d_a, terms, strict=True)]
    return [k.r * v for v in size], err, terms


@dataclass(frozen=True)
class NormCase:
    """Rows of a norm's argument (exact values) with their bounds' errors; ε."""

    name: str
    rows: list[list[Fraction]]
    eps: Fraction
    errs: list[list[Fraction]]
    lead: tuple[int, ...]
    """The leading axes the rows are laid out in (``()``: one row, a 1-D argument)."""

    @property
    def shape(self) -> tuple[int, ...]:
        return (*self.lead, len(self.rows[0]))

    def shaped(self, b: Bound) -> Bound:
        return Bound(b.mag.reshape(self.shape), b.err.reshape(self.shape))

    def __str__(self) -> str:
        return (f"{self.name}({[[str(v) for v in row] for row in self.rows]} as "
                f"{list(self.shape)}, eps={self.eps})")


def _pattern(rows: list[list[Fraction]], first: int) -> list[list[Fraction]]:
    """Distinct small dyadic errors, zero on a row of zeros."""
    return [[F(0) if not any(row) else F(1, 2 ** (first + (i + 2 * j) % 5))
             for i in range(len(row))] for j, row in enumerate(rows)]


def _norm_case(name: str, rows: list[list[int | Fraction]], eps: Fraction,
               errs: list[list[Fraction]] | None = None,
               lead: tuple[int, ...] | None = None) -> NormCase:
    exact = [[F(v) for v in row] for row in rows]
    return NormCase(name, exact, eps, errs if errs is not None else _pattern(exact, 4),
                    (len(rows),) if lead is None else lead)


NORM_CASES = [
    # w = 9, 6 and 4 (the zero row: only its subnormal terms remain)
    # (three leading axes, so that only the last one is the row's)
    _norm_case("layer_norm", [[3, 1, -1, -3], [4, 2, 2, 0], [0, 0, 0, 0]], F(4), None, (3, 1)),
    _norm_case("rms_norm", [[2, 0, 0, 2], [1, 1, 1, 1], [0, 0, 0, 0]], F(7), None, (1, 3)),
    _norm_case("layer_norm", [[4, 2]], F(3), None, ()),  # a mean of 3 to round, w = 4
    # errors far above σ²: the computed w may be as low as ε(1 - 3u), no lower
    _norm_case("layer_norm", [[F(1, 64), F(-1, 64)]], F(1), [[F(1), F(1, 2)]], ()),
    _norm_case("rms_norm", [[F(1, 64), F(-1, 64)]], F(1), [[F(1), F(1, 2)]], ()),
    # ε the smallest bfloat16 subnormal on a zero row: the variance's own subnormal terms
    # (a square and the mean may each underflow) weigh as much as ε's rounding
    _norm_case("layer_norm", [[0, 0, 0]], SUB),
    _norm_case("rms_norm", [[0, 0, 0]], SUB),
    # errors as large as the values and a small ε: the steps give about e/sqrt(ε), the
    # normalised output's own size (sqrt(n) computed, sqrt(n) true) caps it
    _norm_case("rms_norm", [[1, -1, 1, 1], [2, 0, 0, 2]], F(1, 2**20),
               [[F(1), F(1), F(1, 2), F(1)], [F(2), F(1), F(1), F(2)]]),
    # the same for layer_norm: its caps read the computed size and 1/sqrt(ε), no variance
    _norm_case("layer_norm", [[1, -1, 1, 1], [2, 0, 0, 2]], F(1, 2**20),
               [[F(1), F(1), F(1, 2), F(1)], [F(2), F(1), F(1), F(2)]]),
]


def _rows_of(b: Bound) -> tuple[list[list[Fraction]], list[list[Fraction]]]:
    return ([[F(v) for v in row] for row in b.mag.tolist()],
            [[F(v) for v in row] for row in b.err.tolist()])


def _norm_at(case: NormCase) -> tuple[Site, Bound]:
    x = _bound([[abs(v) for v in row] for row in case.rows], case.errs)
    return _site(np.array(case.rows, dtype=object).reshape(case.shape), alpha=case.eps), x


def _formulas(case: NormCase, x: Bound) -> list[Row]:
    mags, errs = _rows_of(x)
    return [_row_formula(case.name == "layer_norm", row, case.eps, e,
                         [m + v for m, v in zip(mg, e, strict=True)])
            for row, mg, e in zip(case.rows, mags, errs, strict=True)]


def _a_top(case: NormCase, k: Row) -> Fraction:
    """``min(R, 1/((1 - 4u) sqrt(ε̂)))``, ``ε̂ >= ε - its rounding``: the computed ``1/sqrt``."""
    eps_low = case.eps - _alpha_miss(case.eps)
    with mpmath.workprec(200):
        return min(k.big_r, of_mpf(1 / ((1 - _mp(2 * SQRT_ULPS * U)) * _sqrt(eps_low))))


def _mean_top(hx: list[Fraction]) -> Fraction:
    """The computed mean's bound ``mean(X)(1 + gamma_{n+2}) + tiny``."""
    return sum(hx, F(0)) / len(hx) * (1 + _gamma(len(hx) + 2)) + SUB


def _centred_cap(case: NormCase, k: Row, hx: list[Fraction], ys: list[Fraction]
                 ) -> list[Fraction | float]:
    """layer_norm's cap (docs/error-budget.md, "The output's own size caps layer_norm's"):
    ``(1 + u)³ (X_i + M) A + 4 (A + 1) tiny + min(sqrt(n), |y_i|)``, ``A`` :func:`_a_top`,
    where ``ε̂ > 0`` and that size is below half the largest value; inf for rms_norm."""
    n = len(hx)
    if case.name != "layer_norm" or case.eps - _alpha_miss(case.eps) <= 0:
        return [math.inf] * n
    a, m = _a_top(case, k), _mean_top(hx)
    root = math.isqrt(n) + (math.isqrt(n) ** 2 != n)
    sizes = [(1 + U) ** 3 * (h + m) * a + 4 * (a + 1) * SUB for h in hx]
    return [v + min(F(root), y) if v < LARGEST[DTYPE] / 2 else math.inf
            for v, y in zip(sizes, ys, strict=True)]


def _normalised_cap(case: NormCase, y: Fraction) -> Fraction | float:
    """rms_norm's cap ``sqrt(n) (1 + u) / ((1 - 4u) sqrt((1 - u)(1 - gamma_{n+2}))) +
    min(sqrt(n), |y|)`` (``sqrt(n)`` rounded up to an integer), where ``ε̂ >= 2 tiny``; none
    for layer_norm (:func:`_centred_cap`)."""
    n = len(case.rows[0])
    if case.name != "rms_norm" or case.eps - _alpha_miss(case.eps) < 2 * SUB:
        return math.inf
    root = math.isqrt(n) + (math.isqrt(n) ** 2 != n)
    with mpmath.workprec(200):
        shrink = of_mpf(_sqrt((1 - U) * (1 - _gamma(n + 2))))
    return root * (1 + U) / ((1 - 2 * SQRT_ULPS * U) * shrink) + min(F(root), y)


@pytest.mark.parametrize("case", NORM_CASES, ids=str)
def test_norm_budget_follows_the_documented_steps(case: NormCase) -> None:
    """``E_c R + |c| e_r + u ĉ R`` (a subnormal), from the mean, centred values, variance,
    ``+ ε`` and ``1/sqrt`` steps, row by row; for rms_norm at most the normalised output's
    own size, computed and true (:func:`_normalised_cap`), for layer_norm at most the
    computed output's size by ``1/sqrt(ε̂)`` and the true one's (:func:`_centred_cap`)."""
    at, x = _norm_at(case)
    got = OP_TABLE[case.name].budget(_ctx(), at, [case.shaped(x)])
    mag, err = [], []
    for k, hx in zip(_formulas(case, x), _hats(x), strict=True):
        mag.append([abs(v) * k.r for v in k.c])
        centred = _centred_cap(case, k, hx, [abs(v) * k.r for v in k.c])
        err.append([min(ec * k.big_r + abs(v) * k.e_r + U * h * k.big_r + SUB,
                        _normalised_cap(case, abs(v) * k.r), cc)
                    for v, ec, h, cc in zip(k.c, k.e_c, k.c_hat, centred, strict=True)])
    _assert_bound(got, _obj(mag).reshape(case.shape), _obj(err).reshape(case.shape),
                  len(case.rows[0]), f"{case} budget", NORM)


def _norm_y_t(case: NormCase, rows: list[Row]) -> tuple[Bound, Bound]:
    """The output's bound (``|c| r`` and small errors) and a cotangent or tangent's."""
    y = _bound([[abs(v) * k.r for v in k.c] for k in rows], _pattern(case.rows, 3))
    t = _bound([[F(i + 1 + j, 2) if any(row) else 0 for i in range(len(row))]
                for j, row in enumerate(case.rows)], _pattern(case.rows, 2))
    return y, t


def _hats(x: Bound) -> list[list[Fraction]]:
    """The argument's computed size ``X = mag + err``, row by row."""
    mags, errs = _rows_of(x)
    return [[m + e for m, e in zip(mg, er, strict=True)] for mg, er in zip(mags, errs, strict=True)]


def _centred_vjp_cap(case: NormCase, k: Row, g_hat: list[Fraction], hx: list[Fraction]
                     ) -> list[Fraction] | None:
    """layer_norm's cap of its VJP parts' summed sizes (docs/error-budget.md, "The VJP's own
    size caps layer_norm's"): ``(1 + gamma_{2n+16}) (A (G_i + mean G) + (A³ + 1) mean(G C)
    (C_i + mean C) + (2n + 16)(A³ + 1)(2 C_i + 2 mean C + 1) tiny)``, ``C = (1 + u)(X + M)``,
    where ``ε̂ > 0`` and ``4 (1 + gamma_{2n+16})(A³ + 1)(Σ G C + 1)`` is below the largest
    value; None elsewhere."""
    n = k.n
    if case.name != "layer_norm" or case.eps - _alpha_miss(case.eps) <= 0:
        return None
    a, m = _a_top(case, k), _mean_top(hx)
    cs = [(1 + U) * (h + m) for h in hx]
    c_mean, g_mean = sum(cs, F(0)) / n, sum(g_hat, F(0)) / n
    grow, cubed = 1 + _gamma(2 * n + 16), a ** 3 + 1
    gc = sum((g * v for g, v in zip(g_hat, cs, strict=True)), F(0)) / n
    if 4 * grow * cubed * (n * gc + 1) >= LARGEST[DTYPE]:
        return None
    return [grow * (a * (g + g_mean) + cubed * gc * (v + c_mean)
                    + (2 * n + 16) * cubed * (2 * v + 2 * c_mean + 1) * SUB)
            for g, v in zip(g_hat, cs, strict=True)]


def _parts_cap(case: NormCase, k: Row, g_hat: list[Fraction], hx: list[Fraction]
               ) -> tuple[list[Fraction] | None, Fraction]:
    """The norm's VJP parts' cap and the factor ``1 + gamma_{parts - 1}`` of its count."""
    if case.name == "layer_norm":
        return _centred_vjp_cap(case, k, g_hat, hx), 1 + _gamma(5)
    return _vjp_parts_cap(case, k, g_hat), 1 + _gamma(2)


def _vjp_parts_cap(case: NormCase, k: Row, g_hat: list[Fraction]) -> list[Fraction] | None:
    """rms_norm's cap of its VJP parts' summed sizes (docs/error-budget.md, "The VJP's own
    size caps rms_norm's"): ``(1 + gamma_{2n+16}) (R_top (G_i + K² ‖G‖) + (2n + 16)(R_top³ +
    1)(2 ĉ_i + 1) tiny)``, ``R_top = min(R, 1/((1 - 4u) sqrt(ε̂)))``, ``K² = 1/((1 - 4u)²
    (1 - u)(1 - gamma_{n+2}))``, where ``ε̂ >= 2 tiny`` and no intermediate ``4 (1 +
    gamma_{2n+16})(R_top³ + 1)(Σ G ĉ + 1)`` reaches the largest value; None (no cap) for
    layer_norm and elsewhere."""
    n, eta = k.n, 2 * SQRT_ULPS * U
    eps_low = case.eps - _alpha_miss(case.eps)
    if case.name != "rms_norm" or eps_low < 2 * SUB:
        return None
    with mpmath.workprec(200):
        r_top = min(k.big_r, of_mpf(1 / ((1 - _mp(eta)) * _sqrt(eps_low))))
        g_norm = of_mpf(mpmath.sqrt(_mp(sum((v * v for v in g_hat), F(0)))))
    k_sq = 1 / ((1 - eta) ** 2 * (1 - U) * (1 - _gamma(n + 2)))
    grow, cubed = 1 + _gamma(2 * n + 16), r_top ** 3 + 1
    through = 4 * grow * cubed * (sum((a * b for a, b in zip(g_hat, k.c_hat, strict=True)),
                                      F(0)) + 1)
    if through >= LARGEST[DTYPE]:
        return None
    return [grow * (r_top * (g + k_sq * g_norm) + (2 * n + 16) * cubed * (2 * h + 1) * SUB)
            for g, h in zip(g_hat, k.c_hat, strict=True)]


@pytest.mark.parametrize("case", NORM_CASES, ids=str)
@pytest.mark.parametrize("rule", ["budget_vjp", "budget_jvp"])
def test_norm_vjp_and_jvp_follow_the_documented_charge(case: NormCase, rule: str) -> None:
    """``R (ΔA + gamma_{2n+16} T) + 3 e_r (1 + ρ)³ T`` (``e_r = r (ρ + 4u(1 + ρ))`` the
    reciprocal's error, whose ``r³`` the composition meets three times), n subnormals; for
    rms_norm's VJP at most ``(1 + gamma_2)`` its parts' cap (:func:`_vjp_parts_cap`) plus the
    true gradient's size."""
    at, x = _norm_at(case)
    rows, hats = _formulas(case, x), _hats(x)
    y, t = _norm_y_t(case, rows)
    op = OP_TABLE[case.name]
    x, y_in, t_in = case.shaped(x), case.shaped(y), case.shaped(t)
    got = (op.budget_vjp(_ctx(), at, [x], y_in, t_in)[0] if rule == "budget_vjp"
           else op.budget_jvp(_ctx(), at, [x], y_in, [t_in]))
    (y_mag, y_err), (t_mag, t_err) = _rows_of(y), _rows_of(t)
    mag, err = [], []
    for k, ym, ye, tm, te, hx in zip(rows, y_mag, y_err, t_mag, t_err, hats, strict=True):
        m, e, _ = _norm_back(k, case.name == "layer_norm", tm, te, ym, ye, rule == "budget_jvp")
        if rule == "budget_vjp":
            cap, many = _parts_cap(case, k, [a + b for a, b in zip(tm, te, strict=True)], hx)
            if cap is not None:
                e = [min(v, many * p + s) for v, p, s in zip(e, cap, m, strict=True)]
        mag.append(m)
        err.append(e)
    n = len(case.rows[0])
    _assert_bound(got, _obj(mag).reshape(case.shape), _obj(err).reshape(case.shape),
                  2 * n + 16, f"{case} {rule}", NORM)


@pytest.mark.parametrize("case", NORM_CASES, ids=str)
def test_norm_vjp_counts_its_composition_parts_and_bounds_their_sizes(case: NormCase) -> None:
    """The argument's gradient as autodiff through the composition delivers it: 6 parts
    (layer_norm) or 3 (rms_norm) whose sizes sum to at most
    ``max(hat, (r + 3 e_r (1 + ρ)³)(1 + gamma_{2n+16}) T + n tiny)`` (docs/error-budget.md,
    "The argument's gradient arrives in parts"), the second at most rms_norm's cap
    (:func:`_vjp_parts_cap`)."""
    at, x = _norm_at(case)
    rows, hats = _formulas(case, x), _hats(x)
    y, g = _norm_y_t(case, rows)
    got = OP_TABLE[case.name].budget_vjp(_ctx(), at, [case.shaped(x)], case.shaped(y),
                                         case.shaped(g))[0]
    want_count = 6 if case.name == "layer_norm" else 3
    assert isinstance(got, Parts) and got.count == want_count, (
        f"{case} budget_vjp = {type(got).__name__} of {getattr(got, 'count', 1)} parts, but "
        f"should be Parts of {want_count}")
    (y_mag, y_err), (g_mag, g_err) = _rows_of(y), _rows_of(g)
    n = len(case.rows[0])
    size = []
    for k, ym, ye, gm, ge, hx in zip(rows, y_mag, y_err, g_mag, g_err, hats, strict=True):
        mag, err, terms = _norm_back(k, case.name == "layer_norm", gm, ge, ym, ye, False)
        factor = (k.r + 3 * k.e_r * (1 + k.rho) ** 3) * (1 + _gamma(2 * n + 16))
        grow = 1 + (2 * n + 16 + 64) * F(1, 2**50)  # the whole bound's rounding up
        cap, many = _parts_cap(case, k, [a + b for a, b in zip(gm, ge, strict=True)], hx)
        split = [factor * t + n * SUB for t in terms]
        if cap is not None:
            err = [min(v, many * p + s) for v, p, s in zip(err, cap, mag, strict=True)]
            split = [min(v, p) for v, p in zip(split, cap, strict=True)]
        size.append([max((m + e) * grow, v) for m, e, v in zip(mag, err, split, strict=True)])
    _assert_rounded_up(got.size, _obj(size).reshape(case.shape), 2 * n + 16,
                       f"{case} budget_vjp.size", NORM)


def test_a_value_used_k_times_charges_gamma_k_minus_1_counting_a_norms_parts() -> None:
    """``Σ e_i + gamma(k−1) Σ hat_i`` over the parts, a norm's counted as its ``count``
    parts of total size ``size``; a norm's parts alone pass on unchanged."""
    norm = Parts(_m(A).astype(np.float64) / 2, _e(A).astype(np.float64) / 4, 6,
                 np.full(A.mag.shape, 8.0))
    for parts, k in (([A, A], 2), ([A, norm], 7), ([A, norm, A], 8)):
        got = _accumulate(_ctx(), parts)
        sizes = sum((np.full(A.mag.shape, F(8), dtype=object) if isinstance(p, Parts)
                     else _hat(p) for p in parts), _obj(np.zeros(A.mag.shape)))
        mag = sum((_m(p) for p in parts), _obj(np.zeros(A.mag.shape)))
        err = sum((_e(p) for p in parts), _obj(np.zeros(A.mag.shape))) + _gamma(k - 1) * sizes
        _assert_bound(got, mag, err, k, f"accumulate of {k} parts")
    assert _accumulate(_ctx(), [norm]) is norm, "a norm's parts alone should pass on unchanged"


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("shape", [(2, 0), (0, 3)])
def test_norm_rules_give_zero_bounds_for_empty_rows(name: str, shape: tuple[int, ...]) -> None:
    x = _bound(np.zeros(shape), np.zeros(shape))
    op = OP_TABLE[name]
    at = Site(F(1), [_obj(np.zeros(shape))], [F(0)], _obj(np.zeros(shape)), F(0))
    for rule, got in (("budget", op.budget(_ctx(), at, [x])),
                      ("budget_vjp", op.budget_vjp(_ctx(), at, [x], x, x)[0]),
                      ("budget_jvp", op.budget_jvp(_ctx(), at, [x], x, [x]))):
        assert got.mag.shape == got.err.shape == shape and not got.mag.any() and not (
                got.err.any()), (
            f"{name} {rule} on shape {shape} = {got}, but should be zeros of that shape")


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize(("scale", "infinite"), [(F(110), False), (F(150), True)])
def test_norm_bounds_are_infinite_where_the_sum_of_squares_may_overflow(
        name: str, scale: Fraction, infinite: bool) -> None:
    """float16: a row whose ``Σ ĉ²`` reaches half the largest value (32752: 2·150², though
    no square alone does) has every bound ``inf``; 2·110² = 24200 does not, nor does a small
    row beside it (rows laid out as (2, 1, 2))."""
    rows = [[scale, -scale], [F(1), F(-1)]]
    x = _bound(np.array([[float(scale)] * 2, [1.0, 1.0]]).reshape(2, 1, 2), np.zeros((2, 1, 2)))
    y = _bound(np.ones((2, 1, 2)), np.zeros((2, 1, 2)))
    op, c = OP_TABLE[name], _ctx("float16")
    at = _site(np.array(rows, dtype=object).reshape(2, 1, 2), alpha=F(1))
    for rule, got in (("budget", op.budget(c, at, [x])),
                      ("budget_vjp", op.budget_vjp(c, at, [x], y, y)[0]),
                      ("budget_jvp", op.budget_jvp(c, at, [x], y, [y]))):
        want = [[[infinite, infinite]], [[False, False]]]
        assert np.isinf(got.err).tolist() == want, (
            f"{name} {rule}([±{scale}], [±1], float16).err = {got.err}, but should be inf "
            f"exactly at {want} (Σ x² = {2 * scale**2} vs {LARGEST['float16'] / 2})")


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize(("xs", "eps", "slack"), [
    ([F(4), F(2), F(-1)], F(1, 3), F(0)),  # σ² dominates
    ([F(1, 64), F(-1, 32), F(0)], F(1), F(0)),  # ε dominates
    ([F(4), F(2), F(-1)], F(1, 3), F(1, 8)),  # carried values off by up to 1/8
    ([F(1, 64), F(-1, 32), F(0)], F(1), F(1, 16)),  # slack beyond |c|: rms - 2σ < 0
])
def test_norm_rows_bound_the_true_variance_and_reciprocal_tightly(
        name: str, xs: list[Fraction], eps: Fraction, slack: Fraction) -> None:
    """``_rows``' bounds from the exact trace hold every true row its slack allows, and no
    more: a carried value off by s moves a centred one by up to 2s (the value and the
    mean), so ``|c| + 2s`` bounds ``|c|``, and the root mean square moves by 2s at most:
    ``w`` lies in ``[max(rms - 2s, 0)² + ε, (rms + 2s)² + ε]``, ``r`` at most
    ``1/sqrt`` of the low end; each within 2**-36 (a float64 margin) of those values."""
    op = OP_TABLE[name]
    c_mag, w_low, w_high, r_up = op._rows(_ctx(), _site([xs], slack, eps))  # type: ignore[attr-defined]
    mean = _mean(xs) if name == "layer_norm" else F(0)
    c = [v - mean for v in xs]
    ms = _mean([v * v for v in c])
    with mpmath.workprec(200):
        rms = _sqrt(ms)
        low = of_mpf(max(rms - _mp(2 * slack), mpmath.mpf(0)) ** 2) + eps
        high = of_mpf((rms + _mp(2 * slack)) ** 2) + eps
        r = of_mpf(1 / _sqrt(low))
    close = F(1, 2**36)
    lo, hi, r_got = F(float(w_low[0, 0])), F(float(w_high[0, 0])), F(float(r_up[0, 0]))
    assert low * (1 - close) <= lo <= low and high <= hi <= high * (1 + close), (
        f"{name} rows({xs}, eps={eps}, slack={slack}): w in [{float(lo)!r}, {float(hi)!r}], "
        f"but should be [{float(low)!r}, {float(high)!r}] rounded outward")
    assert r <= r_got <= r * (1 + close), (
        f"{name} rows: r_up={float(r_got)!r}, but should be 1/sqrt({float(low)!r}) "
        f"= {float(r)!r} rounded up")
    for got, v in zip(c_mag[0].tolist(), c, strict=True):
        want = abs(v) + 2 * slack  # rounded up, then one float64 addition (half an ulp)
        assert want * (1 - F(1, 2**52)) <= F(got) <= want * (1 + close), (
            f"{name} rows: |c|={got!r}, but should be {float(want)!r}")


@pytest.mark.parametrize(("dtype", "emax", "bits"), [("bfloat16", 127, 8), ("float16", 15, 11),
                                                    ("float32", 127, 24)])
def test_add_overflows_only_from_the_magnitude_that_rounds_to_infinity(
        dtype: str, emax: int, bits: int) -> None:
    """A causal mask's ``finfo.min`` plus a negative score lies beyond the largest finite
    value, yet rounds to it: the bound stays finite and holds torch's sum. Half a spacing
    beyond, the sum rounds to -inf (ties to even) and the bound is inf; a quarter beyond,
    finite again."""
    torch = pytest.importorskip("torch")
    kind = getattr(torch, dtype)
    largest = F(LARGEST[dtype])
    for beyond, finite in ((F(2) ** (emax - bits - 1), True), (F(2) ** (emax - bits), False),
                           (F(3), True)):
        a, b = _bound([float(largest)], [0]), _bound([float(beyond)], [0])
        exact = _obj([-(largest + beyond)])
        got = OP_TABLE["add"].budget(_ctx(dtype), _site(out=exact), [a, b])
        ran = (torch.tensor([-float(largest)], dtype=kind)
               + torch.tensor([-float(beyond)], dtype=kind)).double().item()
        call = f"add(-{float(largest)!r}, -{float(beyond)!r}) in {dtype}"
        assert np.isfinite(got.err[0]) == finite, f"{call}: bound {got.err[0]}, finite={finite}"
        assert math.isfinite(ran) == finite, f"{call}: torch gave {ran}, finite={finite}"
        if finite:
            assert abs(F(ran) - exact[0]) <= F(float(got.err[0])), (
                f"{call}: torch gave {ran}, off by {float(abs(F(ran) - exact[0]))!r}, "
                f"but the bound is {got.err[0]!r}")
