"""The gelu_tanh entry's own promises: its exact enclosure, its library allowance, its balls.

The op table's tests check the entry on its sample shapes like any other. Here: ``a σ(2z)``
through :func:`~resverify.spec.rational.exact_sigmoid` is within the error bound the entry
states of the true value (mpmath at 800 bits, as ``a/(1 + exp(-2z))``: ``a (1 + tanh z)/2``
cancels below 800 bits for ``a < -30``); ``GELU_TANH_ULPS`` covers the reference and the
installed libraries and still refuses 0.0447 for 0.044715 and the erf form in its place,
measured directly and through the generic budget; the fast oracle's balls hold the spec's
value and slope.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from resverify.spec.ops import OP_TABLE
from tests.spec.ops.gated_checks import (
    check_allowance,
    check_allowance_refuses,
    check_balls,
    check_budget_holds_the_reference,
    check_budget_refuses,
    check_stated_error,
    entry,
    spec_values,
)

GELU = entry("gelu_tanh")
POINTS = [Fraction(0), Fraction(1, 3), Fraction(-7, 2), Fraction(1, 10**30), Fraction(-40),
          Fraction(36), Fraction(-63), Fraction(-10**6), Fraction(10**9),
          Fraction(-88, 1) - Fraction(3, 4), Fraction(3, 2**40), Fraction(-9)]


def _true(v: mpmath.mpf) -> mpmath.mpf:
    z = mpmath.sqrt(2 / mpmath.pi) * (v + mpmath.mpf(44715) / 10**6 * v**3)
    return v / (1 + mpmath.exp(-2 * z))


@pytest.mark.parametrize("x", POINTS, ids=str)
def test_spec_gelu_tanh_is_within_its_stated_error_of_the_true_value(x: Fraction) -> None:
    """Within ``2**-199`` of the value, or ``|x| 2**-700`` where σ is carried as 0 or 1."""
    bound = check_stated_error(GELU, x, _true)
    (v,) = spec_values(GELU, [x])
    assert bound <= abs(v) / 2**199 + abs(x) / 2**700, f"gelu_tanh({x}): bound {bound} is wide"


def _wrong_constant(x: np.ndarray) -> np.ndarray:
    return x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.0447 * x**3))) / 2


def _libraries() -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    found: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "numpy (reference)": GELU.numpy_value}
    if importlib.util.find_spec("torch") is not None:
        import torch

        found["torch"] = lambda x: torch.nn.functional.gelu(torch.from_numpy(x),
                                                            approximate="tanh").numpy()
    if importlib.util.find_spec("jax") is not None:
        import jax

        jax.config.update("jax_enable_x64", True)
        found["jax"] = lambda x: np.asarray(jax.nn.gelu(x, approximate=True))
    return found


LOWEST = {"float64": -30.0, "float32": -14.0, "float16": -6.0}
"""Where each dtype's GELU is flushed to 0."""


@pytest.mark.parametrize("dtype", sorted(LOWEST))
@pytest.mark.parametrize("library", sorted(_libraries()))
def test_the_gelu_tanh_allowance_covers_the_reference_and_the_libraries(
        library: str, dtype: str) -> None:
    x = np.concatenate([np.linspace(-8, 8, 401), np.linspace(LOWEST[dtype], 10, 300)]
                       ).astype(dtype)
    with np.errstate(over="ignore"):
        check_allowance(GELU, library, _libraries()[library](x), x)


def test_the_allowance_refuses_a_wrong_constant_and_the_erf_form() -> None:
    x = np.linspace(-8, 8, 161)
    erf_form = OP_TABLE["gelu_erf"].numpy([x], None)[0]
    wrong = {"0.0447 for 0.044715": _wrong_constant(x), "the erf form": erf_form}
    check_allowance_refuses(GELU, x, wrong, 10**6)


X = [-30.0, -3.5, -0.25, 0.0, 0.5, 2.25, 9.0]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_the_budget_holds_the_reference_and_refuses_the_gate_as_the_slope(dtype: str) -> None:
    """The reference's value and slope pass; σ(2z) alone as the slope does not."""
    check_budget_holds_the_reference(GELU, np.array(X, dtype=dtype))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_budget_refuses_a_wrong_constant(dtype: str) -> None:
    """(A constant off by about 10⁻⁵ is below float16's resolution there.)"""
    check_budget_refuses(GELU, np.array(X, dtype=dtype), _wrong_constant, "0.0447 for 0.044715")


def test_gelu_tanh_balls_hold_the_spec_value_and_slope_of_their_argument_ball() -> None:
    check_balls(GELU, np.array([0.0, -3.5, 2.0**-30, 20.0, -60.0, -800.0, 38.0, 1.5]),
                np.array([0.0, 2.0**-50, 2.0**-80, 1e-10, 1e-300, 0.0, 0.0, 2.0**-20]))
