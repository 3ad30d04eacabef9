"""Laws in α and in depth, checked within the spec's error budget.

* the output and every gradient are affine in the α of the last block: with exact
  ``Y(α)``, ``Y(a) = (1-a)·Y(0) + a·Y(1)``; the backend's three runs each sit within
  their budget ``B`` of ``Y``, so ``|y(a) - (1-a)y(0) - a·y(1)| <= B_a + |1-a|B_0 + |a|B_1``
  (the combination is formed exactly, in rationals);
* for ``F = a·x``: L residual blocks multiply by ``(1+a)^L``, a plain stack by ``a^L``;
* the unrolled sum ``x_L = x_0 + Σ a_l x_l`` over the backend's own intermediate states,
  with tolerance ``B_L + Σ |a_l| B_l``;
* a block with ``a = -1`` cancels exactly: output and input gradient are exactly zero.

The affine law and the unrolled sum relate several answers: each builds its
:class:`~resverify.properties.relations.Group` (:func:`affine_in_alpha`,
:func:`unrolled_sum`), which the test, the corpus and ``resverify vectors run`` all drive.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, run_ok
from resverify.properties.cases import Case
from resverify.properties.relations import (
    Group,
    Linear,
    Term,
    array_budget,
    distinct,
    holds,
    rational_bound,
)
from resverify.properties.strategies import last_alpha_node
from resverify.spec.budget import error_budget
from resverify.spec.exact import as_fractions
from resverify.spec.ir import Input, Node, Program
from resverify.spec.request import Request

__all__ = []


def _frac(array: object) -> np.ndarray:
    return as_fractions(np.asarray(array, dtype=np.float64))


def affine_in_alpha(case: Case, dtype: str, a: Fraction) -> Group:
    """The group of the affine law: ``case`` at α = 0, 1 and ``a`` for the last block, and
    for the output and every gradient ``y(a) - (1-a)·y(0) - a·y(1)`` within
    ``B_a + |1-a|·B_0 + |a|·B_1`` (nothing is claimed of an array with an infinite budget)."""
    name = last_alpha_node(case)
    alphas = (Fraction(0), Fraction(1), a)
    requests, at = distinct(case.with_alpha(name, v).request(dtype) for v in alphas)
    coefs = ((at[2], Fraction(1)), (at[0], -(1 - a)), (at[1], -a))
    relations = []
    for array in ["output", *(f"grads/{n}" for n in requests[0].program.input_names)]:
        parts = [(c, array_budget(requests[k], array)) for k, c in coefs]
        relations.append(Linear(f"{array} at α={a} against (1-α)·y(0) + α·y(1)",
                                tuple(Term(k, array, c) for k, c in coefs),
                                rational_bound(parts, whole=True)))
    return Group(requests, tuple(relations))


def check_output_affine_in_alpha(backend: Backend, case: Case, dtype: str, a: Fraction) -> None:
    """``y(a)`` against ``(1-a)·y(0) + a·y(1)`` for the last block's α, output and gradients."""
    __tracebackhide__ = True
    holds(backend, affine_in_alpha(case, dtype, a))


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


def unrolled_sum(requests: Sequence[Request], factors: Sequence[Fraction]) -> Group:
    """The group of the unrolled sum: ``requests[l]`` is the residual scale chain of depth
    l (``requests[0]`` the identity), and ``x_L - x_0 - Σ_l a_l x_l`` over the backend's
    own states lies within ``B_L + Σ |a_l| B_l``. An element whose budget is infinite in
    some state (it may round past the dtype's largest value) claims nothing, as in every
    other law: it is not compared, and it may be ±inf or NaN."""
    depth = len(factors)
    coef = dict.fromkeys(range(depth + 1), Fraction(0))
    coef[depth] += 1
    coef[0] -= 1
    for layer, a in enumerate(factors):
        coef[layer] -= a
    bounds = [(Fraction(1), array_budget(requests[depth], "output"))] + [
        (a, array_budget(requests[layer], "output")) for layer, a in enumerate(factors)]
    terms = tuple(Term(d, "output", c) for d, c in coef.items())
    return Group(tuple(requests), (Linear("x_L against x_0 + Σ a_l·x_l from the backend's "
                                          "own states", terms,
                                          rational_bound(bounds, whole=False)),))


def check_unrolled_sum(backend: Backend, requests: Sequence[Request],
                       factors: Sequence[Fraction]) -> None:
    """``x_L = x_0 + Σ_l a_l x_l`` where ``x_l`` is the backend's output at depth l
    (:func:`unrolled_sum`)."""
    __tracebackhide__ = True
    holds(backend, unrolled_sum(requests, factors))


def check_cancellation_is_exact(backend: Backend, request: Request) -> None:
    """A block ``x + (-1)·x`` in the stack: output and x̄ are exactly zero."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    result = run_ok(backend, request)
    zeros = np.zeros(request.inputs["x"].shape)
    ctx.equal("output", result.output, zeros, "spec (exact cancellation)")
    ctx.equal("grads['x']", result.grads["x"], zeros, "spec (exact cancellation)")
