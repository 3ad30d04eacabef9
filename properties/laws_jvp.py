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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, num, run_ok
from resverify.spec.budget import Budget, error_budget
from resverify.spec.exact import as_fractions, evaluate
from resverify.spec.request import Request, Value

__all__ = [
    "Pairing",
    "check_alpha_zero_tangent_is_input_tangent",
    "check_duality",
    "check_shared_operand_tangent",
    "check_tangent_is_linear",
    "check_tangent_matches_spec",
    "linearity_factors",
    "pairing",
    "scaled_tangents",
]


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


class Pairing:
    """``Σ wᵢ·vᵢ`` over pairs of arrays, exactly, with the bound ``Σ |wᵢ|·Bᵢ`` of its error.

    ``w`` are exact weights (the request's cotangent or tangents), ``v`` the backend's
    floats and ``B`` their budgets. A zero weight contributes nothing, whatever its value.
    ``unbounded`` names the first element with a non-zero weight and an infinite budget
    (the analysis allows overflow there: the inner product is then not checked);
    ``broken`` the first with a finite budget and a NaN or infinite value.
    """

    def __init__(self) -> None:
        self.total = Fraction(0)
        self.slack = Fraction(0)
        self.unbounded: str | None = None
        self.broken: str | None = None

    def add(self, what: str, weights: np.ndarray, values: np.ndarray,
            bounds: np.ndarray) -> None:
        shape = np.shape(weights)
        limits = np.broadcast_to(np.asarray(bounds, dtype=np.float64), shape)
        for index, w, v, b in zip(np.ndindex(*shape), np.asarray(weights).reshape(-1).tolist(),
                                  np.asarray(values).reshape(-1).tolist(),
                                  limits.reshape(-1).tolist(), strict=True):
            if w == 0:
                continue
            where = f"{what}{list(index)}"
            if not np.isfinite(b):
                self.unbounded = self.unbounded or where
            elif not np.isfinite(v):
                self.broken = self.broken or f"{where} = {v!r}"
            else:
                self.total += Fraction(w) * Fraction(v)
                self.slack += abs(Fraction(w)) * Fraction(b)


def pairing(parts: Iterable[tuple[str, np.ndarray, np.ndarray, np.ndarray]]) -> Pairing:
    """The :class:`Pairing` of ``(what, weights, values, bounds)`` parts."""
    found = Pairing()
    for what, weights, values, bounds in parts:
        found.add(what, weights, values, bounds)
    return found


def check_duality(backend: Backend, request: Request) -> None:
    """``⟨ȳ, J t⟩ = ⟨Jᵀȳ, t⟩`` on the backend's own answer, within the budgets.

    Both sides are exact sums of the backend's floats times the request's ȳ and t. The
    true sides are equal, and each float is within its budget of the true value (the
    budget bounds the distance to the true value, the spec's slack included), so the
    difference is at most ``Σ|ȳᵢ|·B(Jt)ᵢ + Σⱼ|tⱼ|·B(x̄)ⱼ``. Not checked where a budget
    with a non-zero weight is infinite.
    """
    __tracebackhide__ = True
    ctx, value, tangent = forward_value(backend, request)
    assert request.tangents is not None
    budget = _forward_budget(request)
    assert budget.tangent is not None
    left = pairing([("tangent", request.cotangent, tangent, budget.tangent)])
    right = pairing((f"grads[{n!r}]", request.tangents[n], value.grads[n], budget.grads[n])
                    for n in request.program.input_names)
    if left.unbounded or right.unbounded:
        return  # the analysis allows overflow on a term that counts: no bound to check
    broken = left.broken or right.broken
    ctx.check(broken is None, f"{broken}: backend {ctx.backend} gives a non-finite value "
                              "where the spec's budget is finite (duality ⟨ȳ, J t⟩ = ⟨Jᵀȳ, t⟩)")
    diff, bound = abs(left.total - right.total), left.slack + right.slack
    ctx.check(diff <= bound,
              f"duality: backend {ctx.backend} gives ⟨ȳ, J t⟩ = {num(left.total)} from its "
              f"tangent and ⟨Jᵀȳ, t⟩ = {num(right.total)} from its gradients, |diff| = "
              f"{num(diff)} > bound {num(bound)} (Σ|ȳ|·B(Jt) + Σ|t|·B(x̄))")


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


def check_tangent_is_linear(backend: Backend, request: Request,
                            factors: Sequence[Fraction]) -> None:
    """``J(s·t) = s·J t`` exactly for each factor s (as values: ``-0.0 == 0.0``), except
    where ``J t`` itself is NaN or infinite (overflow: nothing to scale)."""
    __tracebackhide__ = True
    _, _, tangent = forward_value(backend, request)
    finite = np.isfinite(tangent)
    for factor in factors:
        ctx, _, scaled = forward_value(backend, scaled_tangents(request, factor))
        expected = np.where(finite, tangent, 0).astype(np.float64)
        ctx.equal(f"tangent of ({factor})·t", scaled, as_fractions(expected) * factor,
                  f"({factor})·(tangent of t)", skip=~finite)


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
