"""The neg entry's own promises: flipping a sign rounds nothing, in the budget and the balls.

The op table's tests check the entry on its sample shapes like any other (SymPy's
derivative, the reference and each installed library within the budget). Here: the budget
of ``neg`` on exact inputs is zero, so an answer one ulp off is refused, in every dtype and
in the gradient too; and its ball is the argument's, exactly negated.
"""

from __future__ import annotations

import numpy as np
import pytest

from resverify.spec.ball import Ball
from resverify.spec.budget import error_budget
from resverify.spec.exact import evaluate
from resverify.spec.ir import Input, Node, Program
from resverify.spec.ops import OP_TABLE
from resverify.spec.request import Request

NEG = OP_TABLE["neg"]


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_neg_is_exact_and_an_answer_one_ulp_off_is_refused(dtype: str) -> None:
    x = np.array([-2.5, 0.75, 1e-4, 3.0, 1000.0], dtype=dtype)
    program = Program((Input("x", x.shape),), (Node("y", "neg", ("x",)),), "y")
    cotangent = np.array([1.0, -0.5, 2.0, 0.25, -4.0], dtype=dtype)
    request = Request(program, {"x": x.astype(np.float64)}, dtype, cotangent.astype(np.float64))
    exact = evaluate(request)
    budget = error_budget(request, exact=exact)
    assert not budget.misses(exact, -x, {"x": -cotangent}), budget.misses(exact, -x,
                                                                          {"x": -cotangent})
    assert float(budget.output.max()) <= 2.0**-1060, (
        f"neg's budget {budget.output} is more than the analysis' own room (float64 subnormals)")
    off = np.nextafter(-x, np.array(np.inf, dtype=dtype))
    assert len(budget.misses(exact, off, {"x": -cotangent})) == x.size, f"-x + 1 ulp in {dtype}"
    grad_off = np.nextafter(-cotangent, np.array(np.inf, dtype=dtype))
    assert budget.misses(exact, -x, {"x": grad_off}), f"gradient -g + 1 ulp in {dtype}"


def test_a_neg_ball_is_its_argument_ball_negated() -> None:
    arg = Ball(np.array([1.5, -2.0**-60, 0.0]), np.array([2.0**-70, 0.0, 1e-300]),
               np.array([2.0**-60, 0.0, -1e-310]))
    out = NEG.enclose([arg], None)
    assert (out.mid == -arg.mid).all() and (out.lo == -arg.lo).all(), out
    assert (out.rad == arg.rad).all(), out
    (grad,) = NEG.enclose_vjp(arg, [arg], out, None)
    assert (grad.mid == -arg.mid).all() and (grad.rad == arg.rad).all(), grad
