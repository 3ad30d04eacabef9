"""The claim model: what a claim is, what checking it found, and one flat view of a run.

Why: the exact interpreter and a backend answer a request differently (Fractions against
arrays, a ``slack`` against an error kind), yet every claim observes them the same way. A
check is written once against an *interpreter* (request -> :class:`Run`), and this module
turns either side into one, so the exact and the backend checks compute the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from spec import exact
from spec.errors import Shape
from spec.request import Request, Result

__all__ = [
    "BackendSkip",
    "Claim",
    "ClaimOutcome",
    "Interpreter",
    "Run",
    "Runner",
    "Section",
    "backend_interpreter",
    "exact_run",
    "flat",
]

Runner = Callable[[Request], Result]


class BackendSkip(Exception):
    """A backend does not claim what a check needs (an op or dtype): skipped, not failed."""


@dataclass(frozen=True)
class Section:
    """Where a claim comes from: the seed file, its heading as written, and our translation."""

    file: str
    heading: str
    english: str
    language: str


@dataclass(frozen=True)
class Claim:
    """One checkable fact: ``check()`` must return ``expected``; ``backend(run)`` likewise."""

    id: str
    source: Section
    statement: str
    expected: object
    check: Callable[[], object]
    backend: Callable[[Runner], object] | None = None
    backend_expected: object = None
    note: str = ""

    @property
    def expected_from_backend(self) -> object:
        return self.expected if self.backend_expected is None else self.backend_expected


@dataclass(frozen=True)
class ClaimOutcome:
    """What a check found: the observed value(s) and the verdict."""

    claim: Claim
    observed: object
    status: str
    backend_observed: object = None
    backend_status: str | None = None


# --- running requests: one flat view for the exact interpreter and for backends ------------

@dataclass(frozen=True)
class Run:
    """A result flattened to exact Fractions (row-major), or the error's kind and shapes."""

    output: tuple[Fraction, ...] = ()
    shape: Shape = ()
    grads: Mapping[str, tuple[Fraction, ...]] | None = None
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
    flat_grads = {k: flat(v) for k, v in grads.items()} if grads is not None else None
    return Run(flat(output), tuple(np.asarray(output).shape), flat_grads)


def exact_run(request: Request) -> Run:
    """Interpret ``request`` with the exact interpreter (every claim here is rational)."""
    result = exact.evaluate(request)
    if result.slack != 0:
        raise ArithmeticError(f"claims need exact results, got slack {result.slack}")
    return _run_of(result.output, result.grads, result.error)


def backend_interpreter(run: Runner) -> Interpreter:
    """Wrap a backend's ``run``; an ``unsupported`` answer becomes :class:`BackendSkip`."""

    def interpret(request: Request) -> Run:
        result = run(request)
        if result.error is not None and result.error.kind == "unsupported":
            raise BackendSkip(result.error.message)
        return _run_of(result.output, result.grads, result.error)

    return interpret
