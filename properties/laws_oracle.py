"""Laws that compare a backend with the exact specification element by element.

* forward and every input gradient within the spec's error budget (which already
  includes the exact interpreter's own slack, non-zero only for tanh);
* an independent finite-difference check: central differences of the scalar
  ``L(θ) = Σ ȳ · y(θ)`` evaluated by the exact forward (rational arithmetic, tanh through
  mpmath interval enclosures) at ``θ ± h`` with ``h = 2**-60``, on a sample of coordinates.
  For programs without relu the central difference differs from the true derivative by
  at most ``h²/6 · |L'''|``; with the sensible default ranges ``|L'''|`` stays far below
  ``2**40``, so ``2**-80`` is added to the tolerance for truncation, and
  ``(slack₊ + slack₋)/(2h)`` for the enclosures. relu is left out of these programs: at a
  kink the central difference is the mean of the one-sided slopes, not the declared 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, Element, num, run_ok
from resverify.spec.budget import error_budget
from resverify.spec.compare import Cell
from resverify.spec.exact import as_fractions, evaluate, evaluate_exact
from resverify.spec.request import Request

__all__ = []

FD_STEP = Fraction(1, 2**60)
FD_TRUNCATION = Fraction(1, 2**80)


def check_matches_spec(backend: Backend, request: Request) -> None:
    """Output and every input gradient lie within the error budget of the exact values."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    result = run_ok(backend, request)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    budget = error_budget(request, exact=exact)  # includes the exact side's own slack
    ctx.within("output", result.output, exact.output, budget.output)
    for name in request.program.input_names:
        ctx.within(f"grads[{name!r}]", result.grads[name], exact.grads[name],
                   budget.grads[name])


def _objective(request: Request, name: str, flat: int, shift: Fraction
               ) -> tuple[Fraction, Fraction]:
    """``Σ ȳ·y`` with input ``name``'s element ``flat`` moved by ``shift``, and its slack."""
    inputs = {k: as_fractions(v) for k, v in request.inputs.items()}
    moved = inputs[name].reshape(-1).copy()
    moved[flat] += shift
    inputs[name] = moved.reshape(inputs[name].shape)
    exact = evaluate_exact(request.program, inputs, None)
    assert exact.output is not None
    cot = as_fractions(request.cotangent).reshape(-1)
    out = exact.output.reshape(-1)
    size = sum(abs(c) for c in cot.tolist())
    return sum((c * y for c, y in zip(cot, out, strict=True)), Fraction(0)), size * exact.slack


def check_finite_differences(backend: Backend, request: Request,
                             coordinates: Sequence[tuple[str, int]]) -> None:
    """The backend's gradient agrees with central differences of the exact forward."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    result = run_ok(backend, request)
    budget = error_budget(request)
    for name, flat in coordinates:
        bound = float(budget.grads[name].reshape(-1)[flat])
        if not np.isfinite(bound):
            continue  # the analysis allows overflow here: no bound to check
        up, e_up = _objective(request, name, flat, FD_STEP)
        down, e_down = _objective(request, name, flat, -FD_STEP)
        slope = (up - down) / (2 * FD_STEP)
        tolerance = Fraction(bound) + (e_up + e_down) / (2 * FD_STEP) + FD_TRUNCATION
        value = float(np.asarray(result.grads[name]).reshape(-1)[flat])
        index = np.unravel_index(flat, request.inputs[name].shape)
        where = f"grads[{name!r}][{', '.join(str(int(i)) for i in index)}]"
        if not (np.isfinite(value) and abs(Fraction(value) - slope) <= tolerance):
            side = "spec central difference (h=2**-60)"
            diff = Cell((), value, slope, float(tolerance), False).abs_diff
            e = Element(where, num(value), f"{num(slope)} ({side})", num(diff), num(tolerance))
            ctx.fail(f"{where}: backend {ctx.backend} = {e.backend}, {side} = {num(slope)}, "
                     f"|diff| > tolerance {e.budget}", element=e)
