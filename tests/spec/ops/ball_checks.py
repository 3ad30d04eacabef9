"""The check an op's enclosure tests share: every ball of a request holds the exact value."""

from __future__ import annotations

from fractions import Fraction
from typing import cast

import numpy as np

from resverify.spec.enclosure import enclose
from resverify.spec.exact import evaluate
from resverify.spec.request import Request


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
