"""Run the claim checker for the report, so that a broken checker cannot hide the suite.

The checker is :func:`resverify.cli.claims.collect_claims` (``backend_name -> list[dict]``
of :func:`resverify.spec.claims.outcome_dict` data: ``id``, ``source``, ``section``, ``statement``,
the exact side ``expected``/``observed``/``exact_status``, the backend's side under
``backends``, ``status``, ``note``). It runs once per backend; the entries of one claim
merge into one report entry holding every backend's side. When the checker cannot be
imported or breaks, the run is marked incomplete with the reason instead of failing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from resverify.reports.json_report import claim_entry
from resverify.spec.claims import overall_status

__all__ = []

Checker = Callable[..., list[dict[str, Any]]]
"""``checker(name)``; one with an ``on_claim`` parameter is also told of each claim as it
begins (:data:`resverify.cli.claims.OnClaim`)."""
Progress = Callable[[str, int, int, str], None]
"""Told ``(backend as shown, k, total, claim id)`` as each claim begins."""


@dataclass
class ClaimRun:
    claims: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    broken: bool = False


def find_checker() -> Checker:
    """The project's claim checker (imported here, so its import errors are reported)."""
    from resverify.cli.claims import collect_claims

    return collect_claims


def run_claims(backends: Mapping[str, str], checker: Checker | None = None,
               progress: Progress | None = None) -> ClaimRun:
    """Every claim for every backend, as report entries; ``progress`` is told of each
    claim as it begins.

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
    entries: list[dict[str, Any]] = []
    for name, shown in backends.items():
        try:
            if progress is None or not _tells(checker):
                raw = checker(name)
            else:
                raw = checker(name, on_claim=functools.partial(progress, shown))
        except Exception as exc:
            out.warnings.append(f"the claim checker failed on backend {name!r}: "
                                f"{type(exc).__name__}: {exc}")
            out.broken = True
            continue
        entries.extend(claim_entry(item, shown) for item in raw)
    out.claims = merge_claims(entries)
    return out


def _tells(checker: Checker) -> bool:
    """Whether ``checker`` takes ``on_claim`` (a stand-in checker need not)."""
    try:
        return "on_claim" in inspect.signature(checker).parameters
    except (TypeError, ValueError):
        return False


def merge_claims(entries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Report entries of the same claim (one per backend) as one entry with every side;
    the exact side is the same on each, a failed one is kept."""
    merged: dict[str, dict[str, Any]] = {}
    for entry in entries:
        seen = merged.get(entry["id"])
        if seen is None:
            merged[entry["id"]] = {**entry, "backends": list(entry["backends"])}
            continue
        if entry["exact_status"] != "pass":
            seen["exact_status"], seen["observed"] = entry["exact_status"], entry["observed"]
        seen["backends"] += entry["backends"]
        seen["status"] = overall_status(seen["exact_status"],
                                        (s["status"] for s in seen["backends"]))
    return list(merged.values())
