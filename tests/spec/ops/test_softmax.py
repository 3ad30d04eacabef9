"""The softmax entry's own promises: its exact enclosure, its library allowance, its budget
on drawn rows and its balls.

The op table's tests check the entry on its sample shapes (SymPy against the hand VJP and
JVP, the reference and each installed library within budget). Here: the exact value is
within its stated width of mpmath's at 600 bits; ``SOFTMAX_EXP_ULPS`` covers the exp of
the reference and the installed libraries on the range softmax feeds it (arguments <= 0);
the budget holds the reference and torch on drawn rows in float32 and float64 and refuses
a softmax without the max subtraction (its exp overflows) and a VJP without the Σ term; a
row masked with ``finfo.min`` keeps a finite bound;
the fast oracle's balls hold the spec's value and VJP.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, cast

import mpmath
import numpy as np
import pytest

from resverify.spec.ball import Ball
from resverify.spec.budget import error_budget
from resverify.spec.errors import ShapeMismatch
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, SOFTMAX_EXP_ULPS, Sample, Softmax
from resverify.spec.ops.attributes import Params
from resverify.spec.ops.base import Pullback
from resverify.spec.ops.softmax import shift_relative
from resverify.spec.request import Request
from resverify.spec.rounding import Ctx, up
from tests.spec.ops.op_checks import budget_check_catches, derivative_check_catches
from tests.spec.ops.test_exp import _libraries as exp_libraries

SOFTMAX = cast(Softmax, OP_TABLE["softmax"])
ROWS = Sample(((2, 3),), axis=1)


def _fractions(x: np.ndarray) -> np.ndarray:
    return np.array([Fraction(v) for v in x.reshape(-1).tolist()], dtype=object).reshape(x.shape)


def test_exact_softmax_is_within_its_width_of_the_true_value() -> None:
    x = np.array([[Fraction(1, 3), Fraction(-7, 2), Fraction(40), Fraction(0)],
                  [Fraction(-1200), Fraction(5), Fraction(5), Fraction(1, 10**30)]], dtype=object)
    k = Params({"axis": 1})
    y = SOFTMAX.exact([x], k)
    width = SOFTMAX.error([x], [Fraction(0)], y, k)
    with mpmath.workprec(600):
        for row, out in zip(x.tolist(), y.tolist(), strict=True):
            e = [mpmath.exp(mpmath.mpf(v.numerator) / v.denominator) for v in row]
            for ei, yi in zip(e, out, strict=True):
                miss = abs(ei / mpmath.fsum(e) - mpmath.mpf(yi.numerator) / yi.denominator)
                assert miss <= mpmath.mpf(width.numerator) / width.denominator, \
                    f"softmax={float(yi)!r} is {miss} from the true value, width {float(width)}"


def test_softmax_refuses_an_axis_past_the_last() -> None:
    with pytest.raises(ShapeMismatch, match="softmax: shape mismatch"):
        SOFTMAX.shape([(2, 3)], Params({"axis": 2}))


LOWEST = {"float64": -745.0, "float32": -104.0}
"""From exp's last subnormal up to 0, the arguments softmax gives exp."""


@pytest.mark.parametrize("dtype", sorted(LOWEST))
@pytest.mark.parametrize("library", sorted(exp_libraries()))
def test_the_softmax_exp_allowance_covers_the_reference_and_the_libraries(
        library: str, dtype: str) -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(LOWEST[dtype], 0, 1500),
                        -np.abs(rng.standard_normal(500)) * 8]).astype(dtype)
    got = exp_libraries()[library](x).astype(np.float64).tolist()
    tiny = float(np.finfo(dtype).tiny)
    worst = 0.0
    with mpmath.workprec(200):
        for v, g in zip(x.tolist(), got, strict=True):
            true = mpmath.exp(mpmath.mpf(v))
            unit = float(np.spacing(np.asarray(float(true), dtype=dtype))) if true >= tiny else 0
            miss = float(abs(mpmath.mpf(g) - true))
            worst = max(worst, miss / unit if unit else miss / (2 * tiny) * SOFTMAX_EXP_ULPS)
    assert worst <= SOFTMAX_EXP_ULPS, f"{library} exp in {dtype}: {worst} ulps"


def _request(x: np.ndarray, g: np.ndarray, dtype: str) -> Request:
    node = Node("y", "softmax", ("x",), params=Params({"axis": x.ndim - 1}))
    program = Program((Input("x", x.shape),), (node,), "y")
    return Request(program, {"x": x.astype(np.float64)}, dtype, g.astype(np.float64))


def _drawn(dtype: str, rows: int, n: int, spread: float = 6.0
           ) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    x = rng.standard_normal((rows, n)) * rng.uniform(0.5, spread, (rows, 1))
    return x.astype(dtype), rng.standard_normal((rows, n)).astype(dtype)


def _reference(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y, vjp = SOFTMAX.numpy([x], Params({"axis": x.ndim - 1}))
    return y, vjp(g)[0]


def _torch(x: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    import torch

    xt = torch.from_numpy(x).requires_grad_(True)
    y = torch.softmax(xt, -1)
    (gx,) = torch.autograd.grad(y, xt, torch.from_numpy(g))
    return y.detach().numpy(), gx.numpy()


Run = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _runs() -> dict[str, Run]:
    found: dict[str, Run] = {"numpy (reference)": _reference}
    if importlib.util.find_spec("torch") is not None:
        found["torch"] = _torch
    return found


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("library", sorted(_runs()))
def test_the_budget_holds_softmax_and_its_vjp_on_drawn_rows(library: str, dtype: str) -> None:
    x, g = _drawn(dtype, 60, 16)
    request = _request(x, g, dtype)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    y, gx = _runs()[library](x, g)
    missed = budget.misses(exact, y, {"x": gx})
    assert not missed, f"{library} softmax in {dtype}: {missed[:3]}"


def test_the_budget_refuses_a_softmax_without_the_max_subtraction() -> None:
    """``exp(x) / Σ exp(x)`` overflows in float32 once a row reaches 89; the budget allows
    inf nowhere (every softmax is at most 1)."""
    x = np.array([[90.0, 1.0, -3.0], [0.5, 0.25, -1.0]], dtype=np.float32)
    g = np.ones_like(x)
    request = _request(x, g, "float32")
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    right, grad = _reference(x, g)
    assert not budget.misses(exact, right, {"x": grad})
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        naive = e / e.sum(axis=1, keepdims=True)
    assert budget.misses(exact, naive, {"x": grad}), f"{naive} is inside the budget"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_row_masked_with_the_dtypes_most_negative_value_keeps_a_finite_bound(
        dtype: str) -> None:
    """A causal mask writes ``finfo.min`` where a score is hidden: ``x - max x`` is then
    near the dtype's largest magnitude, the relative analysis loses ``e^{u·dist}``, and the
    absolute one (``ŷ_i + y_i``, both below ``e^{-dist}``) keeps every bound finite; the
    right answer passes and one that ignores the mask is refused."""
    low = float(np.finfo(dtype).min)
    x = np.array([[0.5, low, low], [0.5, -1.25, low]], dtype=dtype)
    g = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], dtype=dtype)
    request = _request(x, g, dtype)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert np.isfinite(budget.output).all() and np.isfinite(budget.grads["x"]).all(), budget
    right, grad = _reference(x, g)
    assert not budget.misses(exact, right, {"x": grad}), budget.misses(exact, right, {"x": grad})
    unmasked, _ = _reference(np.where(x == low, 0.0, x).astype(dtype), g)
    assert budget.misses(exact, unmasked, {"x": grad}), f"{unmasked} is inside the budget"


def test_the_budget_refuses_a_vjp_without_the_sum_term() -> None:
    x, g = _drawn("float64", 4, 5)
    request = _request(x, g, "float64")
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    y, _ = _reference(x, g)
    missed = budget.misses(exact, y, {"x": y * g})
    assert missed, "a VJP of y ⊙ ḡ (no Σ term) is inside the budget"


class WithoutTheSumTerm(Softmax):
    """softmax whose exact VJP is ``y ⊙ ḡ``."""

    def exact_vjp(self, g: Any, args: Sequence[Any], out: Any, alpha: Any) -> tuple[Any, ...]:
        return (out * g,)


class ForwardOnlyReference(Softmax):
    """softmax whose reference VJP forgets the Σ term."""

    def numpy(self, args: Sequence[np.ndarray], alpha: Any) -> tuple[np.ndarray, Pullback]:
        y, _ = super().numpy(args, alpha)
        return y, lambda g: (y * g,)


def test_a_vjp_without_the_sum_term_is_caught_by_the_table_tests() -> None:
    derivative_check_catches("softmax", ROWS, WithoutTheSumTerm())
    budget_check_catches("softmax", ROWS, ForwardOnlyReference())


@pytest.mark.parametrize("radius", [0.0, 2.0**-40, 1e-6])
def test_a_softmax_ball_holds_the_spec_value_and_vjp_of_its_argument_ball(radius: float
                                                                          ) -> None:
    rng = np.random.default_rng(5)
    mid = rng.standard_normal((3, 6)) * 4
    mid[2] = [700.0, -30.0, 1.0, 0.0, 699.5, -1200.0]
    k = Params({"axis": 1})
    arg = Ball.of(mid, np.full(mid.shape, radius))
    out = SOFTMAX.enclose([arg], k)
    g = rng.standard_normal(mid.shape)
    (back,) = SOFTMAX.enclose_vjp(Ball.exact(g), [arg], out, k)
    for shift in (0.0, radius, -radius):
        x = _fractions(mid + shift * np.sign(rng.standard_normal(mid.shape)))
        y = SOFTMAX.exact([x], k)
        (gx,) = SOFTMAX.exact_vjp(_fractions(g), [x], y, k)
        for name, ball, want in (("y", out, y), ("x̄", back, gx)):
            gap = max(abs(w - Fraction(m)) - Fraction(r) for w, m, r in
                      zip(want.reshape(-1), ball.mid.reshape(-1), ball.rad.reshape(-1),
                          strict=True) if np.isfinite(r))  # inf: the exact interpreter's
            assert gap <= 0, f"softmax {name} ball misses the spec's value by {float(gap)}"
    assert np.isfinite(out.rad).all() and np.isfinite(back.rad[:2]).all()
    relative = out.rad[:2] / out.mid[:2]
    assert float(relative.max()) <= 128 * 2.0**-53 + 64 * radius, f"radius {out.rad.max()}"


def _earlier_relative(c: Ctx, err: np.ndarray, dist: np.ndarray, weight: np.ndarray
                      ) -> np.ndarray:
    """The rule before the shift's cancelling was used: ``e^D / (1 - W) - 1`` with ``D_i =
    e_i + max e + u(dist_i + e_i + max e)`` (rows along the last axis)."""
    with np.errstate(over="ignore", invalid="ignore"):
        moved = err + err.max(axis=-1, keepdims=True)
        shift = moved + c.u * (dist + moved)
        spread = np.sum(weight * np.expm1(shift), axis=-1, keepdims=True)
        return np.where(spread < 1, (np.expm1(shift) + spread) / (1 - spread), np.inf)


def _softmax_mp(x: Sequence[float]) -> list[mpmath.mpf]:
    with mpmath.workdps(60):
        e = [mpmath.exp(mpmath.mpf(v)) for v in x]
        total = mpmath.fsum(e)
        return [v / total for v in e]


@pytest.mark.parametrize("seed", range(20))
def test_the_relative_bound_holds_at_the_worst_shifts_and_is_below_the_earlier_rule(
        seed: int) -> None:
    """Each argument moved by its whole error, the element judged up and every other down
    (and the reverse), the corners where ``e^{Δ_i} / Σ_j y_j e^{Δ_j}`` is largest and
    smallest: the exact softmax there stays within ``shift_relative`` of the true one
    (bfloat16's u, errors up to 0.6); and the rule is never above the earlier one."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    x = rng.normal(0, 3, n)
    err = rng.uniform(0, 0.6, n) * (rng.random(n) < 0.8)
    c = Ctx.of("bfloat16")
    dist = np.array([float(up(Fraction(float(x.max())) - Fraction(float(v)))) for v in x])
    y = _softmax_mp(x.tolist())
    weight = np.array([float(v) * (1 + 2.0**-50) for v in y])
    rel = shift_relative(c, err[None], dist[None], weight[None], 1)[0]
    for i in range(n):
        for sign in (1, -1):
            moved = [v - sign * e for v, e in zip(x.tolist(), err.tolist(), strict=True)]
            moved[i] = float(x[i]) + sign * float(err[i])
            got = _softmax_mp(moved)[i]
            assert abs(got - y[i]) <= rel[i] * y[i], (
                f"softmax{moved}[{i}] = {got}, but should be within {rel[i]} of {y[i]} "
                f"relative; call: shift_relative(err={err}, dist={dist})")
    earlier = _earlier_relative(c, err[None], dist[None], weight[None])[0]
    assert (rel <= earlier).all(), f"{rel} above the earlier rule's {earlier}"


def test_a_masked_element_with_a_large_error_does_not_spread_it_over_its_row() -> None:
    """``scores + finfo.min`` in bfloat16 carries an error of ``u`` times the dtype's largest
    value on the masked element; the row's max is an unmasked score, so its error is not a
    candidate for the max's and the unmasked elements keep a small relative bound."""
    c = Ctx.of("bfloat16")
    big = 3.3895313892515355e38
    err = np.array([[0.01, 0.02, big * 2.0**-8]])
    dist = np.array([[0.0, 0.5, big]])
    weight = np.array([[0.63, 0.38, 0.0]])
    rel = shift_relative(c, err, dist, weight, 1)
    assert (rel[0, :2] < 0.1).all(), f"unmasked relative bounds {rel[0, :2]}, expected < 0.1"
    earlier = _earlier_relative(c, err, dist, weight)
    assert np.isinf(earlier[0, :2]).all(), f"the earlier rule gave {earlier[0, :2]}"
