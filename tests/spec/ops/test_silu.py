"""The silu entry's own promises: its exact enclosure, its library allowance, its balls.

The op table's tests check the entry on its sample shapes like any other. Here: ``a σ(a)``
through :func:`~resverify.spec.rational.exact_sigmoid` is within the error bound the entry
states of the true value (mpmath at 800 bits); ``SILU_ULPS`` covers the reference and the
installed libraries and still refuses ``a σ(1.702 a)`` (the sigmoid form of GELU, a
different activation), measured directly and through the generic budget; the fast oracle's
balls hold the spec's value and slope.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from resverify.spec.ops import SILU_ULPS
from resverify.spec.ops.sigmoid import stable_sigmoid
from tests.spec.ops.gated_checks import (
    check_balls,
    check_budget_holds_the_reference,
    check_budget_refuses,
    check_stated_error,
    entry,
    spec_values,
    units,
)

SILU = entry("silu")
POINTS = [Fraction(0), Fraction(1, 3), Fraction(-7, 2), Fraction(1, 10**30), Fraction(-40),
          Fraction(36), Fraction(-745), Fraction(-1099), Fraction(-1100), Fraction(-10**6),
          Fraction(511), Fraction(512), Fraction(10**9), Fraction(-88, 1) - Fraction(3, 4)]


@pytest.mark.parametrize("x", POINTS, ids=str)
def test_spec_silu_is_within_its_stated_error_of_the_true_value(x: Fraction) -> None:
    """Within ``2**-199`` of the value, or ``|x| 2**-700`` where σ is carried as 0 or 1."""
    bound = check_stated_error(SILU, x, lambda v: v / (1 + mpmath.exp(-v)))
    (v,) = spec_values(SILU, [x])
    assert bound <= abs(v) / 2**199 + abs(x) / 2**700, f"silu({x}): bound {bound} is wide"


def _libraries() -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    found: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "numpy (reference)": lambda x: x * stable_sigmoid(x)}
    if importlib.util.find_spec("torch") is not None:
        import torch

        found["torch"] = lambda x: torch.nn.functional.silu(torch.from_numpy(x)).numpy()
    if importlib.util.find_spec("jax") is not None:
        import jax

        jax.config.update("jax_enable_x64", True)
        found["jax"] = lambda x: np.asarray(jax.nn.silu(x))
    return found


LOWEST = {"float64": -745.0, "float32": -104.0, "float16": -17.0}
"""Where each dtype's ``exp(-x)`` has long overflowed."""


@pytest.mark.parametrize("dtype", sorted(LOWEST))
@pytest.mark.parametrize("library", sorted(_libraries()))
def test_the_silu_allowance_covers_the_reference_and_the_libraries(
        library: str, dtype: str) -> None:
    x = np.concatenate([np.linspace(-12, 12, 601), np.linspace(LOWEST[dtype], -12, 200),
                        np.linspace(12, 50, 39)]).astype(dtype)
    with np.errstate(over="ignore"):
        worst = units(SILU, _libraries()[library](x), x)
    assert worst <= SILU_ULPS, f"{library} silu in {dtype}: {worst} units of u|x|"


def _quick_gelu(x: np.ndarray) -> np.ndarray:
    return x * stable_sigmoid(x * x.dtype.type(1.702))


def test_the_allowance_refuses_the_sigmoid_form_of_gelu() -> None:
    x = np.linspace(-8, 8, 161)
    worst = units(SILU, _quick_gelu(x), x)
    assert worst > 10**10 * SILU_ULPS, f"x σ(1.702 x) is only {worst} units of u|x| off"


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_the_budget_holds_the_reference_and_refuses_a_different_gate(dtype: str) -> None:
    """The reference passes, σ alone as the slope and ``x σ(1.702 x)`` do not."""
    x = np.array([-30.0, -3.5, -0.25, 0.0, 0.5, 2.25, 9.0], dtype=dtype)
    check_budget_holds_the_reference(SILU, x)
    check_budget_refuses(SILU, x, _quick_gelu, "x σ(1.702 x)")


def test_silu_balls_hold_the_spec_value_and_slope_of_their_argument_ball() -> None:
    check_balls(SILU, np.array([0.0, -3.5, 2.0**-30, 20.0, -600.0, -800.0, 38.0, 1.5]),
                np.array([0.0, 2.0**-50, 2.0**-80, 1e-10, 1e-300, 0.0, 0.0, 2.0**-20]))
