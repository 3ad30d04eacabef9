"""Find and run the claim checker, wherever it lives, without making it a hard dependency.

The claim catalog exposes ``collect_claims(backend_name) -> list[dict]`` (keys ``id``,
``source``, ``section``, ``statement``, ``expected``, ``observed``, ``status``, ``note``),
in :mod:`spec.claims` or :mod:`reports.cmd_claims`. When neither exists the report says
so in a warning instead of failing; when the checker itself breaks, the run is marked
incomplete with the reason.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reports.json_report import claim_entry

__all__ = ["ClaimRun", "find_checker", "run_claims"]

PLACES = ("spec.claims", "reports.cmd_claims")
Checker = Callable[[str], list[dict[str, Any]]]


@dataclass
class ClaimRun:
    claims: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    broken: bool = False


def find_checker() -> Checker | None:
    """``collect_claims`` from the first place that has it, or None when none does."""
    for name in PLACES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        checker = getattr(module, "collect_claims", None)
        if callable(checker):
            return checker
    return None


def run_claims(backends: Mapping[str, str], checker: Checker | None = None) -> ClaimRun:
    """Every claim for every backend, as report entries.

    ``backends`` maps each name as the user gave it (what the checker resolves) to the
    backend's own name (what the report shows).
    """
    out = ClaimRun()
    try:
        checker = checker or find_checker()
    except Exception as exc:  # a broken catalog must not hide the property results
        out.warnings.append(f"the claim checker could not be imported: {type(exc).__name__}: {exc}")
        out.broken = True
        return out
    if checker is None:
        out.warnings.append("no claim checker is installed (spec.claims.collect_claims is "
                            "missing): claims were not checked")
        return out
    for name, shown in backends.items():
        try:
            raw = checker(name)
        except Exception as exc:
            out.warnings.append(f"the claim checker failed on backend {name!r}: "
                                f"{type(exc).__name__}: {exc}")
            out.broken = True
            continue
        out.claims.extend(claim_entry(item, shown) for item in raw)
    return out
