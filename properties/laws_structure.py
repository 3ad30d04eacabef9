"""Structural laws: shape rejection, shared operands, zero branches, α, determinism, hygiene.

A refused merge is five laws, each its own check so that a failure names the one broken:
the answer is the typed ``shape_mismatch``, it names both shapes in order, the inputs stay
untouched, the backend's state stays unchanged, and ordinary ``add`` still accepts the
pairs that broadcast. :func:`check_rejects_mismatch` runs all five on one request.

Signed zeros: every "equal" here is equality as values, so ``-0.0 == +0.0``. A zero
branch can turn an input ``-0.0`` into ``+0.0`` (``-0.0 + 0.0 = +0.0`` in IEEE
arithmetic), and the law "output equals x" is about values, not bit patterns.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import (
    Context,
    Sent,
    differences,
    guarded_run,
    run_ok,
    send,
)
from resverify.properties.laws_oracle import check_matches_spec
from resverify.spec.budget import error_budget
from resverify.spec.errors import ShapeMismatch
from resverify.spec.exact import as_fractions, evaluate
from resverify.spec.ir import Input, Node, Program, broadcast_shapes
from resverify.spec.request import Request, Result, ResultError

__all__ = []


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


def _refused(backend: Backend, request: Request) -> tuple[Sent, str]:
    """The backend's answer to the shape-invalid ``residual_add(a, b)`` of ``request``, and
    the pair's shapes as a message spells them (``[2, 2] and [2]``)."""
    __tracebackhide__ = True
    left, right = (request.inputs[n] for n in ("a", "b"))
    return send(backend, request), f"{list(left.shape)} and {list(right.shape)}"


def check_refuses_mismatch(backend: Backend, request: Request) -> None:
    """``residual_add(a, b)`` with unequal shapes is answered with the typed error
    ``shape_mismatch``: not a value (a merge that broadcasts, reshapes or squeezes), and
    not another error kind (a catch-all ``backend_error``)."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    sent, pair = _refused(backend, request)
    result = sent.result
    if not (isinstance(result, ResultError) and result.kind == "shape_mismatch"):
        said = result.kind if isinstance(result, ResultError) else "a value"
        ctx.fail(f"backend {ctx.backend} gives {said} for residual_add of {pair}, "
                 "spec gives shape_mismatch")


def check_mismatch_names_both_shapes(backend: Backend, request: Request) -> None:
    """A ``shape_mismatch`` for ``residual_add(a, b)`` names the shapes of a and b, in that
    order, in its typed ``shapes`` (the message text is not parsed: any wording will do).

    Another answer is :func:`check_refuses_mismatch`'s to judge, so it passes here.
    """
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    left, right = (request.inputs[n] for n in ("a", "b"))
    result = _refused(backend, request)[0].result
    if isinstance(result, ResultError) and result.kind == "shape_mismatch":
        ctx.check(result.shapes == (left.shape, right.shape),
                  f"backend {ctx.backend} names shapes {result.shapes}, spec names "
                  f"({left.shape}, {right.shape})")


def check_refusal_leaves_inputs_unchanged(backend: Backend, request: Request) -> None:
    """Refusing ``residual_add(a, b)`` leaves the arrays the backend was given untouched
    (its own copy of them is compared with the request as sent)."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    sent, pair = _refused(backend, request)
    changed = sent.mutation()
    ctx.check(changed is None,
              f"backend {ctx.backend} changed {changed} while refusing {pair} (spec: untouched)")


def check_refusal_leaves_state_unchanged(backend: Backend, request: Request) -> None:
    """A valid request run before and after refusing ``residual_add(a, b)`` gives bitwise
    the same result: the refusal changed nothing in the backend.

    The valid request is ``residual_add(a, a)`` with an all-ones cotangent. It runs twice
    before the refusal, so a backend that is simply non-deterministic is reported as such,
    not blamed on the refusal.
    """
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    left = request.inputs["a"]
    probe = merge_request("residual_add", left, left, request.dtype, np.ones_like(left))
    first = guarded_run(backend, probe)
    again = _same(first, guarded_run(backend, probe))
    Context(backend.name, probe).same_twice(
        again, f"backend {ctx.backend} is non-deterministic: residual_add(a, a) run twice "
               f"gives {again} (spec: bitwise identical)")
    _, pair = _refused(backend, request)
    after = _same(first, guarded_run(backend, probe))
    ctx.check(after is None,
              f"backend {ctx.backend} gives a different result for residual_add(a, a) after "
              f"refusing {pair} ({after}): the refusal changed its state")


def check_add_accepts_what_the_merge_refuses(backend: Backend, request: Request,
                                             add_cotangent: np.ndarray | None = None) -> None:
    """Where the unequal pair of ``residual_add(a, b)`` broadcasts, ordinary ``add`` on the
    same backend accepts it and agrees with the spec (a pair that does not broadcast
    passes: add refuses it too).

    It runs with ``add_cotangent`` (default 1, 2, ..., 16, 1, 2, ...: exact in every dtype
    and distinct along short axes, so summing the wrong axes when un-broadcasting shows,
    where all ones would hide it).
    """
    __tracebackhide__ = True
    left, right = (request.inputs[n] for n in ("a", "b"))
    try:
        shape = broadcast_shapes("add", left.shape, right.shape)
    except ShapeMismatch:
        return
    cot = (1 + np.arange(math.prod(shape), dtype=np.float64).reshape(shape) % 16
           if add_cotangent is None else add_cotangent)
    check_matches_spec(backend, merge_request("add", left, right, request.dtype, cot))


def check_rejects_mismatch(backend: Backend, request: Request,
                           add_cotangent: np.ndarray | None = None) -> None:
    """Every law of a refused merge on one request, the state first (so that no earlier
    refusal in this call hides a change): :func:`check_refusal_leaves_state_unchanged`,
    :func:`check_refuses_mismatch`, :func:`check_mismatch_names_both_shapes`,
    :func:`check_refusal_leaves_inputs_unchanged` and
    :func:`check_add_accepts_what_the_merge_refuses`.

    The suite states each as a property of its own; this runs them together where one
    request is to be judged whole.
    """
    __tracebackhide__ = True
    check_refusal_leaves_state_unchanged(backend, request)
    check_refuses_mismatch(backend, request)
    check_mismatch_names_both_shapes(backend, request)
    check_refusal_leaves_inputs_unchanged(backend, request)
    check_add_accepts_what_the_merge_refuses(backend, request, add_cotangent)


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
    ctx.same_twice(differs, f"backend {ctx.backend} gives two different results for one "
                            f"request: {differs} (spec: bitwise identical)")


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
