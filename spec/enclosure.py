"""A fast, sound oracle: float64 enclosures of the exact values, exact rationals only where needed.

Why: the exact interpreter (:mod:`resverify.spec.exact`) computes every value as a
Fraction, which costs seconds for one residual block of width 256, thousands of times what
the backend it checks spends. A verdict does not need the exact value itself, only on
which side of ``actual ± bound`` it lies. Here every value of the program and of its
reverse pass is enclosed in a *ball* (a double-double ``mid + lo`` and a radius,
``|exact - (mid + lo)| <= rad``; :mod:`resverify.spec.ball`), computed with NumPy on whole
arrays by each op's own rules (``enclose`` and ``enclose_vjp`` on its entry in
:mod:`resverify.spec.ops`): for instance tanh is 1-Lipschitz, so the input's radius carries
through, the platform's tanh trusted to
:data:`~resverify.spec.ops.tanh.LIBM_TANH_ULPS` ulps and the spec's own value (an mpmath
enclosure's midpoint, ``2**-200`` relative) one ulp more; layer_norm and rms_norm are
centred on the spec's own rule run on the exact midpoints and widened by a proven bound
of the norm's Jacobian over the argument's ball. This module runs the rules over a
program; it knows no op by name.

The ball contains both the spec's value (the Fraction :mod:`resverify.spec.exact` returns)
and the true real value. :func:`verify` decides ``|actual - exact| <= bound`` from the
ball for every element it can (almost all: a ball is an ulp or two wide, a budget many
ulps), and only if some element is too close to call does it run the exact interpreter
and decide those elements with :func:`resverify.spec.compare.within`. So the verdict on
every element is the exact verdict for the bound used.

The bound is the error budget of :mod:`resverify.spec.budget`, computed from a trace of
the balls (midpoints, with radii as the trace's slack) instead of the exact trace. Its
rules are built to take approximate traces (the exact interpreter's tanh is one), so it is
sound, and it is at least the exact trace's budget (the radius only widens relu's "sign
uncertain" set and tanh's slope bound); ``tests/spec/test_enclosure.py`` checks both
containment and this, and that the verdicts equal the exact path's.

Ops without an enclosure rule (:attr:`~resverify.spec.ops.base.Op.encloses`), non-finite
inputs, shape errors and products that could overflow or underflow in the two-product
send the whole request to the exact path.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from resverify.spec.ball import INF, Ball, NotEnclosed, add, add_up, fractions_of, two_sum
from resverify.spec.budget import Budget, Miss, error_budget
from resverify.spec.compare import within
from resverify.spec.errors import ShapeMismatch
from resverify.spec.exact import ExactResult, Trace, evaluate
from resverify.spec.ir import Node, Program, infer_shapes
from resverify.spec.ops import OP_TABLE, Site
from resverify.spec.request import Request
from resverify.spec.rounding import up

__all__ = ["Ball", "NotEnclosed", "enclose", "fast_budget"]

def _attr(node: Node) -> Any:
    """The node's constant (``alpha`` of scale), whatever the IR calls the field."""
    return getattr(node, "attribute", getattr(node, "alpha", None))


# ----------------------------------------------------------------------------------------
# the program


@dataclass(frozen=True)
class Enclosed:
    """Balls for every forward value (inputs and nodes) and every input's gradient."""

    values: dict[str, Ball]
    grads: dict[str, Ball]
    output: Ball
    cotangents: dict[str, Ball]
    """The cotangent each node's reverse rule received (every part summed)."""


def enclose(request: Request, reverse: bool = True) -> Enclosed:
    """Balls around every value and gradient of ``request`` (raises :class:`NotEnclosed`).

    ``reverse=False`` encloses the forward values only (``grads`` and ``cotangents`` are
    empty); :func:`fast_budget` then bounds only the output (the gradients' bounds are
    infinite: the reverse pass's share of the spec's slack is not known)."""
    program, cot = request.program, request.cotangent
    if cot is None or not all(OP_TABLE[node.op].encloses for node in program.nodes):
        raise NotEnclosed("an op without an enclosure rule, or no cotangent")
    try:
        infer_shapes(program)
    except ShapeMismatch:
        raise NotEnclosed("shape mismatch") from None
    arrays = [*request.inputs.values(), cot]
    if not all(np.isfinite(np.asarray(a, dtype=np.float64)).all() for a in arrays):
        raise NotEnclosed("non-finite input")
    values = {name: Ball.exact(v) for name, v in request.inputs.items()}
    for node in program.order:
        op = OP_TABLE[node.op]
        values[node.name] = op.enclose([values[a] for a in node.args], _attr(node))
    cotangents: dict[str, Ball] = {}
    grads = _reverse(program, values, Ball.exact(cot), cotangents) if reverse else {}
    balls = [*values.values(), *grads.values()]
    if not all(np.isfinite(b.rad).all() and np.isfinite(b.mid).all() for b in balls):
        raise NotEnclosed("a value beyond the two-product's safe range")
    return Enclosed(values, grads, values[program.output], cotangents)


def _reverse(program: Program, values: dict[str, Ball], cot: Ball,
             seen: dict[str, Ball]) -> dict[str, Ball]:
    grads: dict[str, Ball] = {program.output: cot}
    for node in reversed(program.order):
        if node.name not in grads:
            continue
        g = seen[node.name] = grads.pop(node.name)
        args = [values[a] for a in node.args]
        parts = OP_TABLE[node.op].enclose_vjp(g, args, values[node.name], _attr(node))
        for arg, part in zip(node.args, parts, strict=True):
            grads[arg] = part if arg not in grads else add(grads[arg], part)
    for name in program.input_names:
        if name not in grads:
            grads[name] = Ball.exact(np.zeros(values[name].mid.shape))
    return {name: grads[name] for name in program.input_names}


# ----------------------------------------------------------------------------------------
# the budget from the balls, and the verdict


def _trace(program: Program, enclosed: Enclosed) -> Trace:
    """A trace the budget rules can read: midpoints, each node's largest radius as its
    slack; the outputs of an op that asks for it (``exact_output_in_trace``: tanh, whose
    slope rule computes with them) as exact Fractions (but as the float64 midpoints where the
    op reads its output only as a size, ``output_read_as_size``, and no op whose budget reads
    its arguments reads it: the same bits, without a Fraction per element), and the
    arguments of an op that asks
    (``exact_args_in_trace``: the norms, which centre and square the row, in float64
    rounding below the exact trace's sizes where the row's mean is large) as the exact
    ``mid + lo``."""
    values: dict[str, Any] = {}
    slack: dict[str, Fraction] = {}
    read = {a for n in program.nodes if OP_TABLE[n.op].budget_reads_args for a in n.args}
    tanh_out = {n.name for n in program.nodes if OP_TABLE[n.op].exact_output_in_trace
                and not (OP_TABLE[n.op].output_read_as_size and n.name not in read)}
    normed = {a for n in program.nodes if OP_TABLE[n.op].exact_args_in_trace for a in n.args}
    for name, ball in enclosed.values.items():
        mid = ball.mid
        values[name] = _fractions(mid) if name in tanh_out else mid
        if name in normed:
            values[name] = fractions_of(ball)
        radius = float(add_up(np.abs(ball.lo), ball.rad).max()) if ball.rad.size else 0.0
        slack[name] = Fraction(radius) if math.isfinite(radius) else Fraction(2**1100)
    return Trace(values, slack)


def _fractions(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.shape, dtype=object)
    out.reshape(-1)[:] = [Fraction(v) for v in values.reshape(-1).tolist()]
    return out


def _spec_slack(program: Program, enclosed: Enclosed) -> Fraction:
    """An upper bound of the exact interpreter's own slack (0 without tanh).

    The interpreter's error rules (each op's ``error`` and ``error_vjp``) are monotone in
    the magnitudes they read, so they are run here exactly as :mod:`resverify.spec.exact`
    runs them, on the balls' magnitude bounds ``|mid| + rad`` (float arrays) instead of the
    values; their float roundings are covered by doubling the result. Two exceptions, each
    declared by its op: relu's VJP asks whether some input is within its error of 0, so it
    reads lower bounds of the magnitudes (``slack_reads_lower``; :func:`_least`); the norms
    read their centred rows and ``1/sqrt`` enclosures, bounded by their
    :meth:`~resverify.spec.ops.base.Op.slack_rules`.
    """
    if all(OP_TABLE[node.op].rational for node in program.nodes):
        return Fraction(0)
    size = {n: _stand_in(b.size) for n, b in enclosed.values.items()}
    slack: dict[str, Any] = dict.fromkeys(program.input_names, Fraction(0))
    for node in program.order:
        args = [size[a] for a in node.args]
        slack[node.name] = OP_TABLE[node.op].slack_rules().error(
            args, [slack[a] for a in node.args], size[node.name], _attr(node))
    errs = _gradient_slack(program, enclosed, size, slack) if enclosed.grads else {}
    worst = max([slack[program.output], *(errs.get(n, 0) for n in program.input_names)])
    return Fraction(up(2 * Fraction(worst)))


def _gradient_slack(program: Program, enclosed: Enclosed, size: Mapping[str, np.ndarray],
                    slack: Mapping[str, Any]) -> dict[str, Any]:
    """The reverse half of :func:`_spec_slack`: each op's ``error_vjp`` run from the output
    back, on the magnitude bounds ``size`` and the forward ``slack``; the inputs' entries
    are their gradients' slack."""
    errs: dict[str, Any] = {program.output: Fraction(0)}
    for node in reversed(program.order):
        if node.name not in errs:
            continue
        ball, eg = enclosed.cotangents[node.name], errs.pop(node.name)
        g = _stand_in(ball.size)
        rules = OP_TABLE[node.op].slack_rules()
        args = ([_least(enclosed.values[a]) for a in node.args] if rules.slack_reads_lower
                else [size[a] for a in node.args])
        at = Site(_attr(node), args, [slack[a] for a in node.args], size[node.name],
                  slack[node.name])
        zero = rules.rational and not (eg or any(at.errs) or at.err)  # as the interpreter
        parts = [Fraction(0)] * len(node.args) if zero else rules.error_vjp(at, g, eg)
        for arg, part in zip(node.args, parts, strict=True):
            errs[arg] = errs.get(arg, Fraction(0)) + part
    return errs


def _least(ball: Ball) -> np.ndarray:
    """Lower bounds of ``|exact|`` per element (relu's "sign unknown" test reads them)."""
    with np.errstate(invalid="ignore", over="ignore"):
        low = np.nextafter(np.abs(ball.mid) - add_up(np.abs(ball.lo), ball.rad), -INF)
    return np.maximum(np.where(np.isnan(low), 0.0, low), 0.0)


def _stand_in(size: np.ndarray) -> np.ndarray:
    """An array of ``size``'s shape holding its largest element everywhere (a broadcast
    view): the error rules read only shapes and the largest magnitude."""
    top = float(size.max()) if size.size else 0.0
    return np.broadcast_to(np.float64(top), size.shape)


def fast_budget(request: Request, enclosed: Enclosed, with_spec_slack: bool = True) -> Budget:
    """The error budget computed from the balls' trace instead of the exact one.

    ``with_spec_slack=False`` leaves out the exact interpreter's own slack (non-zero only
    with tanh, about ``2**-190`` relative), which every bound would carry: the bounds are
    then no larger, so an element inside them is inside the full ones too.
    """
    slack = _spec_slack(request.program, enclosed) if with_spec_slack else Fraction(0)
    stand_in = ExactResult(None, None, slack, None, _trace(request.program, enclosed))
    budget = error_budget(request, exact=stand_in)
    if enclosed.grads or not request.program.input_names:
        return budget
    unknown = {n: np.full(np.shape(g), INF) for n, g in budget.grads.items()}
    return dataclasses.replace(budget, grads=unknown)


def decide(actual: np.ndarray, ball: Ball, bound: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(inside, unsure)`` per element: ``inside`` is the verdict of
    :func:`resverify.spec.compare.within` wherever ``unsure`` is False."""
    a = np.asarray(actual, dtype=np.float64)
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), a.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        d, tail = two_sum(a, -ball.mid)  # a - mid == d + tail
        u, eu = two_sum(tail, -ball.lo)
        v, ev = two_sum(d, u)  # a - (mid + lo) == v + ev + eu, exactly
        slop = add_up(np.abs(ev), np.abs(eu), ball.rad)
        diff = np.abs(v)
        exact = slop == 0  # then |a - exact value| is diff itself
        far = np.where(exact, diff, add_up(diff, slop))  # >= |a - exact|
        near = np.where(exact, diff, np.nextafter(diff - slop, -INF))  # <= |a - exact|
    checked = np.isfinite(b) & np.isfinite(a)
    inside = (b == INF) | (checked & (far <= b))
    outside = ~(b == INF) & (~checked | (near > b))
    return inside, ~(inside | outside)


@dataclass(frozen=True)
class Verdict:
    """Every element outside its budget, and how the verdict was reached."""

    misses: list[Miss]
    budget: Budget
    decided_exactly: int
    """Elements the balls could not decide, decided with the exact interpreter."""
    exact_path: bool
    """True when the whole request went to the exact interpreter (:class:`NotEnclosed`)."""
    nearest: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """A float64 value near the exact one per element of ``output`` and each ``grad[name]``
    (the ball's ``mid + lo``, or the exact value rounded): for saying how much of its budget
    an element used, never for the verdict itself."""
    sizes: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    """Upper bounds of ``|exact value|`` of the forward values asked for by name
    (:func:`verify`'s ``sizes``): what a caller's own condition on them reads."""
    output_ball: Ball | None = None
    """The enclosure of the exact output (None on the exact path): another run's output is
    judged against the same budget with it (:func:`outside_output`)."""


def verify(request: Request, output: np.ndarray, grads: Mapping[str, np.ndarray],
           tangent: np.ndarray | None = None, sizes: Collection[str] = (),
           unjudged: Collection[str] = ()) -> Verdict:
    """Judge a backend's ``output`` and ``grads`` (and ``tangent``, for a forward-mode
    request) for ``request`` against its budget; ``sizes`` names forward values whose
    exact sizes the verdict reports (:attr:`Verdict.sizes`); ``unjudged`` names inputs
    whose gradients the caller does not judge (a lifted constant's, one the backend
    computes none of): none is asked of them, so their absence is no miss.

    The budget without the spec's slack is tried first (cheaper): when every judged element
    is inside it, every one is inside the full budget too. Forward-mode requests take the
    exact path (the balls carry no tangents).
    """
    try:
        if request.forward_mode:
            raise NotEnclosed("forward mode: tangents are not enclosed")
        enclosed = enclose(request)
    except NotEnclosed:
        exact = evaluate(request)
        budget = error_budget(request, exact=exact)
        assert exact.trace is not None
        held = {n: np.vectorize(lambda v: up(abs(Fraction(v))), otypes=[np.float64])(
            np.asarray(exact.trace.values[n], dtype=object)) for n in sizes}
        found = [m for m in budget.misses(exact, output, grads, tangent)
                 if not any(m.where.startswith(f"grad[{n}]") for n in unjudged)]
        return Verdict(found, budget, 0, True, _rounded(exact), held)
    budget = fast_budget(request, enclosed, with_spec_slack=False)
    misses, unsure = _judge(request, enclosed, budget, output, grads, unjudged)
    if (misses or unsure) and not all(OP_TABLE[n.op].rational for n in request.program.nodes):
        budget = fast_budget(request, enclosed)
        misses, unsure = _judge(request, enclosed, budget, output, grads, unjudged)
    count = sum(int(d.sum()) for *_, d in unsure)
    if unsure:
        misses += _decide_exactly(request, unsure)
    nearest = {"output": enclosed.output.mid + enclosed.output.lo}
    nearest |= {f"grad[{n}]": b.mid + b.lo for n, b in enclosed.grads.items()}
    return Verdict(misses, budget, count, False, nearest,
                   {n: enclosed.values[n].size for n in sizes}, enclosed.output)


def outside_output(request: Request, verdict: Verdict, output: np.ndarray,
                   grads: Mapping[str, np.ndarray]) -> int:
    """How many elements of another run's ``output`` of ``request`` lie outside the budget
    ``verdict`` judged with: decided by the verdict's own enclosure and budget where they
    decide every element (no second enclosure), else by :func:`verify` again (``grads``:
    the gradients that run judged, which the exact path needs)."""
    if verdict.output_ball is not None:
        inside, unsure = decide(output, verdict.output_ball, verdict.budget.output)
        if not unsure.any():
            return int((~inside).sum())
    return sum(m.where == "output" for m in verify(request, output, grads).misses)


def _rounded(exact: ExactResult) -> dict[str, np.ndarray]:
    """The exact output and gradients rounded to float64 (none for an error answer)."""
    if exact.output is None or exact.grads is None:
        return {}
    found = {"output": exact.output, **{f"grad[{n}]": g for n, g in exact.grads.items()}}
    return {k: np.vectorize(float, otypes=[np.float64])(np.asarray(v, dtype=object))
            for k, v in found.items()}


Unsure = list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]
"""Per array: where, the actual values, the bounds, and the mask of undecided elements."""


def _judge(request: Request, enclosed: Enclosed, budget: Budget, output: np.ndarray,
           grads: Mapping[str, np.ndarray], unjudged: Collection[str] = ()
           ) -> tuple[list[Miss], Unsure]:
    """The elements the balls decide are outside (their ``expected`` is the ball's
    midpoint, within its radius of the exact value), and those they cannot decide; the
    gradients of ``unjudged`` inputs are not asked for."""
    pending: list[tuple[str, np.ndarray | None, Ball, np.ndarray]] = [
        ("output", output, enclosed.output, budget.output)]
    pending += [(f"grad[{n}]", grads.get(n), enclosed.grads[n], budget.grads[n])
                for n in request.program.input_names if n not in unjudged]
    misses: list[Miss] = []
    unsure: Unsure = []
    for where, actual, ball, bound in pending:
        if actual is None or np.shape(actual) != ball.mid.shape:
            misses.append(Miss(f"{where}.shape", (), math.nan, Fraction(0), 0.0))
            continue
        inside, doubt = decide(actual, ball, bound)
        bounds = np.broadcast_to(bound, ball.mid.shape)
        misses += [Miss(where, index, float(actual[index]),
                        Fraction(float(ball.mid[index])), float(bounds[index]))
                   for index in _indices(~inside & ~doubt)]
        if doubt.any():
            unsure.append((where, np.asarray(actual), bounds, doubt))
    return misses, unsure


def _indices(mask: np.ndarray) -> list[tuple[int, ...]]:
    """Where ``mask`` is true, as index tuples (``()`` for a true 0-d mask)."""
    return [tuple(int(i) for i in row) for row in np.argwhere(mask)]


def _decide_exactly(request: Request, unsure: Unsure) -> list[Miss]:
    exact = evaluate(request)
    assert exact.output is not None and exact.grads is not None
    found = []
    for where, actual, bounds, doubt in unsure:
        want = exact.output if where == "output" else exact.grads[where[5:-1]]
        for idx in _indices(doubt):
            if not within(float(actual[idx]), want[idx], float(bounds[idx])):
                found.append(Miss(where, idx, float(actual[idx]), want[idx],
                                  float(bounds[idx])))
    return found
