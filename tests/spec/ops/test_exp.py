"""The exp entry's own promises: its exact enclosure, its library allowance, its balls.

The op table's tests check the entry on its sample shapes like any other. Here:
:func:`~resverify.spec.rational.exact_exp` encloses the true value (mpmath at 2,400 bits) to
``2**-200`` relative and refuses where every dtype overflows; ``EXP_ULPS`` covers the
reference and the installed libraries and still refuses ``exp(x(1 + 2u))``, both measured
directly and through the generic budget; the fast oracle's ball holds the spec's value.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from resverify.spec.ball import Ball
from resverify.spec.budget import error_budget
from resverify.spec.errors import InvalidRequest
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import EXP_ULPS, OP_TABLE
from resverify.spec.rational import TANH_PRECISION_BITS, exact_exp
from resverify.spec.request import Request

EXP = OP_TABLE["exp"]
POINTS = [Fraction(0), Fraction(1, 3), Fraction(-7, 2), Fraction(1, 10**30), Fraction(-40),
          Fraction(709), Fraction(-745), Fraction(-1099), Fraction(-1100), Fraction(-10**6),
          Fraction(1099), Fraction(-88, 1) - Fraction(3, 4)]


def _mp(x: Fraction) -> mpmath.mpf:
    return mpmath.mpf(x.numerator) / x.denominator


@pytest.mark.parametrize("x", POINTS, ids=str)
def test_exact_exp_encloses_the_true_value(x: Fraction) -> None:
    v, e = exact_exp(x)
    with mpmath.workprec(2400):
        miss = abs(_mp(v) - mpmath.exp(_mp(x)))
        assert miss <= _mp(e), f"exp({x}): {v} ± {e} misses by {miss}"
    if x > -1100:
        assert e <= v / 2**TANH_PRECISION_BITS, f"exp({x}): half-width {e} is not relative"


@pytest.mark.parametrize("x", [Fraction(1100), Fraction(10**9)], ids=str)
def test_exact_exp_refuses_where_every_dtype_overflows(x: Fraction) -> None:
    with pytest.raises(InvalidRequest, match="overflows every dtype"):
        exact_exp(x)


def _ulps(got: np.ndarray, x: np.ndarray) -> float:
    """The largest error of ``got`` in ulps of the spec's value where it is normal, and
    in units of twice the smallest normal (counted as ``EXP_ULPS``) below; 0 where the
    value overflows the dtype."""
    info = np.finfo(x.dtype)
    worst = 0.0
    for v, g in zip(x.tolist(), np.asarray(got, dtype=np.float64).tolist(), strict=True):
        s = exact_exp(Fraction(v))[0]
        if s >= Fraction(float(info.max)):
            continue
        unit = float(np.spacing(x.dtype.type(float(s)))) if s >= float(info.tiny) else None
        miss = abs(Fraction(g) - s)
        worst = max(worst, float(miss / Fraction(unit)) if unit else
                    float(miss / Fraction(float(info.tiny))) / 2 * EXP_ULPS)
    return worst


def _libraries() -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    found: dict[str, Callable[[np.ndarray], np.ndarray]] = {"numpy (reference)": np.exp}
    if importlib.util.find_spec("torch") is not None:
        import torch

        found["torch"] = lambda x: torch.exp(torch.from_numpy(x)).numpy()
    if importlib.util.find_spec("jax") is not None:
        import jax

        jax.config.update("jax_enable_x64", True)
        found["jax"] = lambda x: np.asarray(jax.numpy.exp(x))
    return found


RANGE = {"float64": (-745.0, 709.7), "float32": (-103.0, 88.7), "float16": (-17.0, 11.0)}
"""From the last subnormal to the largest finite value of each dtype."""


def _grid(dtype: str) -> np.ndarray:
    low, high = RANGE[dtype]
    return np.concatenate([np.linspace(low, high, 1201), np.linspace(-8, 8, 401)]).astype(dtype)


@pytest.mark.parametrize("dtype", sorted(RANGE))
@pytest.mark.parametrize("library", sorted(_libraries()))
def test_the_exp_allowance_covers_the_reference_and_the_libraries(
        library: str, dtype: str) -> None:
    x = _grid(dtype)
    with np.errstate(over="ignore"):
        worst = _ulps(_libraries()[library](x), x)
    assert worst <= EXP_ULPS, f"{library} exp in {dtype}: {worst} ulps"


def test_the_allowance_refuses_exp_of_a_slightly_wrong_argument() -> None:
    """``exp(x(1 + 2u))`` is ``|x|`` ulps off: refused above ``|x| = EXP_ULPS``."""
    x = np.linspace(-700, 700, 141)
    worst = _ulps(np.exp(x * (1 + 2.0**-52)), x)
    assert worst > 50 * EXP_ULPS, f"exp(x(1 + 2u)) is only {worst} ulps off"


def _one_exp(x: np.ndarray, dtype: str) -> Request:
    program = Program((Input("x", x.shape),), (Node("y", "exp", ("x",)),), "y")
    return Request(program, {"x": x}, dtype, np.ones(x.shape))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_budget_holds_the_reference_and_refuses_the_wrong_formula(dtype: str) -> None:
    """Through the generic budget: NumPy's exp is inside it, ``exp(x(1 + 2u))`` (and tinygrad's
    ``exp2(x log2 e)`` where installed) is not; inf is accepted only where exp overflows."""
    x = np.array([-60.0, -10.5, 0.25, 30.0, 80.0, 88.5, 89.0], dtype=dtype)
    request = _one_exp(x.astype(np.float64), dtype)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    with np.errstate(over="ignore"):
        right = np.exp(x)
        wrong = np.exp(x * (1 + np.finfo(dtype).eps))
    assert not budget.misses(exact, right, {"x": right}), budget.misses(exact, right, {"x": right})
    missed = budget.misses(exact, wrong, {"x": right})
    assert missed, f"exp(x(1 + 2u)) in {dtype} is inside the budget"
    overflow = budget.output == np.inf
    assert overflow.tolist() == (np.exp(x.astype(np.float64)) > np.finfo(dtype).max).tolist()
    if importlib.util.find_spec("tinygrad") is not None:
        from tinygrad import Tensor

        tiny = Tensor(x).exp().numpy()
        assert budget.misses(exact, tiny, {"x": right}), f"tinygrad's exp in {dtype} passes"


def test_an_exp_ball_holds_the_spec_value_of_its_argument_ball() -> None:
    """exp is increasing: the ball around exp of a ball holds exp of both ends, as the spec
    computes it (the ends ``mid ± rad``, exactly)."""
    mid = np.array([0.0, -3.5, 2.0**-30, 20.0, -700.0, -1200.0, 700.0, 1.5])
    rad = np.array([0.0, 2.0**-50, 2.0**-80, 1e-10, 1e-300, 0.0, 2.0**-40, 0.5])
    out = EXP.enclose([Ball.of(mid, rad)], None)
    for i, (m, r) in enumerate(zip(mid.tolist(), rad.tolist(), strict=True)):
        for end in (Fraction(m) - Fraction(r), Fraction(m) + Fraction(r)):
            v = exact_exp(end)[0]
            assert abs(v - Fraction(out.mid[i])) <= Fraction(out.rad[i]), (
                f"exp ball [{i}] = {out.mid[i]!r} ± {out.rad[i]!r} misses exp({float(end)}) = "
                f"{float(v)!r}")
