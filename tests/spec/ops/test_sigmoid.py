"""The sigmoid entry's own promises: its exact enclosure, its library allowance, its balls.

The op table's tests (``tests/spec/ops/test_table.py``) check the entry on its sample shapes like
any other: SymPy against the hand VJP and JVP, the reference and each installed library within
the budget. Here: :func:`~resverify.spec.rational.exact_sigmoid` encloses the true value
(mpmath at 800 bits) to ``2**-200`` relative; ``SIGMOID_ULPS`` covers the reference and the
installed libraries measured against the spec, and is not so wide that a wrong formula
passes; the fast oracle's ball holds the spec's value; and the strategies build SiLU
branches ``x ⊙ σ(x)`` from the op's declared family.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings

from resverify.properties.cases import Case
from resverify.properties.strategies import FAMILY_OPS, residual_cases
from resverify.spec.ball import Ball
from resverify.spec.ops import OP_TABLE, SIGMOID_ULPS
from resverify.spec.ops.sigmoid import LIBM_SIGMOID_ULPS, stable_sigmoid
from resverify.spec.rational import TANH_PRECISION_BITS, exact_sigmoid

SIGMOID = OP_TABLE["sigmoid"]
POINTS = [Fraction(0), Fraction(1, 3), Fraction(-7, 2), Fraction(1, 10**30), Fraction(-40),
          Fraction(36), Fraction(-745), Fraction(-1099), Fraction(-1100), Fraction(-10**6),
          Fraction(511), Fraction(512), Fraction(10**9), Fraction(-88, 1) - Fraction(3, 4)]


def _true(x: Fraction) -> mpmath.mpf:
    with mpmath.workprec(800):
        return 1 / (1 + mpmath.exp(-mpmath.mpf(x.numerator) / x.denominator))


@pytest.mark.parametrize("x", POINTS, ids=str)
def test_exact_sigmoid_encloses_the_true_value(x: Fraction) -> None:
    s, e = exact_sigmoid(x)
    with mpmath.workprec(800):
        miss = abs(mpmath.mpf(s.numerator) / s.denominator - _true(x))
        assert miss <= mpmath.mpf(e.numerator) / e.denominator, f"σ({x}): {s} ± {e} misses"
    if -1100 < x < 512:
        assert e <= s / 2**TANH_PRECISION_BITS, f"σ({x}): half-width {e} is not relative"


def _ulps(got: np.ndarray, x: np.ndarray) -> float:
    """The largest error of ``got`` in ulps of the spec's value where it is normal, and
    in units of the smallest normal below."""
    info = np.finfo(x.dtype)
    worst = 0.0
    for v, g in zip(x.tolist(), np.asarray(got, dtype=np.float64).tolist(), strict=True):
        s = exact_sigmoid(Fraction(v))[0]
        unit = float(np.spacing(x.dtype.type(float(s)))) if s >= float(info.tiny) else None
        miss = abs(Fraction(g) - s)
        worst = max(worst, float(miss / Fraction(unit)) if unit else
                    float(miss / Fraction(float(info.tiny))) / 2 * SIGMOID_ULPS)
    return worst


def _libraries() -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    found: dict[str, Callable[[np.ndarray], np.ndarray]] = {"numpy (reference)": stable_sigmoid}
    if importlib.util.find_spec("torch") is not None:
        import torch

        found["torch"] = lambda x: torch.sigmoid(torch.from_numpy(x)).numpy()
    return found


LOWEST = {"float64": -746.0, "float32": -104.0, "float16": -17.0}
"""Below where each dtype's ``exp(-x)`` overflows (σ flushed to 0 by ``1/(1 + exp(-x))``)."""


@pytest.mark.parametrize("dtype", sorted(LOWEST))
@pytest.mark.parametrize("library", sorted(_libraries()))
def test_the_sigmoid_allowance_covers_the_reference_and_the_libraries(
        library: str, dtype: str) -> None:
    """Within ``SIGMOID_ULPS`` ulps where the value is normal and within twice the
    smallest normal below (counted here as ``SIGMOID_ULPS`` units), on a grid over ±12 and
    down into the underflow of the dtype's ``exp``."""
    grid = [np.linspace(-12, 12, 601), np.linspace(LOWEST[dtype], -12, 200)]
    x = np.concatenate(grid).astype(dtype)
    worst = _ulps(_libraries()[library](x), x)
    assert worst <= SIGMOID_ULPS, f"{library} sigmoid in {dtype}: {worst} ulps"


def test_the_allowance_is_tight_enough_to_catch_a_tanh_composed_sigmoid() -> None:
    """``(1 + tanh(x/2))/2`` is a sigmoid in exact arithmetic but cancels for x < 0: the
    check above refuses it (the allowance is no blanket)."""
    x = np.linspace(-30, -5, 101)
    worst = _ulps((1 + np.tanh(x / 2)) / 2, x)
    assert worst > 100 * SIGMOID_ULPS, f"a cancelling sigmoid is only {worst} ulps off"


def test_a_sigmoid_ball_holds_the_spec_value_of_its_argument_ball() -> None:
    """σ is increasing: the ball around σ of a ball holds σ of both ends, as the spec
    computes it (the ends' midpoints ``mid ± rad``, exactly)."""
    mid = np.array([0.0, -3.5, 2.0**-30, 20.0, -700.0, -800.0, 38.0])
    rad = np.array([0.0, 2.0**-50, 2.0**-80, 1e-10, 1e-300, 0.0, 0.0])
    out = SIGMOID.enclose([Ball.of(mid, rad)], None)
    assert LIBM_SIGMOID_ULPS >= 2
    for i, (m, r) in enumerate(zip(mid.tolist(), rad.tolist(), strict=True)):
        for end in (Fraction(m) - Fraction(r), Fraction(m) + Fraction(r)):
            s = exact_sigmoid(end)[0]
            centre = Fraction(out.mid[i]) + Fraction(out.lo[i])
            assert abs(s - centre) <= Fraction(out.rad[i]), (
                f"σ ball [{i}] = {out.mid[i]!r} ± {out.rad[i]!r} misses σ({float(end)}) = "
                f"{float(s)!r}")


@settings(max_examples=10, database=None, derandomize=True)
@given(residual_cases(families=("silu",)))
def test_the_strategies_build_silu_branches_from_the_declared_family(case: Case) -> None:
    """Every block of a SiLU-only stack is ``x ⊙ σ(x)``: a sigmoid node and a product that
    reads the stream twice."""
    assert FAMILY_OPS["silu"] == {"mul", "sigmoid"}, FAMILY_OPS["silu"]
    nodes = {n.name: n for n in case.program.nodes}
    gates = [n for n in nodes.values() if n.op == "sigmoid"]
    assert gates, [n.op for n in nodes.values()]
    for gate in gates:
        (products,) = [n for n in nodes.values() if n.op == "mul" and gate.name in n.args]
        assert set(products.args) == {gate.name, gate.args[0]}, products
