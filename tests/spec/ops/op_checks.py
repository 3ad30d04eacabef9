"""Checks an op's own tests share: every ball of a request holds the exact value, and the op
table's generic checks catch a deliberately broken entry of the op."""

from __future__ import annotations

from fractions import Fraction
from typing import cast

import numpy as np
import pytest

from resverify.spec.enclosure import enclose
from resverify.spec.errors import Shape
from resverify.spec.exact import evaluate
from resverify.spec.ops import OP_TABLE, Op
from resverify.spec.request import Request
from tests.spec.ops import test_table


def assert_balls_hold_exact(req: Request) -> None:
    """The fast oracle's balls of ``req`` (output and every input's gradient) each hold the
    exact interpreter's value: ``|exact - centre| <= radius`` element by element."""
    exact, enclosed = evaluate(req), enclose(req)
    assert exact.output is not None and exact.grads is not None
    pairs = [("output", enclosed.output, exact.output)]
    pairs += [(f"grad[{n}]", enclosed.grads[n], exact.grads[n]) for n in req.inputs]
    for where, ball, value in pairs:
        for index in np.ndindex(*value.shape):
            centre = Fraction(float(ball.mid[index])) + Fraction(float(ball.lo[index]))
            gap = abs(cast(Fraction, value[index]) - centre)
            assert gap <= Fraction(float(ball.rad[index])), \
                f"{where}[{index}] is {float(gap):.3g} from the ball's centre, radius " \
                f"{float(ball.rad[index]):.3g} [{req.program.describe()}]"


def derivative_check_catches(op: str, case: tuple[Shape, ...], broken: Op) -> None:
    """The table's SymPy-derivative check passes on ``op``'s entry and fails on ``broken``
    put in its place (``hand - derived`` in its message)."""
    check = test_table.test_entry_vjp_equals_the_sympy_derivative_of_its_symbolic_form
    check(op, case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(OP_TABLE, op, broken)
        with pytest.raises(AssertionError, match="hand - derived"):
            check(op, case)


def budget_check_catches(op: str, case: tuple[Shape, ...], broken: Op) -> None:
    """The table's check that the NumPy reference runs ``op`` within its budget passes on
    the entry and fails on ``broken`` put in its place (a ``grad`` out of budget)."""
    check = test_table.test_reference_and_adapters_run_each_op_within_its_budget
    check("numpy", op, case)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(OP_TABLE, op, broken)
        with pytest.raises(AssertionError, match="grad"):
            check("numpy", op, case)
