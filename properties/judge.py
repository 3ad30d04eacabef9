"""One request, one backend, one judgement: the driver shared by known failures and the corpus.

A saved vector (``resverify check --known-failures``) and a corpus entry (``resverify vectors
run``) are both a request with what a correct backend must answer: exact values with a
per-element budget, or a typed error. :func:`judge` sends the request the way the property
suite does (:func:`resverify.properties.assertions.send`: the backend's own copy, faults
classified), twice, and states the verdict with the suite's own assertion helpers, so the
messages and failure kinds are the suite's, and "within budget" is
:func:`resverify.spec.compare.within` and nothing else:

* not claimed by the backend's capabilities: ``unclaimed``, with the reason (never sent);
* raised, timed out, crashed, answered a non-result: a failure of that kind;

and then each check asked for (:data:`CHECKS`; all of them by default, as ``resverify
replay`` does; a corpus entry names the checks of its property's law):

* ``deterministic``: a second run gives bitwise the same answer, else ``law``;
* ``untouched``: the backend left its copy of the inputs and cotangent as sent, else ``law``;
* ``error`` (when an error is expected): the same kind, else ``law``;
* ``shapes`` (when an error is expected): where the answer is that error, the shapes it
  names are the expected ones, in order, else ``law`` (another answer passes: ``error``
  judges it);
* ``state`` (with a ``probe``: a valid request): the probe gives bitwise the same answer
  twice before the request and once after it, else ``law`` -- the request (a refusal)
  changed nothing in the backend;
* ``form`` (when a value is expected): an error answer is ``refused``, the wrong keys,
  shapes or dtype ``bad_result``;
* ``output``, ``grads``, ``tangent`` (forward mode: the output tangent ``J·t``): every
  element within its budget, else ``law``.

A vector group (:class:`resverify.properties.relations.Group`: the requests a law relating
several answers sends, and the relation, as the property suite's own law builds it) is
judged by :func:`judge_group`: skipped unless the backend claims every request; each answer
must be a value of the declared form (``refused``/``bad_result`` otherwise, as the law's
own runs), and then every relation must hold (``law``), checked by the law's own
:func:`resverify.properties.relations.check`.

What comes back is a :class:`Judged`: what was found (not asked and why, or the first
failure's kind and message), never a status word. The status those facts give (``pass``,
``fail``, ``skipped``) is decided once, by :func:`resverify.reports.verdicts.vector_status`,
with the report's other verdicts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from resverify.impl.backend import Backend
from resverify.properties import relations
from resverify.properties.assertions import (
    Context,
    PropertyFailure,
    Sent,
    check_declared_form,
    differences,
    send,
)
from resverify.properties.relations import Group
from resverify.spec.budget import error_budget
from resverify.spec.exact import evaluate
from resverify.spec.request import Request, Result, ResultError, Value

__all__ = ["Judged"]

CHECKS = ("deterministic", "untouched", "error", "shapes", "state", "form", "output", "grads",
          "tangent")


@dataclass(frozen=True)
class Expected:
    """What a correct backend answers: ``output`` and ``grads`` (exact rationals) each with
    its budget (floats, broadcastable), or an ``error`` kind with the ``shapes`` it names."""

    output: np.ndarray | None = None
    grads: Mapping[str, np.ndarray] | None = None
    output_budget: np.ndarray | None = None
    grad_budgets: Mapping[str, np.ndarray] | None = None
    error: str | None = None
    shapes: tuple[tuple[int, ...], ...] | None = None
    tangent: np.ndarray | None = None
    tangent_budget: np.ndarray | None = None
    probe: Request | None = None
    """A valid request that must give the same bits before and after this one (the check
    ``state``; None: nothing to compare, the check passes)."""


@dataclass(frozen=True)
class Judged:
    """What judging found: ``unclaimed``, why the backend was not asked (None: it was); a
    failure's ``kind`` (one of :data:`resverify.properties.assertions.KINDS`; None: every
    check held) and its ``message``. ``Judged()`` is a backend that held."""

    unclaimed: str | None = None
    kind: str | None = None
    message: str = ""


def expected_from_spec(request: Request) -> Expected:
    """The exact specification's answer to ``request`` with its error budget."""
    exact = evaluate(request)
    if exact.error is not None:
        shapes = getattr(exact.error, "shapes", None)
        return Expected(error=exact.error.kind,
                        shapes=None if shapes is None else tuple(map(tuple, shapes)))
    budget = error_budget(request, exact=exact)
    tangent = getattr(exact, "tangent", None)
    return Expected(exact.output, exact.grads, budget.output, budget.grads,
                    tangent=tangent, tangent_budget=getattr(budget, "tangent", None))


def judge(backend: Backend, request: Request, expected: Expected,
          checks: Collection[str] = CHECKS) -> Judged:
    """What ``backend`` gives for ``request`` against ``expected`` (module docstring)."""
    unclaimed = backend.capabilities.covers(request)
    if unclaimed is not None:
        return Judged(unclaimed=f"backend {backend.name}: {unclaimed}")
    try:
        _check(backend, request, expected, frozenset(checks))
    except PropertyFailure as failure:
        return Judged(kind=failure.kind, message=str(failure))
    return Judged()


def _check(backend: Backend, request: Request, expected: Expected,
           checks: frozenset[str]) -> None:
    ctx = Context(backend.name, request)
    if "state" in checks and expected.probe is not None:
        sent = _sent_between_probes(backend, ctx, request, expected.probe)
    else:
        sent = send(backend, request)
    if "deterministic" in checks:
        again = differences(sent.result, send(backend, request).result, 1)
        ctx.check(not again, f"backend {backend.name} gives two different results for one "
                  f"request: {next(iter(again), '')} (spec: bitwise identical)")
    changed = sent.mutation() if "untouched" in checks else None
    ctx.check(changed is None,
              f"backend {backend.name} changed {changed} (spec: inputs and cotangent untouched)")
    if expected.error is not None:
        _check_error(ctx, sent.result, expected, checks)
    elif checks & {"form", "output", "grads", "tangent"}:
        _check_value(ctx, sent.result, expected, checks)


def _check_value(ctx: Context, result: Result, expected: Expected,
                 checks: frozenset[str]) -> None:
    """The checks ``form`` (an error answer is ``refused``, a malformed one
    ``bad_result``), then ``output``, ``grads`` and ``tangent`` within their budgets."""
    if isinstance(result, ResultError):
        ctx.fail(f"backend {ctx.backend} returned {result.kind}: {result.message!r}, "
                 "spec returns a value", "refused")
    check_declared_form(ctx, result)
    assert expected.output is not None and expected.output_budget is not None
    assert expected.grads is not None and expected.grad_budgets is not None
    if "output" in checks:
        ctx.within("output", result.output, expected.output, expected.output_budget)
    for name, grad in expected.grads.items() if "grads" in checks else ():
        ctx.within(f"grads[{name!r}]", result.grads[name], grad, expected.grad_budgets[name])
    if "tangent" in checks and expected.tangent is not None:
        assert result.tangent is not None and expected.tangent_budget is not None  # form
        ctx.within("tangent", result.tangent, expected.tangent, expected.tangent_budget)


def _check_error(ctx: Context, result: Result, expected: Expected,
                 checks: frozenset[str]) -> None:
    """The checks ``error`` (the kind) and ``shapes`` (the shapes that error names)."""
    got = result.kind if isinstance(result, ResultError) else "a value"
    if "error" in checks:
        ctx.check(got == expected.error,
                  f"backend {ctx.backend} gives {got}, spec gives {expected.error}")
    if "shapes" in checks and got == expected.error and expected.shapes is not None:
        assert isinstance(result, ResultError)
        ctx.check(tuple(map(tuple, result.shapes or ())) == expected.shapes,
                  f"backend {ctx.backend} names shapes {result.shapes}, spec names "
                  f"{expected.shapes}")


def _sent_between_probes(backend: Backend, ctx: Context, request: Request,
                         probe: Request) -> Sent:
    """``request`` sent after two runs of ``probe`` and before a third; all three must
    give the same bits (the check ``state``, as the law that a refusal leaves the backend's
    state unchanged states it: the two runs before tell non-determinism from a change)."""
    first = send(backend, probe).result
    again = next(iter(differences(first, send(backend, probe).result, 1)), None)
    ctx.check(again is None, f"backend {ctx.backend} is non-deterministic: the probe "
              f"{probe.program.describe()} run twice gives {again} (spec: bitwise identical)")
    sent = send(backend, request)
    after = next(iter(differences(first, send(backend, probe).result, 1)), None)
    ctx.check(after is None, f"backend {ctx.backend} gives a different result for the probe "
              f"{probe.program.describe()} after this request ({after}): the request changed "
              "its state")
    return sent


def judge_group(backend: Backend, group: Group) -> Judged:
    """What ``backend`` gives for the vector group ``group`` (module docstring)."""
    for request in group.requests:
        unclaimed = backend.capabilities.covers(request)
        if unclaimed is not None:
            return Judged(unclaimed=f"backend {backend.name}: {unclaimed}")
    try:
        answers = [_answer(backend, request) for request in group.requests]
        relations.check(backend, group, answers)
    except PropertyFailure as failure:
        return Judged(kind=failure.kind, message=str(failure))
    return Judged()


def _answer(backend: Backend, request: Request) -> Value:
    ctx = Context(backend.name, request)
    result = send(backend, request).result
    if isinstance(result, ResultError):
        ctx.fail(f"backend {backend.name} returned {result.kind}: {result.message!r}, "
                 "spec returns a value", "refused")
    check_declared_form(ctx, result)
    return result
