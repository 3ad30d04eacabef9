"""The coverage table: what each law's examples reached, per backend and dtype, and the
part of the law's floor they left unreached.

Each property test records the tags its examples reached (``reached``: tag -> examples;
:mod:`resverify.properties.reach`) and the floor its law declares (``floor``: the marker
``reaches``, less the ops its backend does not claim). A law may be split into several
tests for one backend and dtype (one per branch family, the marker ``families``): the
table joins them, one cell per law, backend and dtype, so the floor is held against
everything the law sent there. A cell whose floor is not all reached is *short*: its
verdict rests on fewer kinds of example than the law is written for. A short cell does
not fail the run (the values it judged are judged right); it is listed in the report and
``tests/properties/test_coverage_floor.py`` fails on it under the ``ci`` profile.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = []


def build_coverage(properties: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per property and mode (sorted), one cell per backend and dtype its tests ran
    in: the examples they ran, the examples per tag reached, and the floor's tags left
    unreached (tests that did not run, skipped ones, count for nothing)."""
    rows: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
    for prop in properties:
        if prop["status"] in ("skipped", "xfailed"):
            continue
        cells = rows.setdefault((str(prop["property"]), str(prop["mode"])), {})
        key = (str(prop["backend"]), str(prop["dtype"] or "any"))
        cell = cells.setdefault(key, {"examples": 0, "reached": Counter(), "floor": set()})
        cell["examples"] += prop["examples"] or 0
        cell["reached"].update(prop.get("reached") or {})
        cell["floor"].update(prop.get("floor") or ())
    return [{"property": name, "mode": mode,
             "cells": [_cell(backend, dtype, cell)
                       for (backend, dtype), cell in sorted(cells.items())]}
            for (name, mode), cells in sorted(rows.items())]


def _cell(backend: str, dtype: str, cell: Mapping[str, Any]) -> dict[str, Any]:
    reached: Counter[str] = cell["reached"]
    return {"backend": backend, "dtype": dtype, "examples": cell["examples"],
            "reached": dict(sorted(reached.items())),
            "floor": sorted(cell["floor"]),
            "unreached": sorted(tag for tag in cell["floor"] if not reached[tag])}


def short_cells(coverage: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per cell that left part of its floor unreached: ``law [backend, dtype]:
    tags``."""
    return [f"{row['property']} [{cell['backend']}, {cell['dtype']}]: "
            f"{', '.join(cell['unreached'])}"
            for row in coverage for cell in row["cells"] if cell["unreached"]]


def heard(properties: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per distinct warning a backend raised, with the tests that heard it:
    ``backend: warning (n calls) [law, dtype; ...]`` (a note: never a verdict)."""
    tests: dict[tuple[str, str], list[str]] = {}
    for prop in properties:
        for warning in prop.get("backend_warnings") or ():
            tests.setdefault((str(prop["backend"]), str(warning)), []).append(
                f"{prop['property']}, {prop['dtype'] or 'any'}")
    return [f"{backend}: {warning} [{'; '.join(where)}]"
            for (backend, warning), where in sorted(tests.items())]
