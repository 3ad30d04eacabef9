"""The conformance matrix: one row per property and mode, one cell per backend and dtype.

Why a module of its own: report.json carries the matrix, so a machine reads the very
verdicts a person sees, and report.md and report.html only render it. It is built from
the report's own ``properties`` and ``backends`` entries, nothing else.

Why modes side by side: a backend may claim reverse mode only (``vjp``) or forward mode
too (``jvp``; see :data:`resverify.impl.backend.MODES`). A property test records its mode
(the ``jvp`` marker of :mod:`resverify.properties.plugin`), the rows are grouped by it,
VJP first, and :func:`mode_summary` gives each backend's verdict per mode in one line, so
"passes in reverse mode, not claimed in forward mode" reads at a glance.

A cell is the status of the property's tests on that backend in that dtype (a failure
anywhere in the cell wins), with the examples they ran and the examples their profile
wants; a failed cell also says after how many examples its first counterexample came
(``failed_after``: the examples Hypothesis ran after that, to shrink it, are counted in
``examples`` but are not a search), and :func:`cell_text` reads
``failed after 12 of 25 examples``. A test skipped because the backend
does not claim the dtype or the mode is ``not claimed`` (a claim, not a verdict), and a
column the property has no test for is ``none``. A property with no dtype parameter has
its cell in the column ``any``. These rules are decided in :mod:`resverify.reports.verdicts`
(:func:`~resverify.reports.verdicts.cell_status`, ``worse_cell_status``, ``mode_status``);
this module only lays the verdicts out as rows and columns.

Why :func:`fold_row`: ten backends of four dtypes make forty columns, too wide for a CI
job summary; report.md folds each row's cells into one per backend (which dtypes failed,
how many of the claimed ones passed), while report.json and report.html keep every dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from resverify.impl.backend import MODES
from resverify.reports.verdicts import (
    ANY_DTYPE,
    cell_status,
    mode_status,
    ran,
    worse_cell_status,
)
from resverify.spec.ir import DTYPES

__all__ = []

_EMPTY: Mapping[str, Any] = {"status": "none", "examples": 0, "examples_wanted": 0,
                             "failed_after": None}


def _mode(prop: Mapping[str, Any]) -> str:
    return str(prop.get("mode") or "vjp")


def _columns(props: Sequence[Mapping[str, Any]],
             backends: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Every backend (in the report's order) times every dtype a property ran or was asked
    in (in :data:`resverify.spec.ir.DTYPES` order, ``any`` last)."""
    seen = {p["dtype"] or ANY_DTYPE for p in props}
    dtypes = [d for d in (*DTYPES, ANY_DTYPE) if d in seen]
    dtypes += sorted(seen - set(dtypes))  # a suite of one's own may name others
    names = list(dict.fromkeys([*(b["name"] for b in backends),
                                *(p["backend"] or "?" for p in props)]))
    return [{"backend": n, "dtype": d} for n in names for d in dtypes]


def build_matrix(props: Sequence[Mapping[str, Any]],
                 backends: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The matrix of report.json: ``columns`` (backend, dtype), ``rows`` (property, mode,
    one cell per column: status and examples), VJP rows first, and ``modes``
    (:func:`mode_summary`)."""
    by_name = {b["name"]: b for b in backends}
    columns = _columns(props, backends)
    rows: dict[tuple[int, str], dict[tuple[str, str], dict[str, Any]]] = {}
    for p in props:
        mode, backend, dtype = _mode(p), p["backend"] or "?", p["dtype"] or ANY_DTYPE
        order = MODES.index(mode) if mode in MODES else len(MODES)
        row = rows.setdefault((order, f"{p['property']}\0{mode}"), {})
        cell = row.setdefault((backend, dtype), dict(_EMPTY))
        _join(cell, p, cell_status(p, by_name.get(backend), dtype))
    out_rows = []
    for (_, key), cells in sorted(rows.items()):
        name, mode = key.split("\0")
        out_rows.append({"property": name, "mode": mode, "cells": [
            {**c, **cells.get((c["backend"], c["dtype"]), _EMPTY)} for c in columns]})
    return {"columns": columns, "rows": out_rows, "modes": mode_summary(props, backends)}


def _join(cell: dict[str, Any], prop: Mapping[str, Any], status: str) -> None:
    """Add one property record, whose cell status is ``status``, to its cell: its examples
    and wanted examples, where its first counterexample came (a test without one counts
    all its examples), and the cell's status (:func:`resverify.reports.verdicts.
    worse_cell_status`)."""
    cell["examples"] += prop["examples"] or 0
    cell["examples_wanted"] += prop.get("examples_wanted") or 0
    failed_after = prop.get("failed_after")
    if failed_after is not None or cell["failed_after"] is not None:
        cell["failed_after"] = (cell["failed_after"] or 0) + (
            failed_after if failed_after is not None else prop["examples"] or 0)
    cell["status"] = worse_cell_status(cell["status"], status)


def cell_text(cell: Mapping[str, Any]) -> str:
    """A cell as people read it: ``failed after 12 of 25 examples`` for a failed cell
    that knows where its first counterexample came, else the status and the examples run,
    ``pass (25)``; ``—`` for no test."""
    status, examples = str(cell["status"]), cell.get("examples") or 0
    failed_after, wanted = cell.get("failed_after"), cell.get("examples_wanted") or 0
    if status == "fail" and failed_after is not None:
        return f"failed after {failed_after} of {wanted or '?'} examples"
    if status == "none":
        return "—"
    return status + (f" ({examples})" if examples else "")


def column_name(column: Mapping[str, Any]) -> str:
    """The backend a column, cell or mode entry belongs to, as its header shows it: the
    backend's name, and in a joined report (:mod:`resverify.reports.join`) the machine it
    ran on, ``numpy on gpu-box``, so one backend on two machines is two names."""
    machine = column.get("machine")
    return str(column["backend"]) if machine is None else f"{column['backend']} on {machine}"


def fold_row(row: Mapping[str, Any]) -> dict[str, dict[str, list[str]]]:
    """One matrix row's cells folded per backend (:func:`column_name`, in column order):
    for each backend, the dtypes (``any`` included) in each status, in column order, e.g.
    ``{"numpy": {"pass": ["float64", "float32"], "not claimed": ["bfloat16"]}}``."""
    folded: dict[str, dict[str, list[str]]] = {}
    for c in row["cells"]:
        folded.setdefault(column_name(c), {}).setdefault(c["status"], []).append(c["dtype"])
    return folded


def mode_summary(props: Sequence[Mapping[str, Any]],
                 backends: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each backend in each mode: whether it claims the mode, the tests that ran at least
    one example, their examples, failures and expected failures, and the status
    :func:`resverify.reports.verdicts.mode_status` decides: ``fail``, ``not claimed``,
    ``pass`` or ``unjudged`` (no example ran)."""
    out = []
    for b in backends:
        for mode in MODES:
            mine = [p for p in props if p["backend"] == b["name"] and _mode(p) == mode]
            checked = [p for p in mine if ran(p)]
            claimed = mode in b["modes"]
            out.append({"backend": b["name"], "mode": mode, "claimed": claimed,
                        "status": mode_status(mine, claimed), "tests_run": len(checked),
                        "examples": sum(p["examples"] or 0 for p in checked),
                        "failed": sum(p["status"] == "fail" for p in mine),
                        "expected": sum(p["status"] == "expected" for p in mine)})
    return out
