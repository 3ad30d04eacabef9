"""Run the claim checker for the report, so that a broken checker cannot hide the suite.

The checker is :func:`reports.cmd_claims.collect_claims` (``backend_name -> list[dict]``
with keys ``id``, ``source``, ``section``, ``statement``, ``expected``, ``observed``,
``status``, ``note``). When it cannot be imported or breaks, the run is marked incomplete
with the reason instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reports.json_report import claim_entry

__all__ = ["ClaimRun", "find_checker", "run_claims"]

Checker = Callable[[str], list[dict[str, Any]]]


@dataclass
class ClaimRun:
    claims: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    broken: bool = False


def find_checker() -> Checker:
    """The project's claim checker (imported here, so its import errors are reported)."""
    from reports.cmd_claims import collect_claims

    return collect_claims


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
