"""The exact interpreter: the value and the gradients that every backend is compared against.

It walks the program and applies each op's exact rules from its entry in
:mod:`resverify.spec.ops` (``exact`` forward, ``exact_vjp`` reverse, and ``exact_jvp``
alongside the forward when the request carries input tangents: forward mode). Every op except
``tanh`` maps rationals to rationals, so values are exact :class:`fractions.Fraction`
object arrays (arithmetic in :mod:`resverify.spec.rational`); ``tanh`` is enclosed with
mpmath, and the midpoint of the enclosure is the Fraction carried on.

Approximation errors are tracked soundly but coarsely, as one absolute bound per array,
through every later op (forward, reverse and tangent) by each entry's ``error``,
``error_vjp`` and ``error_jvp`` rules. The largest of these bounds over the output, every
gradient and the output tangent is the result's ``slack``; it is exactly 0 for programs
without ``tanh`` or a norm.

The VJP rules are written by hand beside each forward rule in :mod:`resverify.spec.ops`;
:mod:`resverify.spec.derive` derives the same rules with SymPy and ``tests/spec/test_derive.py``
proves they agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from resverify.spec.errors import InvalidRequest, ShapeMismatch
from resverify.spec.ir import Node, Program, infer_shapes
from resverify.spec.ops import OP_TABLE, Site
from resverify.spec.rational import (
    TANH_PRECISION_BITS,
    ZERO,
    Arr,
    as_fractions,
    normalize,
    obj,
    objects,
)
from resverify.spec.request import Request, ResultError

__all__ = ["TANH_PRECISION_BITS", "ExactResult", "as_fractions", "evaluate", "evaluate_exact"]


# ----------------------------------------------------------------------------------------
# the interpreter


@dataclass(frozen=True)
class ExactResult:
    """The exact output, gradients and output tangent (object arrays of Fractions), or a
    typed error.

    ``slack`` bounds, for every element at once, the distance between a Fraction here and
    the true real value; it is 0 unless the program uses ``tanh`` or a norm. ``grads`` is
    None when no cotangent was given (forward only) or on error; ``tangent`` (``J t``) is
    None unless input tangents were given, and on error. ``trace`` keeps every
    intermediate value (``resverify.spec.budget`` reuses it when passed ``exact=``).
    """

    output: Arr | None
    grads: dict[str, Arr] | None
    slack: Fraction
    error: ResultError | None = None
    trace: Trace | None = field(default=None, repr=False, compare=False)
    tangent: Arr | None = None


@dataclass(frozen=True)
class Trace:
    """The forward pass kept for later analysis (``resverify.spec.budget`` reads relu signs
    from it).

    ``values`` holds every input and node value (object arrays, elements may be ints where
    NumPy summed nothing), ``slack`` each one's absolute error bound; in forward mode
    ``tangents`` holds every input's and node's tangent and ``tangent_slack`` their bounds
    (both None otherwise).
    """

    values: Mapping[str, Arr]
    slack: Mapping[str, Fraction]
    tangents: Mapping[str, Arr] | None = None
    tangent_slack: Mapping[str, Fraction] | None = None


def evaluate(request: Request) -> ExactResult:
    """Interpret ``request`` exactly: its float inputs, cotangent and tangents (forward mode)
    are read as rationals."""
    return evaluate_exact(request.program, request.inputs, request.cotangent, request.tangents)


def evaluate_exact(program: Program, inputs: Mapping[str, object], cotangent: object | None,
                   tangents: Mapping[str, object] | None = None) -> ExactResult:
    """Like :func:`evaluate`, but inputs, cotangent and tangents may hold any Fractions or ints.

    With ``cotangent=None`` the gradients are not computed (``grads`` is None); with
    ``tangents`` (one per input, of its shape) the output tangent ``J t`` is (``tangent``).
    """
    try:
        shapes = infer_shapes(program)
    except ShapeMismatch as exc:
        return ExactResult(None, None, ZERO, ResultError.mismatch(exc))
    values = _read_inputs(program, inputs)
    slack = dict.fromkeys(values, ZERO)
    tans = None if tangents is None else _read_inputs(program, tangents, "tangent")
    tan_slack = dict.fromkeys(values, ZERO)
    for node in program.order:
        op, args = OP_TABLE[node.op], [values[a] for a in node.args]
        out = values[node.name] = op.exact(args, node.attribute)
        slack[node.name] = op.error(args, [slack[a] for a in node.args], out, node.attribute)
        if tans is not None:
            tans[node.name], tan_slack[node.name] = _tangent(node, values, slack, tans,
                                                             tan_slack)
    output = normalize(values[program.output])
    trace = Trace(values, slack, tans, None if tans is None else tan_slack)
    tangent = None if tans is None else normalize(tans[program.output])
    own = [slack[program.output], tan_slack.get(program.output, ZERO)]
    if cotangent is None:
        return ExactResult(output, None, max(own), trace=trace, tangent=tangent)
    cot = as_fractions(cotangent)
    if cot.shape != shapes[program.output]:
        raise InvalidRequest(f"cotangent has shape {list(cot.shape)}, "
                             f"output has {list(shapes[program.output])}")
    grads, grad_slack = _backward(program, values, slack, cot)
    total = max([*own, *(grad_slack[n] for n in program.input_names)])
    return ExactResult(output, {n: normalize(grads[n]) for n in program.input_names}, total,
                       trace=trace, tangent=tangent)


def _tangent(node: Node, values: Mapping[str, Arr], slack: Mapping[str, Fraction],
             tans: Mapping[str, Arr], tan_slack: Mapping[str, Fraction]
             ) -> tuple[Arr, Fraction]:
    """One node's tangent from its arguments' (forward mode), and its error bound."""
    op = OP_TABLE[node.op]
    at = Site(node.attribute, [values[a] for a in node.args], [slack[a] for a in node.args],
              values[node.name], slack[node.name])
    ts, errs = [tans[a] for a in node.args], [tan_slack[a] for a in node.args]
    tangent = op.exact_jvp(ts, at.args, at.out, node.attribute)
    return tangent, ZERO if _exact_rule(op.rational, errs, at) else op.error_jvp(at, ts, errs)


def _exact_rule(rational: bool, errs: Sequence[Fraction], at: Site) -> bool:
    """Whether a derivative rule's result is exact: a rational op on exact values. A
    non-rational op's derivative reads its enclosed factor (tanh's value, a norm's 1/sqrt)
    even where its output is exact (a norm of a constant row is 0, its gradient is not)."""
    return rational and not (any(errs) or any(at.errs))


def _read_inputs(program: Program, inputs: Mapping[str, object],
                 what: str = "input") -> dict[str, Arr]:
    declared = {i.name: i.shape for i in program.inputs}
    if set(inputs) != set(declared):
        raise InvalidRequest(f"{what}s {sorted(inputs)} do not match program inputs "
                             f"{sorted(declared)}")
    values = {}
    for name, shape in declared.items():
        values[name] = as_fractions(inputs[name])
        if values[name].shape != shape:
            raise InvalidRequest(f"{what} {name!r} has shape {list(values[name].shape)}, "
                                 f"declared {list(shape)}")
    return values


def _backward(program: Program, values: dict[str, Arr], slack: dict[str, Fraction],
              cot: Arr) -> tuple[dict[str, Arr], dict[str, Fraction]]:
    grads: dict[str, Arr] = {program.output: cot}
    errs: dict[str, Fraction] = {program.output: ZERO}
    for node in reversed(program.order):
        if node.name not in grads:
            continue
        g, eg = grads.pop(node.name), errs.pop(node.name)
        op = OP_TABLE[node.op]
        at = Site(node.attribute, [values[a] for a in node.args], [slack[a] for a in node.args],
                  values[node.name], slack[node.name])
        parts = op.exact_vjp(g, at.args, at.out, node.attribute)
        exact_parts = _exact_rule(op.rational, [eg], at)
        part_errs = (ZERO,) * len(at.args) if exact_parts else op.error_vjp(at, g, eg)
        for arg, part, err in zip(node.args, parts, part_errs, strict=True):
            grads[arg] = part if arg not in grads else obj(grads[arg] + part)
            errs[arg] = errs.get(arg, ZERO) + err
    for name in program.input_names:
        if name not in grads:
            grads[name] = objects([ZERO] * values[name].size, values[name].shape)
            errs[name] = ZERO
    return grads, errs
