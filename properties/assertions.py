"""Assertion helpers: one-line failure messages that name the spec side and the backend side.

Every failure is a :class:`PropertyFailure` carrying the request that produced it, so
the pytest plugin can save it as a test vector and print the replay command. Helpers set
``__tracebackhide__`` so pytest shows the property's own line, not ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from impl.backend import Backend
from spec.compare import cells, decimal
from spec.ir import infer_shapes
from spec.request import Request, Result, storage_dtype

__all__ = ["Context", "PropertyFailure", "element_index", "guarded_run", "num", "run_ok"]


class PropertyFailure(AssertionError):
    """A backend broke a law; ``request`` is the input to save and replay."""

    def __init__(self, message: str, request: Request) -> None:
        super().__init__(message)
        self.request = request


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

    def fail(self, message: str) -> None:
        """Raise a PropertyFailure whose one line ends with the dtype and the program."""
        __tracebackhide__ = True
        raise PropertyFailure(f"{message} {self.where}", self.request)

    def check(self, condition: bool, message: str) -> None:
        __tracebackhide__ = True
        if not condition:
            self.fail(message)

    def within(self, what: str, actual: np.ndarray, exact: np.ndarray,
               budget: np.ndarray) -> None:
        """Every element of the backend's ``actual`` lies within ``budget`` of the spec.

        The verdict is :func:`spec.compare.within`, the rule replay and the budget object
        use too (an infinite budget element allows anything: the analysis allows overflow).
        """
        __tracebackhide__ = True
        actual, exact = np.asarray(actual), np.asarray(exact, dtype=object)
        self.check(actual.shape == exact.shape,
                   f"{what}: backend {self.backend} gives shape {list(actual.shape)}, "
                   f"spec gives {list(exact.shape)}")
        for cell in cells(actual, exact, budget):
            if not cell.ok:
                diff = cell.actual if cell.diff is None else cell.diff
                self.fail(f"{what}{element_index(cell.index)}: backend {self.backend} = "
                          f"{num(cell.actual)}, spec = {num(cell.exact)}, |diff| = {num(diff)} "
                          f"> budget {num(cell.bound)}")

    def equal(self, what: str, actual: np.ndarray, expected: np.ndarray,
              expected_side: str = "spec", skip: np.ndarray | None = None) -> None:
        """Exact equality as values (``-0.0 == 0.0``), element by element (except ``skip``)."""
        __tracebackhide__ = True
        actual, expected = np.asarray(actual), np.asarray(expected, dtype=object)
        self.check(actual.shape == expected.shape,
                   f"{what}: backend {self.backend} gives shape {list(actual.shape)}, "
                   f"{expected_side} gives {list(expected.shape)}")
        unchecked = np.zeros(actual.shape, dtype=bool) if skip is None else np.broadcast_to(
            skip, actual.shape)
        for index in np.ndindex(actual.shape):
            if unchecked[index]:
                continue
            a, e = actual[index], expected[index]
            want = e if isinstance(e, Fraction) else Fraction(float(e))
            if not (np.isfinite(a) and Fraction(float(a)) == want):
                self.fail(f"{what}{element_index(index)}: backend {self.backend} = {num(a)}, "
                          f"{expected_side} = {num(e)} (must be equal, budget 0)")


def run_ok(backend: Backend, request: Request, label: str | None = None) -> Result:
    """Run ``request``; fail unless the backend returns an output of the declared form."""
    __tracebackhide__ = True
    ctx = Context(label or backend.name, request)
    result = guarded_run(backend, request)
    if result.error is not None:
        ctx.fail(f"backend {ctx.backend} returned {result.error.kind}: "
                 f"{result.error.message!r}, spec returns a value")
    check_declared_form(ctx, result)
    return result


def guarded_run(backend: Backend, request: Request) -> Result:
    """``backend.run(request)``; an exception escaping the backend is a property failure.

    NumPy's floating-point warnings (overflow, underflow, invalid) are IEEE behaviour, not
    errors, so they are silenced here even under pytest's ``-W error``; what the values
    became is judged by the laws.
    """
    __tracebackhide__ = True
    try:
        with np.errstate(all="ignore"):
            return backend.run(request)
    except Exception as exc:
        raise PropertyFailure(f"backend {backend.name} raised {type(exc).__name__}: {exc} "
                              f"(spec: a result or a typed error) [{request.dtype}] "
                              f"{request.program.describe()}", request) from exc


def check_declared_form(ctx: Context, result: Result) -> None:
    """Output and gradients have the declared shapes and the request's storage dtype."""
    __tracebackhide__ = True
    assert result.output is not None and result.grads is not None
    request = ctx.request
    want = storage_dtype(request.dtype)
    shape = infer_shapes(request.program)[request.program.output]
    ctx.check(set(result.grads) == set(request.inputs),
              f"grads: backend {ctx.backend} has keys {sorted(result.grads)}, "
              f"spec has {sorted(request.inputs)}")
    declared = [("output", result.output, shape)] + [
        (f"grads[{k!r}]", v, request.inputs[k].shape) for k, v in result.grads.items()]
    for what, raw, expected in declared:
        array = np.asarray(raw)
        ctx.check(array.shape == tuple(expected),
                  f"{what}: backend {ctx.backend} gives shape {list(array.shape)}, "
                  f"spec declares {list(expected)}")
        ctx.check(array.dtype == want,
                  f"{what}: backend {ctx.backend} gives dtype {array.dtype}, "
                  f"spec declares {want}")
