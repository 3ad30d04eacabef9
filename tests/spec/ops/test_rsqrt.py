"""rsqrt: ``1/sqrt(a)`` enclosed exactly, torch's CPU kernel within the allowance (and a
wrong formula not), a non-positive argument refused; a slope without its
½ is caught by the SymPy derivative, a reference gradient with it by the budget."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest

from resverify.spec.ball import Ball, NotEnclosed
from resverify.spec.errors import InvalidRequest
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE, Rsqrt
from resverify.spec.ops.base import Pullback
from resverify.spec.ops.layer_norm import SQRT_ULPS
from resverify.spec.rational import Arr
from resverify.spec.request import Request
from tests.installed import skip_without_torch
from tests.spec.ops.op_checks import (
    assert_balls_hold_exact,
    budget_check_catches,
    derivative_check_catches,
)

skip_without_torch()  # the rules are checked against torch's kernels (E402: pyproject.toml)

import torch

CASE = ((3,),)


class SlopeWithoutTheHalf(Rsqrt):
    """rsqrt whose slope is ``-r³``, not ``-r³/2``."""

    def exact_slope(self, args: Sequence[Arr], out: Arr) -> Arr:
        return -(out ** 3)


class WrongReferenceGradient(Rsqrt):
    """rsqrt whose exact rules are right but whose reference gradient is
    :class:`SlopeWithoutTheHalf`'s."""

    def numpy(self, args: Sequence[np.ndarray], alpha: Any) -> tuple[np.ndarray, Pullback]:
        value, _ = super().numpy(args, alpha)
        return value, lambda g: (-g * value ** 3,)


@pytest.mark.parametrize("w", [Fraction(1, 4), Fraction(2), Fraction(10, 3), Fraction(1, 10**9)])
def test_the_exact_value_is_within_its_enclosure_of_mpmaths(w: Fraction) -> None:
    (r,) = OP_TABLE["rsqrt"].exact([np.array([w], dtype=object)], None).tolist()
    with mpmath.workprec(400):
        truth = 1 / mpmath.sqrt(mpmath.mpf(w.numerator) / w.denominator)
        assert abs(mpmath.mpf(r.numerator) / r.denominator - truth) <= truth * mpmath.mpf(2)**-199


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torchs_rsqrt_is_within_the_allowance_and_a_wrong_formula_is_not(dtype: str) -> None:
    """torch's rsqrt (bfloat16: computed in float32, rounded once more) within
    ``2 SQRT_ULPS u`` of the exact value on 2,000 points; ``1/sqrt(x (1 + 8u))`` is not.
    (Measured on 200,000 points of (1e-3, 100): 1.45 ulps in float32, 1.48 in float64,
    and 0.6 % of them differ from ``1 / torch.sqrt(x)``: not bitwise the header's
    division, as accurate.)"""
    x = (torch.rand(2000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
         * 50 + 1e-2).to(getattr(torch, dtype))
    u = {"float32": 2.0**-24, "bfloat16": 2.0**-8}[dtype]
    exact = 1 / torch.sqrt(x.double())  # float64: far inside the allowance of either dtype
    relative = ((torch.rsqrt(x).double() - exact).abs() / exact).max().item()
    assert relative <= 2 * SQRT_ULPS * u, relative
    wrong = (1 / torch.sqrt(x.double() * (1 + 8 * u))).to(x.dtype).double()
    assert ((wrong - exact).abs() / exact).max().item() > 2 * SQRT_ULPS * u


def test_a_non_positive_argument_has_no_exact_value_and_no_ball() -> None:
    with pytest.raises(InvalidRequest, match="positive"):
        OP_TABLE["rsqrt"].exact([np.array([Fraction(0)], dtype=object)], None)
    with pytest.raises(NotEnclosed, match="positive"):
        OP_TABLE["rsqrt"].enclose([Ball.of(np.array([0.5]), np.array([0.75]))], None)


def test_the_balls_hold_the_exact_value_and_gradient() -> None:
    program = Program((Input("a", (4,)),), (Node("r", "rsqrt", ("a",)),), "r")
    request = Request(program, {"a": np.array([0.25, 1.0, 2.0, 3.75])}, "float64",
                      np.array([1.0, -0.5, 0.25, 2.0]))
    assert_balls_hold_exact(request)


def test_a_slope_without_the_half_is_caught_by_the_sympy_derivative() -> None:
    derivative_check_catches("rsqrt", CASE, SlopeWithoutTheHalf())


def test_a_reference_gradient_without_the_half_is_caught_by_the_budget() -> None:
    budget_check_catches("rsqrt", CASE, WrongReferenceGradient())
