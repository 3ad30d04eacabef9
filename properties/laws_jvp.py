"""Forward-mode laws: the output tangent ``J·t`` against the exact spec, the duality of the
tangent with the gradients, and the reverse-mode structural laws mirrored for tangents.

Why these laws. A forward-mode engine computes ``J·t`` by pushing tangents along the
program; a reverse-mode one computes ``Jᵀȳ`` by pulling cotangents back. The two are tied
by the duality ``⟨ȳ, J t⟩ = ⟨Jᵀȳ, t⟩``, which holds for the true Jacobian of any
program. One forward-mode request asks for the output, the gradients and the tangent, so
the duality can be checked on one answer: both inner products are computed exactly, in
Fractions, from the backend's floats, and the only slack allowed is what the spec's error
budgets allow those floats to be off by. A backend whose tangent and gradients disagree
fails it even where neither is checked against the oracle directly.

The structural laws mirror reverse mode's where they say something:

* linearity in t: ``J(s·t) = s·J t`` exactly, elementwise, in binary floating point for
  ``s = -1`` (rounding to nearest is symmetric) and for ``s = ±2`` as long as nothing
  leaves the normal range (scaling by a power of two commutes with every rounding there);
  a tangent rule that is not linear (a tangent masked by its own sign, a finite
  difference) breaks it;
* the zero branch: with every α = 0 the output tangent is the input's tangent exactly;
* shared operands: x merged with itself k times (then scaled by a power of two c) has the
  tangent ``k·c·t``, exact for the short dyadic data drawn.

The duality and linearity in t relate several answers (or several arrays of one): each
builds its :class:`~resverify.properties.relations.Group` (:func:`duality`,
:func:`tangent_linearity`), which the test, the corpus and ``resverify vectors run`` all
drive.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, run_ok
from resverify.properties.relations import (
    INF,
    Group,
    Linear,
    Term,
    distinct,
    exact_array,
    holds,
    pairing,
)
from resverify.spec.budget import Budget, error_budget
from resverify.spec.exact import as_fractions, evaluate
from resverify.spec.request import Request, Value

__all__ = []


def forward_value(backend: Backend, request: Request) -> tuple[Context, Value, np.ndarray]:
    """Run a forward-mode request: its context, the backend's value and its output tangent
    (present: :func:`~resverify.properties.assertions.run_ok` checks the declared form)."""
    __tracebackhide__ = True
    if request.tangents is None:
        raise AssertionError("a forward-mode law needs a request with tangents")
    ctx = Context(backend.name, request)
    value = run_ok(backend, request)
    assert value.tangent is not None  # check_form: present exactly in forward mode
    return ctx, value, np.asarray(value.tangent)


def _forward_budget(request: Request) -> Budget:
    budget = error_budget(request, exact=evaluate(request))
    if budget.tangent is None:
        raise AssertionError("the spec's budget has no tangent part for a forward-mode request")
    return budget


def check_tangent_matches_spec(backend: Backend, request: Request) -> None:
    """The output tangent lies within ``Budget.tangent`` of the exact ``J·t`` (the budget
    includes the exact interpreter's own slack, non-zero only for tanh and the norms)."""
    __tracebackhide__ = True
    ctx, _, tangent = forward_value(backend, request)
    exact = evaluate(request)
    assert exact.tangent is not None
    budget = error_budget(request, exact=exact)
    assert budget.tangent is not None
    ctx.within("tangent", tangent, exact.tangent, budget.tangent)


def duality(request: Request) -> Group:
    """The group of the duality on one forward-mode request: ``⟨ȳ, J t⟩ − ⟨Jᵀȳ, t⟩`` summed
    from its one answer, within ``Σ|ȳᵢ|·B(Jt)ᵢ + Σⱼ|tⱼ|·B(x̄)ⱼ`` (inf, nothing claimed, when
    a budget with a non-zero weight is infinite).

    Both sides are exact sums of the backend's floats times the request's ȳ and t. The
    true sides are equal, and each float is within its budget of the true value (the
    budget bounds the distance to the true value, the spec's slack included), which gives
    the bound."""
    if request.tangents is None:
        raise AssertionError("a forward-mode law needs a request with tangents")
    budget = _forward_budget(request)
    assert budget.tangent is not None
    parts = [("tangent", Fraction(1), exact_array(request.cotangent), budget.tangent)] + [
        (f"grads/{n}", Fraction(-1), exact_array(request.tangents[n]), budget.grads[n])
        for n in request.program.input_names]
    slack = pairing((array, weights, np.zeros(np.shape(weights)), bounds)
                    for array, _, weights, bounds in parts)
    bound = INF if slack.unbounded else slack.slack
    terms = tuple(Term(0, array, coef, weights) for array, coef, weights, _ in parts)
    return Group((request,), (Linear("duality ⟨ȳ, J t⟩ − ⟨Jᵀȳ, t⟩", terms,
                                     np.array(bound, dtype=object), "sum"),))


def check_duality(backend: Backend, request: Request) -> None:
    """``⟨ȳ, J t⟩ = ⟨Jᵀȳ, t⟩`` on the backend's own answer, within the budgets
    (:func:`duality`)."""
    __tracebackhide__ = True
    holds(backend, duality(request))


def linearity_factors(dtype: str, extremes: bool) -> tuple[Fraction, ...]:
    """The factors s for which ``J(s·t) = s·J t`` holds exactly: -1 always; ±2 too where no
    intermediate can leave the normal range (sensible values in a dtype with float32's
    exponent range or wider; float16's normal range starts at 2**-14, which products of
    sensible values reach)."""
    wide = dtype in ("float64", "float32", "bfloat16")
    return (Fraction(-1), Fraction(2), Fraction(-2)) if wide and not extremes else (
        Fraction(-1),)


def scaled_tangents(request: Request, factor: Fraction) -> Request:
    """The same request with every input tangent multiplied by ``factor`` (exact in the
    request's dtype for the factors of :func:`linearity_factors`)."""
    assert request.tangents is not None
    tangents = {k: np.asarray(v * float(factor), dtype=v.dtype)
                for k, v in request.tangents.items()}
    return Request(request.program, dict(request.inputs), request.dtype, request.cotangent,
                   tangents)


def tangent_linearity(request: Request, factors: Sequence[Fraction]) -> Group:
    """The group of linearity in t: ``request`` and, for each factor s, the same request
    with every input tangent times s; ``J(s·t) − s·J t`` exactly 0 (as values: ``-0.0 ==
    0.0``) except where the spec's tangent budget is infinite (overflow: nothing to scale)."""
    requests, at = distinct([request, *(scaled_tangents(request, s) for s in factors)])
    budget = _forward_budget(request).tangent
    assert budget is not None
    limit = np.empty(np.shape(budget), dtype=object)
    limit.reshape(-1)[:] = [INF if b == INF else Fraction(0) for b in budget.reshape(-1)]
    return Group(requests, tuple(
        Linear(f"tangent of {s}·t against {s}·(tangent of t)",
               (Term(k, "tangent", Fraction(1)), Term(0, "tangent", -s)), limit)
        for s, k in zip(factors, at[1:], strict=True)))


def check_tangent_is_linear(backend: Backend, request: Request,
                            factors: Sequence[Fraction]) -> None:
    """``J(s·t) = s·J t`` exactly for each factor s (:func:`tangent_linearity`)."""
    __tracebackhide__ = True
    holds(backend, tangent_linearity(request, factors))


def check_alpha_zero_tangent_is_input_tangent(backend: Backend, request: Request) -> None:
    """Every α = 0 and identity shortcuts: the output tangent is x's tangent exactly (except
    where the budget is infinite: an overflowing branch gives ``inf·0 = nan``)."""
    __tracebackhide__ = True
    ctx, _, tangent = forward_value(backend, request)
    assert request.tangents is not None
    budget = _forward_budget(request)
    assert budget.tangent is not None
    ctx.equal("tangent", tangent, as_fractions(request.tangents["x"]), "x's tangent",
              skip=np.isinf(budget.tangent))


def check_shared_operand_tangent(backend: Backend, request: Request, uses: int) -> None:
    """x merged with itself ``uses`` times, then scaled by a constant c (the program's
    output node): the output tangent is ``uses·c·t`` exactly (short dyadic data and a
    power-of-two c: every partial sum is exact)."""
    __tracebackhide__ = True
    ctx, _, tangent = forward_value(backend, request)
    assert request.tangents is not None
    output = {n.name: n for n in request.program.nodes}[request.program.output]
    factor = output.alpha if output.op == "scale" and output.alpha is not None else 1
    times = f"{uses}·t" if factor == 1 else f"{uses}·({factor})·t"
    ctx.equal("tangent", tangent, as_fractions(request.tangents["x"]) * uses * factor, times)
