"""``resverify replay VECTOR --backend B``: run one saved test vector and show the diff.

The vector (a request saved by the property suite, optionally with a ``"vector"`` object
recording the property that failed, the backend, the failure's kind and message; or an
entry of the portable corpus, ``resverify vectors export``, whose request it is) runs on
the backend ``--runs`` times (default 3) and once through the exact specification
(:func:`resverify.spec.exact.evaluate`). Printed: the recorded failure, the inputs and the
cotangent and, for a forward-mode vector, the input tangents (abbreviated when big), then
every output, gradient and output-tangent (``J·t``) element with the
backend's value, the exact value (``~`` when it is not a float), ``|diff|``, the error
budget of the request's dtype (:func:`resverify.spec.budget.error_budget`) and ok/FAIL, judged by
:func:`resverify.spec.compare.within` -- the same rule as the property suite. A vector of more than
:data:`SHOW_LIMIT` elements prints a summary instead (per array: counts, the worst
element; then the first failures); ``--all`` prints every element.

The backend runs on its own copy of the request, as in the suite; a backend that changes
that copy, answers differently from run to run (non-deterministic: the differing
elements are listed), raises, or answers something that is not a result, fails.

Exit status: 0 when every element is within budget (or the backend gives the same typed
error as the spec); 1 when something failed, and also when the run was **skipped**: an
``unsupported`` answer to a request the backend's capabilities do not claim is not a
failure, but nothing was checked, and resverify never reports "passed" without evidence
(the line says ``skipped``, not ``FAIL``). ``unsupported`` for a request the backend
claims is a failure (refused). 2 when the file cannot be read or is not a valid request.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from resverify.impl import Backend, resolve_backend
from resverify.impl.registry import BUILTIN
from resverify.properties.assertions import PropertyFailure, differences, send
from resverify.spec import InvalidDocument, Request, Result, ResultError, UsageError
from resverify.spec.budget import Budget, error_budget
from resverify.spec.codec import parse_json, request_from_dict
from resverify.spec.compare import Cell, cells, decimal
from resverify.spec.exact import ExactResult, evaluate
from resverify.spec.request import storage_dtype

NAME = "replay"
HELP = "run one saved test vector on a backend and print the diff against the spec"
SHOW_LIMIT = 64
"""Vectors with more output and gradient elements than this print a summary (--all: all)."""
FIRST_FAILURES = 10
EDGE = 3
"""Elements shown at each end of an abbreviated input array."""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("vector", type=Path, help="a saved test vector (a JSON request)")
    parser.add_argument("--backend", default="numpy",
                        help=f"a built-in backend ({', '.join(sorted(BUILTIN))}; default "
                             "numpy), module:attr, or cmd:COMMAND for an external engine")
    parser.add_argument("--runs", type=_positive, default=3, metavar="N",
                        help="run the vector N times (default 3); a backend that answers "
                             "differently is reported as non-deterministic")
    parser.add_argument("--all", action="store_true",
                        help=f"print every element even when there are over {SHOW_LIMIT}")


@dataclass(frozen=True)
class Row:
    element: str
    backend: str
    spec: str
    diff: str
    budget: str
    ok: bool
    ratio: float = 0.0
    """``|diff| / budget`` (inf for a non-finite value against a finite budget): ranks the
    worst element of an array."""


@dataclass(frozen=True)
class Answer:
    """One run of the backend: its result, or how it failed to give one."""

    result: Result | None
    failure: PropertyFailure | None
    changed: str | None


def _load(path: Path) -> tuple[Request, Mapping[str, Any] | None]:
    """The request and the optional ``"vector"`` record of the failure."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise UsageError(f"cannot read test vector {str(path)!r}: {reason}") from None
    doc = parse_json(text)
    if isinstance(doc, Mapping) and "resverify-corpus" in doc:  # an entry of the corpus
        entry = doc.get("request")
        if not isinstance(entry, Mapping):
            raise InvalidDocument(f"corpus entry {doc.get('id')!r} holds no request object")
        return request_from_dict(entry), {
            "corpus": doc.get("id"), "property": doc.get("property"), "source": doc.get("source")}
    record = doc.get("vector") if isinstance(doc, Mapping) else None
    if record is not None and not isinstance(record, Mapping):
        raise InvalidDocument(f"the 'vector' entry must be an object, got {record!r}")
    request = dict(doc) if isinstance(doc, Mapping) else doc
    if isinstance(request, dict):
        request.pop("vector", None)
    return request_from_dict(request), record


def _answer(backend: Backend, request: Request) -> Answer:
    try:
        sent = send(backend, request)
    except PropertyFailure as failure:
        return Answer(None, failure, None)
    return Answer(sent.result, None, sent.mutation())


def _label(index: tuple[int, ...]) -> str:
    return f"[{','.join(map(str, index))}]"


def _ratio(cell: Cell) -> float:
    if cell.bound == math.inf:
        return 0.0
    if cell.diff is None or not math.isfinite(cell.bound):
        return math.inf
    if cell.bound == 0:
        return math.inf if cell.diff else 0.0
    try:
        return float(cell.diff / Fraction(cell.bound))
    except OverflowError:
        return math.inf


def compare_array(label: str, got: np.ndarray, exact: np.ndarray, budget: np.ndarray
                  ) -> list[Row]:
    """One row per element of ``got`` against the exact values, judged by resverify.spec.compare."""
    if got.shape != exact.shape:
        return [Row(label, f"shape {list(got.shape)}", f"shape {list(exact.shape)}", "", "",
                    False, math.inf)]
    return [Row(f"{label}{_label(c.index)}", repr(c.actual), _show(c.exact),
                _short(c.abs_diff), f"{c.bound:.3g}", c.ok,
                _ratio(c))
            for c in cells(got, exact, budget)]


def _short(value: Fraction | float) -> str:
    """Three significant digits, even beyond the float range."""
    try:
        return f"{float(value):.3g}"
    except OverflowError:
        return decimal(value, 3)


def _show(value: Fraction) -> str:
    text = decimal(value)
    try:
        inexact = Fraction(float(value)) != value
    except OverflowError:
        inexact = True
    return f"{text}~" if inexact else text


def compare(request: Request, result: Result, exact: ExactResult,
            budget: Budget | None) -> list[list[Row]]:
    """Rows for every element, one list per array, or one row for an error on either side."""
    if exact.error is not None or isinstance(result, ResultError) or budget is None:
        return [[_error_row(exact.error, result if isinstance(result, ResultError) else None)]]
    assert exact.output is not None and exact.grads is not None
    arrays: list[tuple[str, Any, np.ndarray, Any]] = [
        ("output", result.output, exact.output, budget.output)]
    arrays += [(f"grad {name}", result.grads.get(name), grad, budget.grads[name])
               for name, grad in exact.grads.items()]
    if exact.tangent is not None:  # a forward-mode vector: J·t is judged as the suite does
        arrays.append(("tangent", getattr(result, "tangent", None), exact.tangent,
                       budget.tangent))
    return [[Row(label, "missing", "present", "", "", False)] if got is None
            else compare_array(label, np.asarray(got), want, bound)
            for label, got, want, bound in arrays]


def _error_row(spec_error: Any, backend_error: Any) -> Row:
    def said(err: Any) -> str:
        if err is None:
            return "a value"
        shapes = getattr(err, "shapes", None)
        return f"{err.kind} {[list(s) for s in shapes]}" if shapes else f"{err.kind}: {err.message}"
    same = (spec_error is not None and backend_error is not None
            and spec_error.kind == backend_error.kind
            and getattr(spec_error, "shapes", None) == getattr(backend_error, "shapes", None))
    refused = backend_error is not None and spec_error is None
    return Row("result", ("refused: " if refused else "") + said(backend_error),
               said(spec_error), "", "", same)


def _dtype_rows(request: Request, result: Result) -> list[Row]:
    if isinstance(result, ResultError):
        return []
    want = storage_dtype(request.dtype)
    got = np.asarray(result.output).dtype
    return [] if got == want else [Row("output dtype", str(got), str(want), "", "", False)]


def _values(array: np.ndarray, show_all: bool) -> str:
    """An array's values as Python floats, the middle left out when it is big."""
    flat = np.asarray(array).reshape(-1).tolist()
    if array.ndim <= 1 and (show_all or len(flat) <= SHOW_LIMIT):
        return repr(flat) if array.ndim else repr(flat[0])
    if show_all or len(flat) <= SHOW_LIMIT:
        return repr(np.asarray(array).tolist())
    head, tail = ", ".join(map(repr, flat[:EDGE])), ", ".join(map(repr, flat[-EDGE:]))
    return f"[{head}, ..., {tail}] ({len(flat)} elements, shown flat)"


def _print_request(request: Request, record: Mapping[str, Any] | None, show_all: bool) -> None:
    if record is not None and "corpus" in record:
        print(f"corpus entry {record['corpus']}: property {record['property']} "
              f"({record['source']})")
    elif record is not None:
        print(f"recorded: property {record.get('property', '?')} failed on backend "
              f"{record.get('backend', '?')} (kind {record.get('kind', '?')}): "
              f"{record.get('message', '')}")
        if record.get("path_replay"):
            print(f"the block failed on its path {record.get('path')}, which this replay of "
                  f"the traced program does not run; the path again: {record['path_replay']}")
    for name, value in request.inputs.items():
        print(f"input {name} {list(value.shape)}: {_values(value, show_all)}")
    cot = _values(request.cotangent, show_all) if request.shape_valid else "none (shape-invalid)"
    print(f"cotangent: {cot}")
    for name, value in (request.tangents or {}).items():
        print(f"tangent {name}: {_values(value, show_all)}")


def _table(rows: list[Row]) -> None:
    header = ("element", "backend", "spec", "|diff|", "budget", "")
    table = [header] + [(r.element, r.backend, r.spec, r.diff, r.budget,
                         "ok" if r.ok else "FAIL") for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def _summary(groups: list[list[Row]]) -> None:
    for rows in groups:
        name = rows[0].element.split("[")[0]
        failed = sum(not r.ok for r in rows)
        worst = max(rows, key=lambda r: r.ratio)
        print(f"{name}: {len(rows)} elements, {len(rows) - failed} ok, {failed} FAIL; worst "
              f"{worst.element} = {worst.backend}, spec {worst.spec}, |diff| {worst.diff}, "
              f"budget {worst.budget}")
    failing = [r for rows in groups for r in rows if not r.ok]
    if failing:
        print(f"first {min(len(failing), FIRST_FAILURES)} of {len(failing)} failures "
              "(--all prints every element):")
        _table(failing[:FIRST_FAILURES])


def _non_deterministic(answers: list[Answer]) -> list[str]:
    """For each run that differs from the first: what differs."""
    first, lines = answers[0], []
    for run, other in enumerate(answers[1:], start=2):
        if first.result is not None and other.result is not None:
            found = differences(first.result, other.result, FIRST_FAILURES)
        else:
            said = [str(a.failure) if a.failure else "a result" for a in (first, other)]
            found = [] if said[0] == said[1] else [f"{said[0]} then {said[1]}"]
        lines += [f"run {run} differs from run 1: {item}" for item in found]
    return lines


def run(args: argparse.Namespace) -> int:
    request, record = _load(args.vector)
    backend = resolve_backend(args.backend)
    try:
        return _replay(args, request, record, backend)
    finally:
        close = getattr(backend, "close", None)
        if callable(close):
            close()  # an external engine's process ends with the replay


def _replay(args: argparse.Namespace, request: Request, record: Mapping[str, Any] | None,
            backend: Backend) -> int:
    program = request.program.describe()
    program = program if len(program) <= 160 else program[:157] + "..."
    print(f"vector {args.vector}: {program} [{request.dtype}] on backend {backend.name}")
    _print_request(request, record, args.all)
    answers = [_answer(backend, request) for _ in range(args.runs)]
    skipped = _unclaimed_refusal(backend, request, answers[0])
    if skipped:
        print(skipped)
        return 1
    groups = _groups(request, answers[0])
    rows = [r for rows in groups for r in rows]
    if args.all or len(rows) <= SHOW_LIMIT:
        _table(rows)
    else:
        _summary(groups)
    unstable = _non_deterministic(answers)
    if unstable:
        print(f"non-deterministic: {args.runs} runs of the same request gave different "
              f"answers (spec: bitwise identical)")
        for line in unstable:
            print(f"  {line}")
    failed = sum(not r.ok for r in rows)
    print(f"{len(rows) - failed} ok, {failed} FAIL")
    return 1 if failed or unstable else 0


def _unclaimed_refusal(backend: Backend, request: Request, first: Answer) -> str | None:
    """The line that says nothing was checked, when the backend answered ``unsupported``
    to a request it does not claim (None otherwise)."""
    unclaimed = backend.capabilities.covers(request)
    if not (isinstance(first.result, ResultError) and first.result.kind == "unsupported"
            and unclaimed):
        return None
    return (f"skipped: backend {backend.name} answered unsupported "
            f"({first.result.message!r}) to a request it does not claim "
            f"({unclaimed}); nothing checked")


def _groups(request: Request, first: Answer) -> list[list[Row]]:
    """The rows of the first answer against the spec, grouped by array: the result (or the
    failure that stood in for it), its dtypes, and whether the request came back changed."""
    exact = evaluate(request)
    budget = error_budget(request, exact=exact) if exact.error is None else None
    if first.result is None:
        assert first.failure is not None
        groups = [[Row("result", f"{first.failure.kind}: {first.failure}", "a result", "", "",
                       False)]]
    else:
        groups = compare(request, first.result, exact, budget)
        dtype = _dtype_rows(request, first.result)
        groups = [dtype, *groups] if dtype else groups
    if first.changed is not None:
        groups.append([Row("request", f"changed {first.changed}", "untouched", "", "", False)])
    return groups
