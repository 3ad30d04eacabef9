"""Laws of normalization in residual streams: where the norm sits changes the recurrence.

A pre-norm block ``h + α·F(N(h))`` keeps the identity path free of N, so with every
branch switched off (α = 0) a pre-norm stack is the identity, forward and backward, bit
for bit. A post-norm block ``N(h + α·F(h))`` normalizes the stream itself: with the
branches off its output is N applied once per block and its input gradient passes
through N's Jacobian. The norm's own laws (mean 0, mean square ``1 - ε/(σ² + ε)``,
invariance to shifts, scaling moving into ε, the input gradient orthogonal to the
constant vector) are checked on the backend's numbers against the exact values and
their error budgets: a statistic of the backend's output lies within the statistic of
the budgets of the exact one. Width changes need a projection: ``residual_add`` refuses
to broadcast one, and a projection shortcut's gradient is the sum of its two paths.

Against depth, the two placements differ in where the gradient goes. layer_norm's
Jacobian is orthogonal to the constant vector, so in a pre-norm stack every branch adds a
row-sum-free term to the gradient and the identity highway alone carries ȳ's row sums down
to x, unchanged at any depth; in a post-norm stack the gradient reaching every block has
passed through that block's norm, so it sums to 0 on every row (visible in each block's
weight gradient ``W̄_l = α·h_{l-1}ᵀ ḡ_l``, whose rows then sum to 0). Both exact in the spec
and within the row's budget on the backend, at each depth of the stack, whose gradients
follow the spec's within budget.

Signed zeros are judged as values (``-0.0 == +0.0``): ``x + 0`` turns ``-0.0`` into ``+0.0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np
from hypothesis import reject

from resverify.impl.backend import Backend
from resverify.properties.assertions import Context, guarded_run, num, run_ok
from resverify.properties.cases import Case
from resverify.properties.laws_oracle import check_matches_spec
from resverify.properties.laws_structure import check_alpha_zero_is_identity
from resverify.spec.budget import Budget, error_budget
from resverify.spec.codec import round_to_dtype
from resverify.spec.exact import as_fractions, evaluate, evaluate_exact
from resverify.spec.ir import Input, Node, Program, infer_shapes
from resverify.spec.rational import exact_rsqrt
from resverify.spec.request import Request, ResultError, Value
from resverify.spec.rounding import up

__all__ = []


def norm_node(request: Request) -> Node:
    """The program's one norm node (the single-norm programs of these laws)."""
    norms = [n for n in request.program.nodes if n.op in ("layer_norm", "rms_norm")]
    assert len(norms) == 1, f"strategy: one norm expected, got {[n.name for n in norms]}"
    return norms[0]


def with_input(request: Request, x: np.ndarray, eps: Fraction | None = None) -> Request:
    """The same single-norm request on input ``x`` (and ε, if given)."""
    node = norm_node(request)
    if eps is not None:
        node = Node(node.name, node.op, node.args, eps=eps)
    program = Program(request.program.inputs,
                      tuple(node if n.name == node.name else n for n in request.program.nodes),
                      request.program.output)
    return Request(program, {**request.inputs, "x": x}, request.dtype, request.cotangent)


def _rows(array: np.ndarray) -> np.ndarray:
    """The rows along the last axis, as a 2-D object array (not reshape(-1, n): n may be 0)."""
    shape = np.shape(array)
    return np.asarray(array, dtype=object).reshape(math.prod(shape[:-1]), shape[-1])


def check_pre_norm_zero_branch_identity(backend: Backend, request: Request) -> None:
    """Pre-norm stack with every α = 0: output = x and x̄ = ȳ exactly, every other input's
    gradient exactly 0 (the branches see N(h), the identity path never does); except where
    the spec's budget is infinite: a branch that overflows gives ``inf · 0 = nan``. The same
    law as any residual program with its branches off, so the same check."""
    __tracebackhide__ = True
    check_alpha_zero_is_identity(backend, request)


def check_post_norm_zero_branch(backend: Backend, request: Request) -> None:
    """Post-norm stack with every α = 0: the output is N applied once per block (N is not
    idempotent for ε > 0: each application shrinks the row by ``sqrt(1 - ε/(σ²+ε))``), within
    budget, and x̄ goes through N's Jacobian: within budget of the spec's, not ȳ itself, and
    for layer_norm summing to 0 on every row."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    norms = [n for n in request.program.order if n.op in ("layer_norm", "rms_norm")]
    check_matches_spec(backend, request)
    result = run_ok(backend, request)
    ctx.check(bool(np.any(result.grads["x"] != request.cotangent))
              or not np.any(exact.grads["x"] != as_fractions(request.cotangent)),
              f"grads['x']: backend {ctx.backend} passes ȳ unchanged through a post-norm "
              "stack (spec: through N's Jacobian)")
    if norms[-1].op == "layer_norm":
        _sums_to_zero(ctx, result.grads["x"], exact.grads["x"],
                      error_budget(request, exact=exact).grads["x"])


def _sums_to_zero(ctx: Context, actual: np.ndarray, exact: np.ndarray, budget: np.ndarray,
                  what: str = "grads['x']") -> None:
    """Every row of ``exact`` sums to 0 exactly; the backend's row sums lie within the sum
    of the row's budget (``|Σ actual| <= Σ |actual - exact| <= Σ budget``)."""
    __tracebackhide__ = True
    zeros = [Fraction(0)] * len(_rows(exact))
    _row_sums(ctx, actual, exact, budget, zeros, what)


def _row_sums(ctx: Context, actual: np.ndarray, exact: np.ndarray, budget: np.ndarray,
              sums: list[Fraction], what: str) -> None:
    """Row r of ``exact`` sums to ``sums[r]`` exactly; the backend's within the row's
    budget of it."""
    __tracebackhide__ = True
    bounds = _rows(budget).astype(np.float64)
    for row, (values, spec) in enumerate(zip(_rows(actual), _rows(exact), strict=True)):
        want = sums[row]
        assert sum(spec, Fraction(0)) == want, (
            f"spec: row {row} of {what} sums to {sum(spec)}, not {want}")
        allowed = bounds[row].sum()
        finite = np.all(np.isfinite(values.astype(np.float64)))
        if np.isfinite(allowed) and finite:  # else within() judges the row (overflow allowed?)
            total = sum(as_fractions(values), Fraction(0))
            ctx.check(abs(total - want) <= Fraction(allowed),
                      f"{what} row {row}: backend {ctx.backend} sums to {num(total)}, "
                      f"spec to {num(want)} (allowed ± {num(Fraction(allowed))})")


def check_norm_statistics(backend: Backend, request: Request) -> None:
    """``y = N(h)`` (the program's output is a norm of some h): every row of the exact y
    has mean 0 (layer_norm; exact) and mean
    square ``σ²/(σ² + ε) ∈ (1 - ε/(σ²+ε) - 2**-190, 1]``; the backend's row mean lies within
    the row's mean budget of 0 and its mean square within ``mean(2|y| b + b²)`` of the
    exact one. Then every element within budget."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    node = {n.name: n for n in request.program.nodes}[request.program.output]
    assert node.op in ("layer_norm", "rms_norm") and node.eps is not None, node
    exact = evaluate(request)
    assert exact.output is not None and exact.trace is not None
    result = run_ok(backend, request)
    budget = error_budget(request, exact=exact)
    bounds = _rows(budget.output).astype(np.float64)
    normed = exact.trace.values[node.args[0]]  # the exact rows the output normalizes
    for row, (raw, spec, x) in enumerate(zip(_rows(result.output), _rows(exact.output),
                                             _rows(normed), strict=True)):
        if not len(spec):
            continue  # an empty row: nothing normalized
        square = _spec_row_square(node.op, node.eps, row, spec, x)
        if np.all(np.isfinite(bounds[row])) and np.all(np.isfinite(raw.astype(float))):
            _check_row_statistics(ctx, node.op, row, as_fractions(raw), spec, square,
                                  [Fraction(v) for v in bounds[row]])
    ctx.within("output", result.output, exact.output, budget.output)


def _spec_row_square(op: str, eps: Fraction, row: int, spec: np.ndarray, x: np.ndarray
                     ) -> Fraction:
    """The exact row's mean square, after asserting what the spec promises of the row
    (resverify's own side: mean 0 for layer_norm, mean square within ``2**-190`` of
    ``(1 - ε/(σ²+ε), 1]``)."""
    n = len(spec)
    mean, square = sum(spec) / n, sum(v * v for v in spec) / n
    centred = x - sum(x) / n if op == "layer_norm" else x
    variance = sum(v * v for v in centred) / n
    assert op == "rms_norm" or mean == 0, f"spec: row {row} mean {mean}"
    tiny = Fraction(1, 2**190)  # the enclosures' width
    assert 1 - eps / (variance + eps) - tiny < square <= 1 + tiny, (
        f"spec: row {row} mean square {float(square)}")
    return Fraction(square)


def _check_row_statistics(ctx: Context, op: str, row: int, got: np.ndarray, spec: np.ndarray,
                          square: Fraction, b: list[Fraction]) -> None:
    """The backend's row (exact Fractions) has the spec's statistics within the row's
    budget ``b``: mean 0 (layer_norm) within ``mean(b)``, the mean square within
    ``mean(2|y| b + b²)`` of the exact one."""
    __tracebackhide__ = True
    n = len(spec)
    if op == "layer_norm":
        ctx.check(abs(sum(got) / n) <= sum(b) / n,
                  f"output row {row}: backend {ctx.backend} has mean {num(sum(got) / n)}, "
                  f"spec 0 (allowed {num(sum(b) / n)})")
    slack = sum(2 * abs(y) * e + e * e for y, e in zip(spec, b, strict=True)) / n
    got_square = sum(v * v for v in got) / n
    ctx.check(abs(got_square - square) <= slack,
              f"output row {row}: backend {ctx.backend} has mean square {num(got_square)}, "
              f"spec {num(square)} (1 up to ε; allowed ± {num(slack)})")


def _agree(backend: Backend, what: str, first: Request, second: Request) -> None:
    """Two requests whose exact outputs agree (exactly, or within the enclosures' slack):
    the backend's output for each lies within its own budget of the first one's exact
    output (widened by that slack), so both runs land on the same value."""
    __tracebackhide__ = True
    one, two = evaluate(first), evaluate(second)
    assert one.output is not None and two.output is not None
    slack = one.slack + two.slack
    far = max((abs(a - b) for a, b in zip(one.output.flat, two.output.flat, strict=True)),
              default=Fraction(0))
    assert far <= slack, f"spec: {what} changes the output by {float(far)}"
    for request, exact in ((first, one), (second, two)):
        value = run_ok(backend, request)
        Context(backend.name, request).within(
            f"output ({what})", value.output, one.output,
            error_budget(request, exact=exact).output + up(slack))


def _representable(value: Fraction, dtype: str) -> bool:
    """``value`` is a finite value of ``dtype`` exactly (decided on rationals, no float
    arithmetic that could itself round, overflow or warn)."""
    rounded = round_to_dtype(value, dtype)
    return math.isfinite(rounded) and Fraction(rounded) == value


def _exactly(request: Request, move: Callable[[Fraction], Fraction]) -> np.ndarray | None:
    """The input x with ``move`` applied to every element exactly, when every result is a
    value of the request's dtype; None when one is not (the law's precondition fails).

    Decided on the rationals: computing ``x * k`` in float64 first would round a halved
    subnormal (or overflow) before any check could see it."""
    x = np.asarray(request.inputs["x"], dtype=np.float64)
    moved = [move(Fraction(float(v))) for v in x.flat]
    if not all(_representable(v, request.dtype) for v in moved):
        return None
    values = np.array([float(v) for v in moved], dtype=np.float64).reshape(x.shape)
    return values.astype(np.asarray(request.inputs["x"]).dtype)


def check_shift_invariance(backend: Backend, request: Request, shift: Fraction) -> None:
    """``layer_norm(x + t) = layer_norm(x)`` exactly in the spec; the backend's outputs for
    both lie within their budgets of that one value (x + t exact in the dtype)."""
    __tracebackhide__ = True
    moved = _exactly(request, lambda v: v + shift)
    if moved is None:
        reject()  # x + t is not exact in the dtype: not the same row shifted
    _agree(backend, f"x shifted by {shift}", request, with_input(request, moved))


def check_scale_moves_into_eps(backend: Backend, request: Request, power: int) -> None:
    """``N_ε(k x) = N_{ε/k²}(x)`` for ``k = 2**power`` (exact in the spec up to the
    enclosures; k x is exact in the dtype): the backend's outputs for both lie within
    their budgets of that one value."""
    __tracebackhide__ = True
    node = norm_node(request)
    assert node.eps is not None
    k = Fraction(2) ** power
    moved = _exactly(request, lambda v: v * k)
    if moved is None:
        reject()  # k x overflows or loses subnormal bits in the dtype: not the same input
    eps = node.eps / (k * k)
    if not _representable(eps, request.dtype):
        reject()  # ε/k² is not a value of the dtype (it underflows): a backend must round it
    _agree(backend, f"x scaled by {k}, ε divided by {k * k}", with_input(request, moved),
           with_input(request, request.inputs["x"], eps))


def check_gradient_orthogonal_to_constants(backend: Backend, request: Request) -> None:
    """layer_norm's x̄: every row sums to 0 (exact in the spec, within the row's budget on
    the backend), and its component along y is exactly ``r (ȳ·y)(1 - mean y²)`` in the
    spec (0 as ε -> 0); every element within budget."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    eps = norm_node(request).eps
    assert eps is not None
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    for row, (grad, y, g, x) in enumerate(zip(
            _rows(exact.grads["x"]), _rows(exact.output), _rows(as_fractions(request.cotangent)),
            _rows(as_fractions(request.inputs["x"])), strict=True)):
        n = len(y)
        centred = x - sum(x) / n
        r = exact_rsqrt(sum(v * v for v in centred) / n + eps)[0]
        along = sum(a * b for a, b in zip(grad, y, strict=True))
        pairing = sum(a * b for a, b in zip(g, y, strict=True))
        assert along == r * pairing * (1 - sum(v * v for v in y) / n), (
            f"spec: row {row}: x̄·y = {float(along)}, not r (ȳ·y)(1 - mean y²)")
    result = run_ok(backend, request)
    budget = error_budget(request, exact=exact)
    _sums_to_zero(ctx, result.grads["x"], exact.grads["x"], budget.grads["x"])
    ctx.within("grads['x']", result.grads["x"], exact.grads["x"], budget.grads["x"])


def check_width_change_refused(backend: Backend, request: Request) -> None:
    """``residual_add(x, F(x))`` where F changes the width is a shape_mismatch naming
    both shapes, although ``x + F(x)`` broadcasts (the same program with ``add`` runs and
    matches the spec)."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    merge = request.program.nodes[-1]
    shapes = infer_shapes(Program(request.program.inputs, request.program.nodes[:-1],
                                  merge.args[1]))
    pair = (shapes[merge.args[0]], shapes[merge.args[1]])
    result = guarded_run(backend, request)
    if not (isinstance(result, ResultError) and result.kind == "shape_mismatch"):
        said = result.kind if isinstance(result, ResultError) else "a value"
        ctx.fail(f"backend {ctx.backend} gives {said} for residual_add of {list(pair[0])} and "
                 f"{list(pair[1])} (a width change), spec gives shape_mismatch")
    ctx.check(result.shapes == pair, f"backend {ctx.backend} names shapes {result.shapes}, "
                                     f"spec names {pair}")
    plain = Program(request.program.inputs,
                    (*request.program.nodes[:-1], Node(merge.name, "add", merge.args)),
                    request.program.output)
    out = evaluate_exact(plain, request.inputs, None).output
    assert out is not None
    cot = (1 + np.arange(out.size, dtype=np.float64) % 16).reshape(out.shape)
    check_matches_spec(backend, Request(plain, request.inputs, request.dtype, cot))


def check_projection_gradient_splits(backend: Backend, request: Request) -> None:
    """``y = linear(x, P) + α·F(x)``: in the spec x̄ is exactly ``ȳPᵀ`` (the shortcut alone)
    plus ``J_Fᵀȳ`` (the branch alone, up to its slack); the backend's x̄ and P̄ lie within
    budget of the spec."""
    __tracebackhide__ = True
    ctx = Context(backend.name, request)
    whole = evaluate(request)
    assert whole.grads is not None
    program, nodes = request.program, {n.name: n for n in request.program.nodes}
    shortcut, branch = nodes[program.output].args
    parts = []
    for out in (shortcut, branch):
        part = Program(program.inputs, tuple(n for n in program.nodes
                                             if n.name != program.output), out)
        parts.append(evaluate_exact(part, request.inputs, request.cotangent))
    assert parts[0].grads is not None and parts[1].grads is not None
    summed = parts[0].grads["x"] + parts[1].grads["x"]
    far = max((abs(a - b) for a, b in zip(whole.grads["x"].flat, summed.flat, strict=True)),
              default=Fraction(0))
    ctx.check(far <= whole.slack + parts[1].slack,
              f"spec: x̄ differs from ȳPᵀ + J_Fᵀȳ by {num(far)}")
    result = run_ok(backend, request)
    budget = error_budget(request, exact=whole)
    ctx.within("grads['x'] (ȳPᵀ + J_Fᵀȳ)", result.grads["x"], summed, budget.grads["x"]
               + up(whole.slack + parts[1].slack))
    ctx.within("grads['p'] (xᵀȳ)", result.grads["p"], whole.grads["p"], budget.grads["p"])


def check_post_norm_stream_stays_normalized(backend: Backend, request: Request) -> None:
    """A post-norm stack ``h = N(h + α·F(h))``: after every block the stream is normalized
    again, its rows' mean square ``σ²/(σ² + ε)`` (1 up to ε, exact in the spec) at every
    depth, where a pre-norm stream's grows with each block; checked on the backend's output
    of each block (the program cut there, cotangent ones) as the norm statistics are."""
    __tracebackhide__ = True
    program = request.program
    for norm in (n for n in program.order if n.op in ("layer_norm", "rms_norm")):
        cut = Program(program.inputs, program.nodes, norm.name)
        shape = infer_shapes(cut)[norm.name]
        check_norm_statistics(backend, Request(cut, request.inputs, request.dtype,
                                               np.ones(shape)))


def norm_blocks(shape: tuple[int, ...], op: str, placement: str, alphas: Sequence[Fraction],
                eps: Fraction) -> Program:
    """One pre-norm block ``h + α_l·linear(N(h), w_l)`` or post-norm block
    ``N(h + α_l·linear(h, w_l))`` per α, over x of ``shape``, each with its own square
    weight ``w{l}``; block l names its norm ``n{l}``, its update ``s{l}``, its merge ``h{l}``."""
    width = shape[-1]
    inputs, nodes, h = [Input("x", shape)], [], "x"
    for layer, alpha in enumerate(alphas):
        inputs.append(Input(f"w{layer}", (width, width)))
        into = h
        if placement == "pre":
            nodes.append(Node(f"n{layer}", op, (h,), eps=eps))
            into = f"n{layer}"
        nodes += [Node(f"f{layer}", "linear", (into, f"w{layer}")),
                  Node(f"s{layer}", "scale", (f"f{layer}",), alpha),
                  Node(f"h{layer}", "residual_add", (h, f"s{layer}"))]
        h = f"h{layer}"
        if placement == "post":
            nodes.append(Node(f"n{layer}", op, (h,), eps=eps))
            h = f"n{layer}"
    return Program(tuple(inputs), tuple(nodes), h)


def norm_depth_case(placement: str, op: str, x: np.ndarray, weights: Sequence[np.ndarray],
                    alphas: Sequence[Fraction], eps: Fraction, cotangent: np.ndarray) -> Case:
    """:func:`norm_blocks` with one block per α, on these values."""
    x = np.asarray(x, dtype=np.float64)
    values = {"x": x, **{f"w{i}": np.asarray(w, dtype=np.float64)
                         for i, w in enumerate(weights[:len(alphas)])}}
    return Case(norm_blocks(x.shape, op, placement, alphas, eps), values,
                np.asarray(cotangent, dtype=np.float64))


def _depth_run(backend: Backend, request: Request
               ) -> tuple[Context, dict[str, np.ndarray], Budget, Value]:
    """The spec's gradients, their budget and the backend's answer at this depth."""
    __tracebackhide__ = True
    exact = evaluate(request)
    assert exact.grads is not None
    return (Context(backend.name, request), exact.grads, error_budget(request, exact=exact),
            run_ok(backend, request))


def _gradients_follow_spec(ctx: Context, result: Value, spec: dict[str, np.ndarray],
                           budget: Budget) -> None:
    """The backend's gradients within budget of the spec's (checked after the law, so a
    failure names the law first)."""
    __tracebackhide__ = True
    for name, value in spec.items():
        ctx.within(f"grads[{name!r}]", result.grads[name], value, budget.grads[name])


def check_pre_norm_gradient_highway(backend: Backend, requests: Sequence[Request]) -> None:
    """Pre-norm layer_norm stacks of depth 1, 2, ...: at every depth x̄ follows the spec
    within budget and each row of x̄ sums to exactly the row sum of ȳ (the identity path
    carries it; every branch's term passes through layer_norm's Jacobian and sums to 0)."""
    __tracebackhide__ = True
    for request in requests:
        ctx, spec, budget, result = _depth_run(backend, request)
        sums = [sum(r, Fraction(0)) for r in _rows(as_fractions(request.cotangent))]
        _row_sums(ctx, result.grads["x"], spec["x"], budget.grads["x"], sums,
                  f"grads['x'] at depth {len(request.program.inputs) - 1} (highway: Σȳ)")
        _gradients_follow_spec(ctx, result, {"x": spec["x"]}, budget)


def check_post_norm_gradient_passes_through_norms(backend: Backend,
                                                  requests: Sequence[Request]) -> None:
    """Post-norm layer_norm stacks of depth 1, 2, ...: at every depth x̄ and every weight's
    gradient follow the spec within budget, and every block's ``W̄_l`` has rows summing to
    exactly 0 (the gradient at each block's merge came through its norm's Jacobian)."""
    __tracebackhide__ = True
    for request in requests:
        ctx, spec, budget, result = _depth_run(backend, request)
        weights = [name for name in request.program.input_names if name != "x"]
        for name in weights:
            _sums_to_zero(ctx, result.grads[name], spec[name], budget.grads[name],
                          f"grads[{name!r}] at depth {len(weights)} (through N's Jacobian)")
        _gradients_follow_spec(ctx, result, spec, budget)
