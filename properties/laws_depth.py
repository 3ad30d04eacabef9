"""Laws in α and in depth, checked within the spec's error budget.

* the output and every gradient are affine in the α of the last block: with exact
  ``Y(α)``, ``Y(a) = (1-a)·Y(0) + a·Y(1)``; the backend's three runs each sit within
  their budget ``B`` of ``Y``, so ``|y(a) - (1-a)y(0) - a·y(1)| <= B_a + |1-a|B_0 + |a|B_1``
  (the combination is formed exactly, in rationals);
* for ``F = a·x``: L residual blocks multiply by ``(1+a)^L``, a plain stack by ``a^L``;
* the unrolled sum ``x_L = x_0 + Σ a_l x_l`` over the backend's own intermediate states,
  with tolerance ``B_L + Σ |a_l| B_l``;
* a block with ``a = -1`` cancels exactly: output and input gradient are exactly zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, num, run_ok
from resverify.properties.cases import Case
from resverify.properties.strategies import last_alpha_node
from resverify.spec.budget import error_budget
from resverify.spec.exact import as_fractions
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

__all__ = [
    "check_cancellation_is_exact",
    "check_output_affine_in_alpha",
    "check_plain_depth_law",
    "check_residual_depth_law",
    "check_unrolled_sum",
    "scale_chain",
]


def _frac(array: object) -> np.ndarray:
    return as_fractions(np.asarray(array, dtype=np.float64))


def _abs_budget(array: np.ndarray) -> np.ndarray:
    return as_fractions(np.asarray(array, dtype=np.float64))


def _finite(ctx: Context, what: str, array: object) -> None:
    __tracebackhide__ = True
    ctx.check(bool(np.all(np.isfinite(np.asarray(array)))),
              f"{what}: backend {ctx.backend} gives a non-finite value "
              f"{np.asarray(array).tolist()!r}, spec is finite")


def check_output_affine_in_alpha(backend: Backend, case: Case, dtype: str, a: Fraction) -> None:
    """``y(a)`` against ``(1-a)·y(0) + a·y(1)`` for the last block's α, output and gradients."""
    __tracebackhide__ = True
    name = last_alpha_node(case)
    requests = {v: case.with_alpha(name, v).request(dtype) for v in (Fraction(0), Fraction(1), a)}
    results = {v: run_ok(backend, r) for v, r in requests.items()}
    budgets = {v: error_budget(r) for v, r in requests.items()}
    ctx = Context(backend.name, requests[a])
    keys = ["output", *requests[a].program.input_names]

    def pick(v: Fraction, key: str) -> tuple[np.ndarray, np.ndarray]:
        r, b = results[v], budgets[v]
        return ((r.output, b.output) if key == "output" else (r.grads[key], b.grads[key]))

    for key in keys:
        (y0, b0), (y1, b1), (ya, ba) = (pick(v, key) for v in (Fraction(0), Fraction(1), a))
        if not all(np.all(np.isfinite(np.asarray(b, dtype=np.float64))) for b in (b0, b1, ba)):
            continue
        what = key if key == "output" else f"grads[{key!r}]"
        for y in (y0, y1, ya):
            _finite(ctx, what, y)
        flat = [_frac(v).reshape(-1).tolist() for v in (y0, y1, ya, b0, b1, ba)]
        for i, (v0, v1, va, e0, e1, ea) in enumerate(zip(*flat, strict=True)):
            line = (1 - a) * v0 + a * v1
            tol = ea + abs(1 - a) * e0 + abs(a) * e1
            index = [int(j) for j in np.unravel_index(i, np.shape(ya))] if np.ndim(ya) else []
            if abs(va - line) > tol:
                ctx.fail(f"{what}{index} at α={a}: backend {ctx.backend} = {num(va)}, affine "
                         f"prediction (1-α)y(0)+α·y(1) from the backend = {num(line)}, "
                         f"budget {num(tol)} (spec: affine in α)")


def scale_chain(shape: tuple[int, ...], factors: Sequence[Fraction], residual: bool) -> Program:
    """``h_l = residual_add(h, scale(h, a_l))`` (or ``scale(h, a_l)`` when plain)."""
    nodes, h = [], "x"
    for layer, a in enumerate(factors):
        nodes.append(Node(f"f{layer}", "scale", (h,), a))
        if residual:
            nodes.append(Node(f"h{layer}", "residual_add", (h, f"f{layer}")))
            h = f"h{layer}"
        else:
            h = f"f{layer}"
    return Program((Input("x", shape),), tuple(nodes), h)


def _check_power(backend: Backend, request: Request, factor: Fraction, law: str) -> None:
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    result = run_ok(backend, request)
    budget = error_budget(request)
    ctx.within(f"output ({law})", result.output, _frac(request.inputs["x"]) * factor,
               budget.output)
    ctx.within(f"grads['x'] ({law})", result.grads["x"], _frac(request.cotangent) * factor,
               budget.grads["x"])


def check_residual_depth_law(backend: Backend, request: Request, a: Fraction, depth: int) -> None:
    """L residual blocks with ``F = a·x``: output and x̄ scale by ``(1+a)^L``."""
    __tracebackhide__ = True
    _check_power(backend, request, (1 + a) ** depth, f"(1+a)^L, a={a}, L={depth}")


def check_plain_depth_law(backend: Backend, request: Request, a: Fraction, depth: int) -> None:
    """L plain layers ``a·x``: output and x̄ scale by ``a^L``."""
    __tracebackhide__ = True
    _check_power(backend, request, a**depth, f"a^L, a={a}, L={depth}")


def check_unrolled_sum(backend: Backend, requests: Sequence[Request],
                       factors: Sequence[Fraction]) -> None:
    """``x_L = x_0 + Σ_l a_l x_l`` where ``x_l`` is the backend's output at depth l.

    ``requests[l]`` is the residual scale chain of depth l (``requests[0]`` the identity).
    """
    __tracebackhide__ = True
    results = [run_ok(backend, request) for request in requests]
    budgets = [np.asarray(error_budget(r).output, dtype=np.float64).reshape(-1)
               for r in requests]
    # An infinite budget (a state that may round past the dtype's largest value) claims
    # nothing about that element, as in every other law: it is not compared, and it may
    # be ±inf or NaN; every other element of every state must be finite.
    unbounded = np.any(np.isinf(np.stack(budgets)), axis=0)
    outputs = []
    for request, result in zip(requests, results, strict=True):
        judged = np.where(unbounded, 0.0, np.asarray(result.output, np.float64).reshape(-1))
        _finite(Context(backend.name, request), "output", judged)
        outputs.append(_frac(judged).tolist())
    ctx = Context(backend.name, requests[-1])
    shape = np.shape(requests[0].inputs["x"])
    budgets = [_abs_budget(np.where(unbounded, 0.0, b)).tolist() for b in budgets]
    for flat, last in enumerate(outputs[-1]):
        if unbounded[flat]:
            continue
        total = outputs[0][flat] + sum(a * x[flat] for a, x in zip(factors, outputs, strict=False))
        tol = budgets[-1][flat] + sum(abs(a) * b[flat] for a, b in zip(factors, budgets,
                                                                        strict=False))
        index = [int(j) for j in np.unravel_index(flat, shape)] if shape else []
        if abs(last - total) > tol:
            ctx.fail(f"output{index}: backend {ctx.backend} x_L = {num(last)}, unrolled "
                     f"x_0 + Σ a_l x_l from its own states = {num(total)}, budget {num(tol)}")


def check_cancellation_is_exact(backend: Backend, request: Request) -> None:
    """A block ``x + (-1)·x`` in the stack: output and x̄ are exactly zero."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    result = run_ok(backend, request)
    zeros = np.zeros(request.inputs["x"].shape)
    ctx.equal("output", result.output, zeros, "spec (exact cancellation)")
    ctx.equal("grads['x']", result.grads["x"], zeros, "spec (exact cancellation)")
