"""Assertion helpers: one-line failure messages that name the spec side and the backend side.

Every failure is a :class:`PropertyFailure` carrying the request that produced it, so
the pytest plugin can save it as a test vector and print the replay command, and a
``kind`` that classifies it (:data:`KINDS`). The backend never sees that request itself:
:func:`send` gives it a private copy (fresh, writable arrays), so the request kept for
the vector is the one sent even when the backend writes into what it was given, and
comparing the copy afterwards tells whether it did. Helpers set ``__tracebackhide__``
so pytest shows the property's own line, not ours.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction
from typing import NoReturn

import numpy as np
from hypothesis import reject

from resverify.impl.backend import Backend
from resverify.properties.traffic import current, hearing
from resverify.spec.compare import Cell, cells, decimal
from resverify.spec.errors import BackendFault, BadResult, ResverifyError, UsageError
from resverify.spec.request import Request, Result, ResultError, Value, check_form

__all__ = ["PropertyFailure", "differences", "element_index", "send"]

KINDS = ("law", "refused", "raised", "timeout", "crash", "bad_result", "internal")
"""``PropertyFailure.kind``: ``law`` a law violated or a wrong value (the default);
``refused`` an error result for a valid request the backend claims; ``raised`` run()
raised an exception that is not a :class:`~resverify.spec.errors.BackendFault`; ``timeout``,
``crash``, ``bad_result`` a BackendFault's kind, and ``bad_result`` also for an answer
that is not a Result or has the wrong keys, shape, dtype or type. ``internal`` is never a
PropertyFailure's: it is the kind of a test that failed on resverify's own side (a spec-side
assertion, an error in resverify's code), which carries no vector and is not charged to
the backend (:func:`resverify.properties.plugin.failure_kind`)."""


class PropertyFailure(ResverifyError, AssertionError):
    """A backend broke a law; ``request`` is the input to save and replay (as sent).

    Under the root of every resverify error (:mod:`resverify.spec.errors`), and an
    ``AssertionError``, as pytest and Hypothesis expect of a failing check.
    """

    def __init__(self, message: str, request: Request, kind: str = "law",
                 element: Element | None = None, runs: int | None = None) -> None:
        if kind not in KINDS:
            raise UsageError(f"unknown failure kind {kind!r}; known: {list(KINDS)}")
        super().__init__(message)
        self.request = request
        self.kind = kind
        self.element = element
        self.runs = runs  # how many runs its replay needs (a difference between runs)


@dataclass(frozen=True)
class Element:
    """The failing element a value check names, each field as its message prints it: the
    element, the backend's value, the expected value (its side named when it is not the
    spec), ``|diff|`` and the bound it broke (a budget, a tolerance, or 0 for an equality).
    The report's failure card shows it inline (the saved vector holds the request, not
    the backend's answer)."""

    element: str
    backend: str
    expected: str
    diff: str
    budget: str

    @classmethod
    def of(cls, what: str, cell: Cell, side: str = "spec", bound: str | None = None
           ) -> Element:
        """The element ``what`` + the cell's index, as :class:`Context` prints it (``bound``
        in place of the cell's, as printed: an equality's is ``0``)."""
        expected = num(cell.exact) if side == "spec" else f"{num(cell.exact)} ({side})"
        return cls(f"{what}{element_index(cell.index)}", num(cell.actual), expected,
                   num(cell.abs_diff), num(cell.bound) if bound is None else bound)


def element_index(index: tuple[int, ...]) -> str:
    """``[1, 0]`` style text for an element index; ``[]`` for rank 0."""
    return "[" + ", ".join(str(i) for i in index) + "]"


def num(value: object) -> str:
    """A number for a message: short fractions exactly, others as floats (even huge ones)."""
    if isinstance(value, Fraction):
        if value.denominator < 10**6 and abs(value.numerator) < 10**12:
            return str(value)
        return decimal(value)
    return repr(float(value))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Context:
    """Who is being checked on what: the backend's name and the request."""

    backend: str
    request: Request

    @property
    def where(self) -> str:
        return f"[{self.request.dtype}] {self.request.program.describe()}"

    def fail(self, message: str, kind: str = "law", element: Element | None = None,
             runs: int | None = None) -> NoReturn:
        """Raise a PropertyFailure whose one line ends with the dtype and the program;
        ``runs``: how many runs of the request its replay needs to show it."""
        __tracebackhide__ = True
        raise PropertyFailure(f"{message} {self.where}", self.request, kind, element, runs)

    def check(self, condition: bool, message: str, kind: str = "law") -> None:
        __tracebackhide__ = True
        if not condition:
            self.fail(message, kind)

    def same_twice(self, differs: str | None, message: str) -> None:
        """Fail with ``message`` when two runs of one request differed (``differs`` says
        how); the failure's replay runs the request as many times as this test had called
        the backend when the difference first showed
        (:meth:`~resverify.properties.traffic.Traffic.first_difference`)."""
        __tracebackhide__ = True
        if differs is not None:
            runs = current().first_difference()
            self.fail(f"{message} (first seen after {runs} runs)", runs=runs)

    def within(self, what: str, actual: np.ndarray, exact: np.ndarray,
               budget: np.ndarray) -> None:
        """Every element of the backend's ``actual`` lies within ``budget`` of the spec.

        The verdict is :func:`resverify.spec.compare.within`, the rule replay and the budget object
        use too (an infinite budget element allows anything: the analysis allows overflow).
        """
        __tracebackhide__ = True
        actual, exact = np.asarray(actual), np.asarray(exact, dtype=object)
        self.check(actual.shape == exact.shape,
                   f"{what}: backend {self.backend} gives shape {list(actual.shape)}, "
                   f"spec gives {list(exact.shape)}")
        for cell in cells(actual, exact, budget):
            if not cell.ok:
                unbounded = "" if cell.bound == cell.bound else " (a NaN budget bounds nothing)"
                e = Element.of(what, cell)
                self.fail(f"{e.element}: backend {self.backend} = {e.backend}, spec = "
                          f"{e.expected}, |diff| = {e.diff} > budget {e.budget}{unbounded}",
                          element=e)

    def equal(self, what: str, actual: np.ndarray, expected: np.ndarray,
              expected_side: str = "spec", skip: np.ndarray | None = None) -> None:
        """Exact equality as values (``-0.0 == 0.0``), element by element (except ``skip``):
        :func:`resverify.spec.compare.within` with a budget of 0."""
        __tracebackhide__ = True
        actual, expected = np.asarray(actual), np.asarray(expected, dtype=object)
        self.check(actual.shape == expected.shape,
                   f"{what}: backend {self.backend} gives shape {list(actual.shape)}, "
                   f"{expected_side} gives {list(expected.shape)}")
        unchecked = np.zeros(actual.shape, dtype=bool) if skip is None else np.broadcast_to(
            skip, actual.shape)
        for cell in cells(actual, expected, np.zeros(actual.shape)):
            if not (cell.ok or unchecked[cell.index]):
                e = Element.of(what, cell, expected_side, "0")
                self.fail(f"{e.element}: backend {self.backend} = {e.backend}, "
                          f"{expected_side} = {num(cell.exact)} (must be equal, budget 0)",
                          element=e)


def run_ok(backend: Backend, request: Request, label: str | None = None) -> Value:
    """Run ``request``; fail unless the backend returns a value of the declared form.

    An error result is a failure of kind ``refused``, except ``unsupported`` for a
    request outside the backend's claimed capabilities: that example is skipped
    (:func:`hypothesis.reject`), as everywhere in resverify.
    """
    __tracebackhide__ = True
    ctx = Context(label or backend.name, request)
    result = guarded_run(backend, request)
    if isinstance(result, ResultError):
        if result.kind == "unsupported" and backend.capabilities.covers(request):
            reject()
        ctx.fail(f"backend {ctx.backend} returned {result.kind}: "
                 f"{result.message!r}, spec returns a value", "refused")
    check_declared_form(ctx, result)
    return result


def private_copy(request: Request) -> Request:
    """The same request with fresh, writable copies of every array (the backend's own),
    the input tangents of a forward-mode request included."""
    tangents = None if request.tangents is None else {
        k: np.array(v) for k, v in request.tangents.items()}
    copy = dataclasses.replace(request, inputs={k: np.array(v) for k, v in request.inputs.items()},
                               cotangent=np.array(request.cotangent), tangents=tangents)
    for array in _arrays(copy).values():
        array.flags.writeable = True
    return copy


@dataclass(frozen=True)
class Sent:
    """One run: the request as sent, the backend's copy as it is now, and the result."""

    request: Request
    copy: Request
    result: Result

    def mutation(self) -> str | None:
        """What the backend changed in its copy (see :func:`mutation`), or None."""
        return mutation(self.request, self.copy)


def send(backend: Backend, request: Request) -> Sent:
    """``backend.run`` on a private copy of ``request``; misbehaviour is a PropertyFailure.

    An exception escaping the backend fails with kind ``raised`` (a BackendFault with its
    own kind); an answer that is not a :class:`Result` with kind ``bad_result``. A
    BaseException (a test's time limit, an interrupt) passes through with the request it
    interrupted as its ``resverify_request``, so a timeout keeps its vector too. NumPy's
    floating-point warnings (overflow, underflow, invalid) are IEEE behaviour, not
    errors, so they are silenced here; any other warning the backend raises is recorded in
    the test's :class:`~resverify.properties.traffic.Traffic` and never decides the
    verdict, even under pytest's ``-W error`` (what the values became is judged by the laws).
    """
    __tracebackhide__ = True
    where = f"[{request.dtype}] {request.program.describe()}"
    copy = private_copy(request)
    try:
        with np.errstate(all="ignore"), hearing(current()):
            result = backend.run(copy)
    except BackendFault as exc:
        raise PropertyFailure(f"backend {backend.name} {exc.kind}: {exc} {where}", request,
                              exc.kind) from exc
    except Exception as exc:
        raise PropertyFailure(f"backend {backend.name} raised {type(exc).__name__}: {exc} "
                              f"(spec: a result or a typed error) {where}", request,
                              "raised") from exc
    except BaseException as exc:  # a time limit (or an interrupt) while the backend ran:
        exc.resverify_request = request  # type: ignore[attr-defined]  # its vector
        raise
    if not isinstance(result, Result):
        got = "None" if result is None else type(result).__name__
        raise PropertyFailure(f"backend {backend.name}: run() must return a Result, got {got} "
                              f"{where}", request, "bad_result")
    return Sent(request, copy, result)


def guarded_run(backend: Backend, request: Request) -> Result:
    """The result of :func:`send`: ``backend.run`` on its own copy of ``request``."""
    __tracebackhide__ = True
    return send(backend, request).result


def _arrays(request: Request) -> dict[str, np.ndarray]:
    named = {f"input {k!r}": v for k, v in request.inputs.items()}
    named["cotangent"] = request.cotangent
    named.update({f"tangent {k!r}": v for k, v in (request.tangents or {}).items()})
    return named


def mutation(sent: Request, seen: Request) -> str | None:
    """The first change from ``sent`` to ``seen`` (the backend's copy after its run), e.g.
    ``cotangent[1]: 1.0 before, 0.0 after``; None when every array has its bytes."""
    after = _arrays(seen)
    for name, old in _arrays(sent).items():
        new = after.get(name)
        if old is None or new is None:
            if (old is None) != (new is None):
                return f"{name}: {'removed' if new is None else 'added'}"
            continue
        old, new = np.asarray(old), np.asarray(new)
        if (old.shape, old.dtype) != (new.shape, new.dtype):
            return (f"{name}: shape {list(old.shape)} {old.dtype} before, "
                    f"{list(new.shape)} {new.dtype} after")
        bits = np.dtype(f"u{old.dtype.itemsize}")
        changed = np.flatnonzero(old.view(bits) != new.view(bits))
        if changed.size:
            index = tuple(int(i) for i in np.unravel_index(changed[0], old.shape))
            return (f"{name}{element_index(index)}: {num(old[index])} before, "
                    f"{num(new[index])} after")
    return None


def _said(result: Result) -> str:
    return "a value" if isinstance(result, Value) else f"{result.kind} {result.message!r}"


def _tangent_said(value: Value) -> str:
    return "no tangent" if value.tangent is None else "a tangent"


def differences(first: Result, second: Result, limit: int = 10) -> list[str]:
    """How two results differ bit for bit, at most ``limit`` items, e.g.
    ``output[0, 1]: 0.5 then 0.5000000000000001``; empty when they are the same."""
    if not (isinstance(first, Value) and isinstance(second, Value)):
        return [] if first == second else [f"{_said(first)} then {_said(second)}"]
    if set(first.grads) != set(second.grads):
        return [f"grads for {sorted(first.grads)} then for {sorted(second.grads)}"]
    found: list[str] = []
    if (first.tangent is None) != (second.tangent is None):
        return [f"{_tangent_said(first)} then {_tangent_said(second)}"]
    pairs = [("output", first.output, second.output)] + [
        (f"grads[{k!r}]", first.grads[k], second.grads[k]) for k in sorted(first.grads)]
    if first.tangent is not None and second.tangent is not None:
        pairs.append(("tangent", first.tangent, second.tangent))
    for what, one, two in pairs:
        a, b = np.asarray(one), np.asarray(two)
        if (a.shape, a.dtype) != (b.shape, b.dtype):
            found.append(f"{what}: shape {list(a.shape)} {a.dtype} then "
                         f"{list(b.shape)} {b.dtype}")
            continue
        bits = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else None
        differs = (a.view(bits) != b.view(bits)) if bits is not None else (a != b)
        for flat in np.flatnonzero(differs)[:max(0, limit - len(found))]:
            index = tuple(int(i) for i in np.unravel_index(flat, a.shape))
            found.append(f"{what}{element_index(index)}: {num(a[index])} then {num(b[index])}")
    return found[:limit]


def check_declared_form(ctx: Context, result: Value) -> None:
    """:func:`resverify.spec.request.check_form` as a property check: a value not of the
    declared form is a failure of kind ``bad_result``."""
    __tracebackhide__ = True
    try:
        check_form(ctx.request, result)
    except BadResult as exc:
        ctx.fail(f"backend {ctx.backend}: {exc}", "bad_result")
