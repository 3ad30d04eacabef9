"""Where a NaN can be right: only where an overflow a correct engine may meet reaches it.

The budget of an element is infinite (anything, NaN included, is accepted) only where
some value on the way to it may round past the dtype's largest finite value, and the
overflow can reach the element through arithmetic (``inf - inf``, ``0 · inf``). A value
below the largest finite one is not an overflow, however close to it; and relu's
derivative below 0 is exactly 0 by the spec (a selection), so an overflowed cotangent
stops there: a select-based engine gives a finite x̄, and a mask-multiply one
(``g * (a > 0)``, ``inf · 0 = NaN``) is wrong.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from resverify.impl.numpy_backend import NumpyBackend
from resverify.impl.tensor import Tensor
from resverify.spec.budget import error_budget
from resverify.spec.compare import cells
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request, Result, Value
from resverify.spec.rounding import LARGEST
from tests.mutants.base import Mutant as Reference


def _relu_branch(alpha: Fraction, cotangent: float, x: float = -1.0) -> Request:
    """``residual_add(x, scale(relu(x), α))`` in float16 (exact x̄ = ȳ for x < 0)."""
    program = Program((Input("x", (1,)),), (
        Node("r", "relu", ("x",)), Node("f", "scale", ("r",), alpha),
        Node("y", "residual_add", ("x", "f"))), "y")
    return Request(program, {"x": np.array([x], np.float16)}, "float16",
                   np.array([cotangent], np.float16))


class MaskedReluGrad(Reference):
    """relu's backward multiplies by the mask, ``g * (a > 0)``: right in exact arithmetic,
    NaN where the cotangent reaching it overflowed (``inf · 0``)."""

    name = "broken-masked-relu-grad"

    def apply(self, node: Node, args: list[Tensor]) -> Tensor:
        if node.op != "relu":
            return super().apply(node, args)
        (a,) = args
        mask = (a.value > 0).astype(a.dtype)
        with np.errstate(invalid="ignore"):
            return Tensor(a.value * mask, (a,), lambda g: (g * mask,), "relu")


def _judged(backend: NumpyBackend, request: Request) -> list[tuple[str, float, float, bool]]:
    with np.errstate(all="ignore"):  # as the suite runs a backend: IEEE overflow is no error
        result: Result = backend.run(request)
    assert isinstance(result, Value), result
    exact = evaluate(request)
    assert exact.grads is not None
    budget = error_budget(request, exact=exact)
    return [("x", float(c.actual), c.bound, c.ok)
            for c in cells(result.grads["x"], exact.grads["x"], budget.grads["x"])]


@pytest.mark.parametrize("alpha", [Fraction(1, 2), Fraction(1), Fraction(2), Fraction(4)])
@pytest.mark.parametrize("cotangent", [32000.0, 32752.0, 32760.0, 40000.0, 65000.0])
def test_a_gradient_below_the_largest_float16_has_a_finite_budget(
        alpha: Fraction, cotangent: float) -> None:
    """x̄ = ȳ ≤ 65504 is never an overflow, whatever α does in the dead relu branch."""
    request = _relu_branch(alpha, cotangent)
    bound = error_budget(request).grads["x"][0]
    assert np.isfinite(bound), (f"budget of grad x[0] = {bound}, want finite "
                                f"[α = {alpha}, ȳ = {cotangent}, float16]")


@pytest.mark.parametrize(("alpha", "cotangent"), [(Fraction(2), 40000.0),
                                                  (Fraction(4), 20000.0)])
def test_a_nan_from_relu_of_an_overflowed_cotangent_fails(
        alpha: Fraction, cotangent: float) -> None:
    """α ȳ overflows float16 inside the dead branch; the select engine (the reference)
    gives x̄ = ȳ exactly and passes, the mask engine gives NaN and fails."""
    request = _relu_branch(alpha, cotangent)
    assert abs(float(alpha) * cotangent) > LARGEST["float16"]  # the branch does overflow
    good = _judged(NumpyBackend(), request)
    bad = _judged(MaskedReluGrad(), request)
    assert good == [("x", cotangent, good[0][2], True)], good
    assert np.isnan(bad[0][1]) and not bad[0][3], (
        f"mask engine: grad x[0] = {bad[0][1]} judged ok={bad[0][3]} against budget "
        f"{bad[0][2]}, want NaN judged FAIL [α = {alpha}, ȳ = {cotangent}]")


def test_a_nan_from_zero_times_an_overflowed_value_passes() -> None:
    """``y = x + mul(scale(x, 4), z)`` at x = 20000, z = 0 in float16: 4x overflows to inf
    and inf · 0 = NaN in every IEEE engine, so the output's budget is infinite and the
    reference's NaN passes (exact y = x)."""
    program = Program((Input("x", (1,)), Input("z", (1,))), (
        Node("s", "scale", ("x",), Fraction(4)), Node("m", "mul", ("s", "z")),
        Node("y", "residual_add", ("x", "m"))), "y")
    request = Request(program, {"x": np.array([20000.0], np.float16),
                                "z": np.array([0.0], np.float16)}, "float16",
                      np.array([1.0], np.float16))
    with np.errstate(all="ignore"):
        result = NumpyBackend().run(request)
    assert isinstance(result, Value)
    exact = evaluate(request)
    assert exact.output is not None
    budget = error_budget(request, exact=exact)
    (cell,) = cells(result.output, exact.output, budget.output)
    assert np.isnan(result.output[0]) and cell.bound == np.inf and cell.ok, (
        f"output[0] = {result.output[0]} against budget {cell.bound} ok={cell.ok}; want "
        "NaN accepted under an infinite budget")

