"""Structural laws: shape rejection, shared operands, zero branches, α, determinism, hygiene.

Signed zeros: every "equal" here is equality as values, so ``-0.0 == +0.0``. A zero
branch can turn an input ``-0.0`` into ``+0.0`` (``-0.0 + 0.0 = +0.0`` in IEEE
arithmetic), and the law "output equals x" is about values, not bit patterns.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, differences, guarded_run, run_ok, send
from resverify.properties.laws_oracle import check_matches_spec
from resverify.spec.budget import error_budget
from resverify.spec.errors import ShapeMismatch
from resverify.spec.exact import as_fractions, evaluate
from resverify.spec.ir import Input, Node, Program, broadcast_shapes
from resverify.spec.request import Request, Result, ResultError

__all__ = [
    "check_alpha_zero_is_identity",
    "check_bitwise_deterministic",
    "check_declared_form",
    "check_inputs_unchanged",
    "check_null_space_branch_keeps_gradient",
    "check_rejects_mismatch",
    "check_shared_operand_gradient",
    "check_zero_branch",
    "merge_request",
]


def _same(first: Result, second: Result) -> str | None:
    """None when two results are bitwise the same, else the first difference, e.g.
    ``output[0, 1]: 0.5 then 0.5000000000000001``."""
    return next(iter(differences(first, second, 1)), None)


def merge_request(op: str, left: np.ndarray, right: np.ndarray, dtype: str,
                  cotangent: np.ndarray | None) -> Request:
    """``op(a, b)`` over two inputs of the given values (``op`` is add or residual_add)."""
    program = Program((Input("a", left.shape), Input("b", right.shape)),
                      (Node("y", op, ("a", "b")),), "y")
    return Request(program, {"a": left, "b": right}, dtype, cotangent)


def check_rejects_mismatch(backend: Backend, request: Request,
                           add_cotangent: np.ndarray | None = None) -> None:
    """``residual_add(a, b)`` with unequal shapes is a shape_mismatch naming both shapes.

    The shapes are judged on the error's typed ``shapes``, not on its message text.
    Nothing changes: the backend leaves the arrays it was given untouched, and a valid
    request run before and after the refused one gives bitwise the same result (that
    request runs twice first, so a backend that is simply non-deterministic is reported
    as such, not blamed on the refusal). When the pair broadcasts, ordinary ``add`` on
    the same backend accepts it (and agrees with the spec), run with ``add_cotangent``
    (default 1, 2, ..., 16, 1, 2, ...: exact in every dtype and distinct along short axes,
    so summing the wrong axes when un-broadcasting shows, where all ones would hide it).
    """
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    left, right = (request.inputs[n] for n in ("a", "b"))
    probe = merge_request("residual_add", left, left, request.dtype, np.ones_like(left))
    first = guarded_run(backend, probe)
    again = _same(first, guarded_run(backend, probe))
    ctx.check(again is None,
              f"backend {ctx.backend} is non-deterministic: residual_add(a, a) run twice gives "
              f"{again} (spec: bitwise identical)")
    sent = send(backend, request)
    result = sent.result
    pair = f"{list(left.shape)} and {list(right.shape)}"
    if not (isinstance(result, ResultError) and result.kind == "shape_mismatch"):
        said = result.kind if isinstance(result, ResultError) else "a value"
        ctx.fail(f"backend {ctx.backend} gives {said} for residual_add of {pair}, "
                 "spec gives shape_mismatch")
    ctx.check(result.shapes == (left.shape, right.shape),
              f"backend {ctx.backend} names shapes {result.shapes}, spec names "
              f"({left.shape}, {right.shape})")
    changed = sent.mutation()
    ctx.check(changed is None,
              f"backend {ctx.backend} changed {changed} while refusing {pair} (spec: untouched)")
    after = _same(first, guarded_run(backend, probe))
    ctx.check(after is None,
              f"backend {ctx.backend} gives a different result for residual_add(a, a) after "
              f"refusing {pair} ({after}): the refusal changed its state")
    try:
        shape = broadcast_shapes("add", left.shape, right.shape)
    except ShapeMismatch:
        return
    cot = (1 + np.arange(math.prod(shape), dtype=np.float64).reshape(shape) % 16
           if add_cotangent is None else add_cotangent)
    check_matches_spec(backend, merge_request("add", left, right, request.dtype, cot))


def check_shared_operand_gradient(backend: Backend, request: Request, uses: int) -> None:
    """x used ``uses`` times through merges receives ``uses · ȳ`` (exact for the data drawn)."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    result = run_ok(backend, request)
    scale = _output_scale(request)
    ctx.equal("output", result.output, as_fractions(request.inputs["x"]) * uses * scale)
    ctx.equal("grads['x']", result.grads["x"], as_fractions(request.cotangent) * uses * scale)


def _output_scale(request: Request) -> Fraction:
    out = {n.name: n for n in request.program.nodes}[request.program.output]
    return out.alpha if out.op == "scale" and out.alpha is not None else Fraction(1)


def check_zero_branch(backend: Backend, request: Request) -> None:
    """``residual_add(x, linear(x, 0))``: output = x, x̄ = ȳ, w̄ = xᵀȳ within budget.

    "Nonzero whenever x and ȳ are" is read with underflow in mind: wherever the exact
    xᵀȳ exceeds its budget, a zero there is a failure (tiny products may flush to 0).
    """
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    result = run_ok(backend, request)
    x, cot = request.inputs["x"], request.cotangent
    ctx.equal("output", result.output, as_fractions(x), "x")
    ctx.equal("grads['x']", result.grads["x"], as_fractions(cot), "ȳ")
    exact = evaluate(request)
    assert exact.grads is not None
    budget = error_budget(request, exact=exact).grads["w"]
    cells = zip(exact.grads["w"].reshape(-1).tolist(), budget.reshape(-1).tolist(), strict=True)
    learns = [np.isfinite(b) and abs(e) > Fraction(b) for e, b in cells]
    ctx.check(not any(learns) or bool(np.any(result.grads["w"].reshape(-1)[learns] != 0)),
              f"grads['w']: backend {ctx.backend} is zero wherever spec's xᵀȳ is nonzero "
              "beyond its budget (a zero branch still learns)")
    ctx.within("grads['w']", result.grads["w"], exact.grads["w"], budget)


def check_null_space_branch_keeps_gradient(backend: Backend, request: Request) -> None:
    """x in the null space of W: F(x) = 0 here, yet x̄ = ȳ + Wȳ ≠ ȳ (integer data: exact)."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    exact = evaluate(request)
    assert exact.grads is not None
    assert np.any(exact.grads["x"] != as_fractions(request.cotangent)), "strategy: Wȳ = 0"
    result = run_ok(backend, request)
    ctx.equal("output", result.output, as_fractions(request.inputs["x"]), "x")
    ctx.equal("grads['x']", result.grads["x"], exact.grads["x"])
    ctx.equal("grads['w']", result.grads["w"], exact.grads["w"])


def check_alpha_zero_is_identity(backend: Backend, request: Request) -> None:
    """Every α = 0 and identity shortcuts: output = x, x̄ = ȳ, every weight gradient = 0.

    Exactly, except where the spec's budget is infinite: a branch that overflows gives
    ``inf · 0 = nan`` in IEEE arithmetic (the extremes profile finds such inputs).
    """
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    result = run_ok(backend, request)
    budget = error_budget(request)
    ctx.equal("output", result.output, as_fractions(request.inputs["x"]), "x",
              skip=np.isinf(budget.output))
    ctx.equal("grads['x']", result.grads["x"], as_fractions(request.cotangent), "ȳ",
              skip=np.isinf(budget.grads["x"]))
    for name, grad in result.grads.items():
        if name != "x":
            ctx.equal(f"grads[{name!r}]", grad, np.zeros(grad.shape), "α=0 branch",
                      skip=np.isinf(budget.grads[name]))


def check_bitwise_deterministic(backend: Backend, request: Request) -> None:
    """The same request twice gives bitwise-identical results (or the same error)."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    differs = _same(guarded_run(backend, request), guarded_run(backend, request))
    ctx.check(differs is None,
              f"backend {ctx.backend} gives two different results for one request: {differs} "
              "(spec: bitwise identical)")


def check_inputs_unchanged(backend: Backend, request: Request) -> None:
    """Running a request never changes its input or cotangent arrays (the backend's own
    copy of them is compared with the request as sent)."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    changed = send(backend, request).mutation()
    ctx.check(changed is None,
              f"backend {ctx.backend} changed {changed} (spec: inputs and cotangent untouched)")


def check_declared_form(backend: Backend, request: Request) -> None:
    """Output and every gradient have the declared shapes and the storage dtype."""
    __tracebackhide__ = True
    run_ok(backend, request)
