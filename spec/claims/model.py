"""The claim model: what a claim is, what checking it found, and one flat view of a run.

Why: the exact interpreter and a backend answer a request differently (Fractions against
arrays, a ``slack`` against an error kind), yet every claim observes them the same way. A
check is written once against an *interpreter* (request -> :class:`Run`), and this module
turns either side into one, so the exact and the backend checks compute the same thing.

A backend check never calls a backend directly: a :class:`Guard` sends each request the way
the whole of resverify does. A request outside the backend's capabilities is not sent and
the claim is skipped on that backend (:class:`NotClaimed`); an ``unsupported`` answer to a
request it claims is a failure (:class:`Refused`), as is an answer that is not a result of
the request's form (:class:`resverify.spec.errors.BadResult`: output or gradients of the wrong
shape or dtype).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from resverify.spec import exact
from resverify.spec.errors import BackendFault, BadResult, InvalidRequest, ResverifyError, Shape
from resverify.spec.request import Request, Result, ResultError, Value, check_form

__all__ = ["BackendSide", "Claim", "ClaimOutcome", "Guard", "Run", "Section", "Target",
           "overall_status"]

Runner = Callable[[Request], Result]


class Covers(Protocol):
    def covers(self, request: Request) -> str | None: ...


class Target(Protocol):
    """What a claim is checked on: a backend (:class:`impl.Backend` has this form)."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> Covers: ...

    def run(self, request: Request) -> Result: ...


class NotClaimed(ResverifyError):
    """A check needs a request its backend does not claim: not sent, the claim is skipped."""


class Refused(ResverifyError):
    """The backend answered an error (``unsupported`` included) to a valid request it claims."""

    kind = "refused"


class BackendRaised(ResverifyError):
    """The backend's ``run`` raised an exception that is not a :class:`BackendFault`."""

    kind = "raised"


@dataclass(frozen=True)
class Section:
    """Where a claim comes from: the seed file, its heading as written, and our translation."""

    file: str
    heading: str
    english: str
    language: str


@dataclass(frozen=True)
class Claim:
    """One checkable fact: ``check()`` must return ``expected``; ``backend(run)`` likewise.

    ``observers`` are the functions the claim was declared with (see
    :mod:`~resverify.spec.claims.register`): the observation and any side's own keys.
    """

    id: str
    source: Section
    statement: str
    expected: object
    check: Callable[[], object]
    backend: Callable[[Runner], object] | None = None
    backend_expected: object = None
    note: str = ""
    observers: tuple[Callable[..., object], ...] = ()

    @property
    def expected_from_backend(self) -> object:
        return self.expected if self.backend_expected is None else self.backend_expected


@dataclass(frozen=True)
class BackendSide:
    """One backend's side of a claim.

    ``status`` is ``pass``, ``fail`` or ``skipped``; ``reason`` says why it was skipped, or
    why no value could be observed; ``failure_kind`` classifies a failure as the property
    suite does (``law``: a wrong value, ``refused``, ``raised``, ``bad_result``, ``timeout``,
    ``crash``).
    """

    backend: str
    expected: object
    observed: object
    status: str
    reason: str | None = None
    failure_kind: str | None = None


def overall_status(exact_status: str, sides: Iterable[str]) -> str:
    """``fail`` when the exact side or any backend fails, else ``skipped`` when a backend
    could not run the claim, else ``pass``: a skipped side never reads as a pass."""
    statuses = [exact_status, *sides]
    if any(s not in ("pass", "skipped") for s in statuses):
        return "fail"
    return "skipped" if "skipped" in statuses else "pass"


@dataclass(frozen=True)
class ClaimOutcome:
    """What checking a claim found: the exact side and each backend's side."""

    claim: Claim
    observed: object
    exact_status: str
    backends: tuple[BackendSide, ...] = ()

    @property
    def status(self) -> str:
        return overall_status(self.exact_status, (side.status for side in self.backends))


# --- running requests: one flat view for the exact interpreter and for backends ------------

@dataclass(frozen=True)
class Run:
    """A result flattened to exact Fractions (row-major), or the error's kind and shapes
    (an error's run has no output and no gradients)."""

    output: tuple[Fraction, ...] = ()
    shape: Shape = ()
    grads: Mapping[str, tuple[Fraction, ...]] = field(default_factory=dict)
    error: str | None = None
    error_shapes: tuple[Shape, ...] = ()
    message: str = ""


Interpreter = Callable[[Request], Run]


def flat(array: object) -> tuple[Fraction, ...]:
    """An array's values, row-major, as exact Fractions (floats convert without rounding)."""
    return tuple(Fraction(v) if isinstance(v, Fraction) else Fraction(float(v))
                 for v in np.asarray(array).reshape(-1).tolist())


def _run_of(output: object, grads: Mapping[str, object] | None, error: Any) -> Run:
    if error is not None:
        return Run(error=error.kind, error_shapes=tuple(error.shapes or ()), message=error.message)
    assert grads is not None, "an exact value always has gradients"
    return Run(flat(output), tuple(np.asarray(output).shape),
               {k: flat(v) for k, v in grads.items()})


def _flatten(result: Result) -> Run:
    if isinstance(result, ResultError):
        return _run_of(None, None, result)
    return _run_of(result.output, result.grads, None)


def exact_run(request: Request) -> Run:
    """Interpret ``request`` with the exact interpreter (every claim here is rational)."""
    result = exact.evaluate(request)
    if result.slack != 0:
        raise InvalidRequest(f"claims need exact answers, got slack {result.slack} for "
                             f"{_call(request)}")
    return _run_of(result.output, result.grads, result.error)


def backend_interpreter(run: Runner) -> Interpreter:
    """A (guarded) backend ``run`` seen as an interpreter: each result flattened to a Run."""

    def interpret(request: Request) -> Run:
        return _flatten(run(request))

    return interpret


def _call(request: Request) -> str:
    return f"[{request.dtype}] {request.program.describe()}"


class Guard:
    """``target.run`` as every backend check calls it (see the module docstring).

    Raises :class:`NotClaimed` for a request outside the capabilities (not sent),
    :class:`Refused` for an ``unsupported`` answer to a claimed one, :class:`BadResult`
    for an answer that is not a result of the request's form, :class:`BackendRaised` when
    ``run`` raises, and lets a :class:`BackendFault` through with its own kind.
    ``last_error`` describes the error answer to the latest request, if it was one (a
    check that then fails for want of a value names it).
    """

    def __init__(self, target: Target) -> None:
        self.target = target
        self.last_error: str | None = None

    def __call__(self, request: Request) -> Result:
        reason = self.target.capabilities.covers(request)
        if reason is not None:
            raise NotClaimed(f"{reason}; not sent: {_call(request)}")
        try:
            with np.errstate(all="ignore"):
                result = self.target.run(request)
        except BackendFault:
            raise
        except Exception as exc:
            raise BackendRaised(f"run() raised {type(exc).__name__}: {exc} "
                                f"{_call(request)}") from exc
        if not isinstance(result, Result):
            got = "None" if result is None else type(result).__name__
            raise BadResult(f"run() must return a Result, got {got} {_call(request)}")
        if isinstance(result, Value):
            try:
                check_form(request, result)
            except BadResult as exc:
                raise BadResult(f"{exc} {_call(request)}") from None
            self.last_error = None
            return result
        if result.kind == "unsupported":
            raise Refused(f"answered unsupported to a request it claims: "
                          f"{result.message!r} {_call(request)}")
        self.last_error = f"answered {result.kind}: {result.message!r} {_call(request)}"
        return result


def value_of(run: Runner, request: Request) -> Value:
    """``run(request)`` for a valid request, whose answer must be a value, not an error."""
    result = run(request)
    if isinstance(result, ResultError):
        raise Refused(f"answered {result.kind}: {result.message!r} to a valid "
                      f"request {_call(request)}")
    return result
