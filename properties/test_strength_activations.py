"""relu's gradient near zero, where engines put thresholds and guards (property 1, its
hardest inputs).

The general strategies draw elements from 2^-10 up to 8, so a relu whose derivative is
wrong only for tiny positive inputs (a ``x > eps`` guard) meets such an input by chance
only. Here every element of x lies within a few powers of two of zero, of either sign,
zero included, and the block ``x + α·relu(x)`` is compared with the exact spec. Found by
the mutant catalog: :class:`tests.mutants.ReluGradThreshold` survived the rest
of the suite.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from resverify.impl.backend import Backend
from resverify.properties.cases import Case
from resverify.properties.laws_oracle import check_matches_spec
from resverify.properties.pinned import example
from resverify.properties.plugin import PropertyRun
from resverify.properties.strategies import alphas, cotangents, shapes
from resverify.spec.ir import DTYPES, Input, Node, Program

DTYPE = pytest.mark.parametrize("dtype", DTYPES)
# m·2^e with |m| < 8 and -10 <= e <= -5: within 1/4 of zero, exact in every dtype
NEAR_ZERO = st.builds(lambda m, e: m * 2.0**e, st.integers(-7, 7), st.integers(-10, -5))


def relu_block(x: np.ndarray, alpha: Fraction, cotangent: np.ndarray) -> Case:
    """``residual_add(x, scale(relu(x), α))`` over the given x and cotangent."""
    program = Program((Input("x", x.shape),),
                      (Node("r", "relu", ("x",)), Node("s", "scale", ("r",), alpha),
                       Node("y", "residual_add", ("x", "s"))), "y")
    return Case(program, {"x": x}, cotangent)


@st.composite
def near_zero_relu_cases(draw: st.DrawFn) -> Case:
    """:func:`relu_block` with every element of x near zero and a random cotangent."""
    shape = draw(shapes(min_dims=1))
    x = draw(arrays(np.float64, shape, elements=NEAR_ZERO))
    return relu_block(x, draw(alphas().filter(bool)), draw(cotangents(shape)))


@DTYPE
@pytest.mark.needs("residual_add", "scale", "relu")
@given(case=near_zero_relu_cases())
@example(case=relu_block(np.array([0.0, 2.0**-10, -(2.0**-10), 2.0**-6]), Fraction(1),
                         np.array([1.0, 1.0, 1.0, 1.0])))  # relu'(0) = 0, relu'(2^-10) = 1
def test_relu_gradient_is_exact_near_zero(
        backend: Backend, dtype: str, prop: PropertyRun, case: Case) -> None:
    check_matches_spec(backend, prop.request(case, dtype))
