"""``resverify replay VECTOR --backend B``: run one saved test vector and show the diff.

The vector (a request saved by the property suite) runs on the backend and through the
exact specification (:func:`spec.exact.evaluate`); every output and gradient element is
printed with the backend's value, the exact value, the error budget of the request's
dtype (:func:`spec.budget.error_budget`, which includes the exact interpreter's own
slack for ``tanh``) and ok/FAIL. An element is ok when ``|backend - exact| <= budget``, compared
in exact rational arithmetic. Exit 0 when every element is within budget, 1 otherwise,
2 when the file cannot be read or is not a valid request.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from impl import Backend, resolve_backend
from spec import Request, Result, UsageError, loads_request
from spec.budget import Budget, error_budget
from spec.compare import cells, decimal
from spec.exact import ExactResult, evaluate
from spec.request import storage_dtype

NAME = "replay"
HELP = "run one saved test vector on a backend and print the diff against the spec"
SHOW_LIMIT = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("vector", type=Path, help="a saved test vector (a JSON request)")
    parser.add_argument("--backend", default="numpy", help="numpy (default) or module:attr")
    parser.add_argument("--all", action="store_true",
                        help=f"print every element even when an array has over {SHOW_LIMIT}")


@dataclass(frozen=True)
class Row:
    element: str
    backend: str
    spec: str
    diff: str
    budget: str
    ok: bool


def _load(path: Path) -> Request:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"cannot read test vector {str(path)!r}: {reason}") from None
    return loads_request(text)


def _run_backend(backend: Backend, request: Request) -> Result:
    try:
        return backend.run(request)
    except Exception as exc:  # a crashing backend is a failure to report, not to raise
        return Result.failure("backend_error", f"{type(exc).__name__}: {exc}")


def _index(shape: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    yield from np.ndindex(*shape) if shape else iter([()])


def compare_array(label: str, got: np.ndarray, exact: np.ndarray, budget: np.ndarray
                  ) -> list[Row]:
    """One row per element of ``got`` against the exact values, judged by spec.compare."""
    if got.shape != exact.shape:
        return [Row(label, f"shape {list(got.shape)}", f"shape {list(exact.shape)}", "", "",
                    False)]
    return [Row(f"{label}[{','.join(map(str, c.index))}]", repr(c.actual), _show(c.exact),
                "inf" if c.diff is None else _short(c.diff), _short(c.bound), c.ok)
            for c in cells(got, exact, budget)]


def _short(value: Fraction | float) -> str:
    return decimal(value, 3) if isinstance(value, Fraction) else f"{value:.3g}"


def _show(value: Fraction) -> str:
    text = decimal(value)
    try:
        inexact = Fraction(float(value)) != value
    except OverflowError:
        inexact = True
    return f"{text}~" if inexact else text


def compare(request: Request, result: Result, exact: ExactResult,
            budget: Budget | None) -> list[Row]:
    """Rows for every element, or one row for an error on either side."""
    if exact.error is not None or result.error is not None or budget is None:
        return [_error_row(exact.error, result.error)]
    assert result.output is not None and result.grads is not None
    assert exact.output is not None and exact.grads is not None
    rows = compare_array("output", np.asarray(result.output), exact.output, budget.output)
    for name, grad in exact.grads.items():
        got = result.grads.get(name)
        if got is None:
            rows.append(Row(f"grad {name}", "missing", "present", "", "", False))
            continue
        rows += compare_array(f"grad {name}", np.asarray(got), grad, budget.grads[name])
    return rows


def _error_row(spec_error: Any, backend_error: Any) -> Row:
    def said(err: Any) -> str:
        if err is None:
            return "a value"
        shapes = getattr(err, "shapes", None)
        return f"{err.kind} {[list(s) for s in shapes]}" if shapes else f"{err.kind}: {err.message}"
    same = (spec_error is not None and backend_error is not None
            and spec_error.kind == backend_error.kind
            and getattr(spec_error, "shapes", None) == getattr(backend_error, "shapes", None))
    return Row("result", said(backend_error), said(spec_error), "", "", same)


def _dtype_rows(request: Request, result: Result) -> list[Row]:
    if result.output is None:
        return []
    want = storage_dtype(request.dtype)
    got = np.asarray(result.output).dtype
    return [] if got == want else [Row("output dtype", str(got), str(want), "", "", False)]


def _print(rows: list[Row], show_all: bool) -> None:
    shown = rows if show_all or len(rows) <= SHOW_LIMIT else [r for r in rows if not r.ok]
    header = ("element", "backend", "spec", "|diff|", "budget", "")
    table = [header] + [(r.element, r.backend, r.spec, r.diff, r.budget,
                         "ok" if r.ok else "FAIL") for r in shown]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if len(shown) < len(rows):
        print(f"({len(rows) - len(shown)} elements within budget not shown; use --all)")


def run(args: argparse.Namespace) -> int:
    request = _load(args.vector)
    backend = resolve_backend(args.backend)
    result = _run_backend(backend, request)
    exact = evaluate(request)
    budget = error_budget(request, exact=exact) if exact.error is None else None
    program = request.program.describe()
    program = program if len(program) <= 160 else program[:157] + "..."
    print(f"vector {args.vector}: {program} [{request.dtype}] on backend {backend.name}")
    rows = _dtype_rows(request, result) + compare(request, result, exact, budget)
    _print(rows, args.all)
    failed = sum(not r.ok for r in rows)
    print(f"{len(rows) - failed} ok, {failed} FAIL")
    return 1 if failed else 0


