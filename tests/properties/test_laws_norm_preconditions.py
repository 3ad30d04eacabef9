"""The norm laws' preconditions are decided exactly on the spec side: an input whose scaled
or shifted copy is not exact in the dtype rejects the example; it never fails the backend."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis.errors import UnsatisfiedAssumption

from resverify.impl.numpy_backend import NumpyBackend
from resverify.properties.laws_norm import check_scale_moves_into_eps, check_shift_invariance
from resverify.properties.strategies import single_norm_case
from resverify.spec.request import Request

# The laws call hypothesis.reject(); called here outside a Hypothesis test, as a plain call.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")

SUBNORMAL = 5e-324  # the least float64: halving it is not exact (it rounds to 0)
HUGE = 1.5e308  # doubling it overflows float64


def _norm(x: list[float], dtype: str = "float64", op: str = "layer_norm",
          eps: Fraction = Fraction(1, 16)) -> Request:
    return single_norm_case(op, np.array(x), eps).request(dtype)


def test_scaling_law_runs_when_the_scaled_input_is_exact() -> None:
    """k = 1/8 on dyadic values: k x and ε/k² are exact, so the law is judged (and holds)."""
    check_scale_moves_into_eps(NumpyBackend(), _norm([1.0, -2.0, 3.5, 0.5]), -3)


def test_scaling_law_halving_a_subnormal_rejects_and_never_fails_the_backend() -> None:
    """The reported false alarm: x scaled by 1/2 with a subnormal element (seed 0, extremes)."""
    request = _norm([SUBNORMAL, -SUBNORMAL, 2 * SUBNORMAL, 0.0])
    with pytest.raises(UnsatisfiedAssumption):
        check_scale_moves_into_eps(NumpyBackend(), request, -1)


def test_scaling_law_an_overflowing_scale_rejects_without_a_warning() -> None:
    """k x beyond float64's range: rejected before any float arithmetic could warn."""
    request = _norm([HUGE, 1.0, -1.0, 0.0])
    with pytest.raises(UnsatisfiedAssumption):
        check_scale_moves_into_eps(NumpyBackend(), request, 3)


def test_shift_law_rejects_a_shift_that_rounds_in_float64() -> None:
    """x + t not exact in float64 itself (1e-300 + 4 rounds): rejected, not judged."""
    request = _norm([1e-300, 1.0, 2.0, 3.0])
    with pytest.raises(UnsatisfiedAssumption):
        check_shift_invariance(NumpyBackend(), request, Fraction(4))
